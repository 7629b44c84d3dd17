import Foundation
import Synchronization
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The decisions of the "Coordination semantics" article, one test each: where we follow Apple's
/// `NSFileCoordinator` header and where we depart from it (and how the departure behaves).
///
/// Mutants this suite catches (each test was written first and failed on the code before the decision): a directory
/// read that messages presenters inside it; coordinators made with one presenter sharing their locks across threads
/// (32 overlapping writes of 80); a move that tells the parent's presenter both "moved" and "appeared"; a resolved
/// read that ignores `.resolvesSymbolicLink`. The lock-wait bound (``FileCoordinator/lockTimeout``) is tested in
/// `PresenterSemanticsTests.aLockTimeoutFailsAnAccessBehindAStoppedHolder`.
@Suite(.runSlot(.minutes(3))) struct AppleSemanticsTests {
  let group = "group.com.example.tests"

  /// Apple: reading an item messages presenters of that item (and of file packages around it), not of what is
  /// inside a directory; a directory read does not lock its contents either.
  @Test func aDirectoryReadAsksOnlyThePresentersOfTheDirectory() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let dir = container.documentsURL.appendingPathComponent("album")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let inner = dir.appendingPathComponent("a.txt")
    try container.write(Data("a".utf8), to: inner)
    let dirPresenter = try Child(.present(item: "Documents/album"), root: root.path, group: group)
    let itemPresenter = try Child(.present(item: "Documents/album/a.txt"), root: root.path, group: group)
    await dirPresenter.line { $0.hasPrefix("ready") }
    await itemPresenter.line { $0.hasPrefix("ready") }
    try FileCoordinator().coordinate(readingItemAt: dir, options: .withoutChanges) { _ in }
    await dirPresenter.line { $0 == "relinquishToReader coordinated \(getpid())" }
    // A fence: messages to one process arrive in order, so a relinquish for the directory read would come first.
    try FileCoordinator().coordinate(writingItemAt: inner) { try container.write(Data("b".utf8), to: $0) }
    await itemPresenter.line { $0 == "didChange coordinated \(getpid())" }
    #expect(!itemPresenter.output.contains { $0.hasPrefix("relinquishToReader") }, "\(itemPresenter.output)")
    dirPresenter.kill()
    itemPresenter.kill()
  }

  /// Apple: `init(filePresenter:)` exempts that presenter from messages; it does not make two coordinators one.
  /// Two threads writing one file through coordinators made with one presenter exclude each other.
  @Test func coordinatorsMadeWithOnePresenterExcludeEachOtherAcrossThreads() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("one-presenter")
    let presenter = QuietPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    defer { FileCoordinator.removeFilePresenter(presenter) }
    let inside = Atomic<Int>(0)
    let overlaps = Atomic<Int>(0)
    let done = Atomic<Int>(0)
    for _ in 0..<2 {
      Thread {
        for _ in 0..<40 {
          try? FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { _ in
            if inside.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
              overlaps.add(1, ordering: .relaxed)
            }
            usleep(500)
            inside.subtract(1, ordering: .sequentiallyConsistent)
          }
        }
        done.add(1, ordering: .sequentiallyConsistent)
      }.start()
    }
    while done.load(ordering: .sequentiallyConsistent) < 2 { try? await Task.sleep(for: .microseconds(1000)) }
    #expect(overlaps.load(ordering: .relaxed) == 0, "two coordinators of one presenter wrote at the same time")
  }

  /// The departure that keeps the exemption useful: a nested access on the same thread by another coordinator
  /// made with the same presenter does not wait for the outer one (Apple's would deadlock here).
  @Test func aNestedAccessOfOnePresenterOnOneThreadDoesNotDeadlock() throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("nested")
    let presenter = QuietPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    defer { FileCoordinator.removeFilePresenter(presenter) }
    let ran = try FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { _ in
      try FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { _ in true }
    }
    #expect(ran)
  }

  /// A move inside a presented directory: its presenter hears `presentedSubitem(at:didMoveTo:)` once, and no
  /// "appeared" for the destination; a move into it from elsewhere is an "appeared".
  @Test func aMoveTellsTheDirectoryPresenterOnce() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let box = container.documentsURL.appendingPathComponent("box")
    try FileManager.default.createDirectory(at: box, withIntermediateDirectories: true)
    let a = box.appendingPathComponent("a.txt")
    let b = box.appendingPathComponent("b.txt")
    let outside = container.documentsURL.appendingPathComponent("outside.txt")
    let c = box.appendingPathComponent("c.txt")
    try container.write(Data("a".utf8), to: a)
    try container.write(Data("o".utf8), to: outside)
    let presenter = try Child(.present(item: "Documents/box"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    for (from, to) in [(a, b), (outside, c)] {
      let coordinator = FileCoordinator()
      try coordinator.coordinate(writingItemAt: from, options: .forMoving, writingItemAt: to, options: .forReplacing) {
        source, destination in
        try FileManager.default.moveItem(at: source, to: destination)
        coordinator.item(at: source, didMoveTo: destination)
      }
    }
    await presenter.line { $0 == "subitemDidAppear coordinated \(getpid()) c.txt" }
    let events = presenter.output.filter { $0.hasPrefix("subitem") }
    #expect(
      events == [
        "subitemDidMove coordinated \(getpid()) a.txt>b.txt", "subitemDidAppear coordinated \(getpid()) c.txt",
      ], "\(presenter.output)")
    presenter.kill()
  }

  /// Two accesses of one coordinator on two threads (#34 item 5): a move recorded by one accessor reaches that
  /// access's presenters, whatever the other access does meanwhile. Here the second access begins while the first
  /// accessor, having moved its item, waits. Mutant: the moves kept per coordinator (the code before) → the second
  /// access's begin cleared the recorded move, and the presenter of the moved file heard nothing.
  @Test func aMoveReachesItsPresenterWhileTheSameCoordinatorAccessesAnotherItem() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let a = container.documentsURL.appendingPathComponent("moved-a.txt")
    let b = container.documentsURL.appendingPathComponent("moved-b.txt")
    let other = container.documentsURL.appendingPathComponent("other.txt")
    try container.write(Data("a".utf8), to: a)
    try container.write(Data("o".utf8), to: other)
    let presenter = try Child(.present(item: "Documents/moved-a.txt"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    let coordinator = FileCoordinator()
    let moved = DispatchSemaphore(value: 0)
    let secondBegan = DispatchSemaphore(value: 0)
    let overlapped = Atomic<Bool>(false)
    let first = Thread {
      try? coordinator.coordinate(writingItemAt: a, options: .forMoving, writingItemAt: b, options: .forReplacing) {
        source, destination in
        try FileManager.default.moveItem(at: source, to: destination)
        coordinator.item(at: source, didMoveTo: destination)
        moved.signal()
        overlapped.store(secondBegan.wait(timeout: .now() + 30) == .success, ordering: .relaxed)
      }
    }
    first.start()
    #expect(await Task.detached { moved.wait(timeout: .now() + 30) == .success }.value, "the first access never ran")
    try coordinator.coordinate(writingItemAt: other) { url in
      secondBegan.signal()
      try container.write(Data("o2".utf8), to: url)
    }
    let line = await presenter.line { $0.hasPrefix("didMove ") }
    let didOverlap = overlapped.load(ordering: .relaxed)
    #expect(didOverlap, "the accesses did not overlap")
    #expect(line == "didMove coordinated \(getpid()) moved-b.txt", "\(presenter.output)")
    presenter.kill()
  }

  /// One coordinator's accesses one after the other: a move the first recorded is told by the first alone; the
  /// second, a write of the moved item's old path, is something new appearing (its move log is the first's, used
  /// again: FileCoordinator.moveLog). Mutant: the log used again without emptying it → the second access told the
  /// move again.
  @Test func aMoveIsToldOnlyByTheAccessThatRecordedIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let box = container.documentsURL.appendingPathComponent("box2")
    try FileManager.default.createDirectory(at: box, withIntermediateDirectories: true)
    let a = box.appendingPathComponent("a.txt")
    let b = box.appendingPathComponent("b.txt")
    try container.write(Data("a".utf8), to: a)
    let presenter = try Child(.present(item: "Documents/box2"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: a, options: .forMoving, writingItemAt: b, options: .forReplacing) {
      source, destination in
      try FileManager.default.moveItem(at: source, to: destination)
      coordinator.item(at: source, didMoveTo: destination)
    }
    try coordinator.coordinate(writingItemAt: a) { try container.write(Data("a2".utf8), to: $0) }
    await presenter.line { $0 == "subitemDidAppear coordinated \(getpid()) a.txt" }
    let events = presenter.output.filter { $0.hasPrefix("subitem") }
    #expect(
      events == [
        "subitemDidMove coordinated \(getpid()) a.txt>b.txt", "subitemDidAppear coordinated \(getpid()) a.txt",
      ], "\(presenter.output)")
    presenter.kill()
  }

  /// Items are paths, as Apple's are URLs: a hard link and a symlink are items of their own. Reading a symlink
  /// with `.resolvesSymbolicLink` coordinates its target instead.
  @Test func linksAreItemsOfTheirOwnUnlessResolved() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let target = container.documentsURL.appendingPathComponent("target.txt")
    let hard = container.documentsURL.appendingPathComponent("hard.txt")
    let soft = container.documentsURL.appendingPathComponent("soft.txt")
    try container.write(Data("t".utf8), to: target)
    try FileManager.default.linkItem(at: target, to: hard)
    try FileManager.default.createSymbolicLink(atPath: soft.path, withDestinationPath: "target.txt")
    let holder = try Child(.hold(mode: .write, item: "Documents/target.txt"), root: root.path, group: group)
    await holder.line { $0 == "locked" }
    // The other process holds a write of target.txt: its hard link and the symlink itself are free.
    #expect(try FileCoordinator().coordinate(writingItemAt: hard) { _ in true })
    #expect(try FileCoordinator().coordinate(readingItemAt: soft) { _ in true })
    // Resolving the symlink coordinates target.txt, which is held.
    let coordinator = FileCoordinator()
    let resolved = Mutex<URL?>(nil)
    let waiter = Thread {
      _ = try? coordinator.coordinate(readingItemAt: soft, options: .resolvesSymbolicLink) { url in
        resolved.withLock { $0 = url }
      }
    }
    waiter.start()
    try? await Task.sleep(for: .seconds(0.3))
    #expect(resolved.withLock { $0 } == nil, "a resolved read of the symlink ran while its target was held")
    holder.kill()
    for _ in 0..<3000 where resolved.withLock({ $0 == nil }) { try? await Task.sleep(for: .seconds(0.01)) }
    #expect(resolved.withLock { $0?.lastPathComponent } == "target.txt")
  }
}
