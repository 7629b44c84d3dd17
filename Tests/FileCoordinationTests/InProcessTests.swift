import Foundation
import Synchronization
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Coordination between threads of one process (flock alone cannot do this: one descriptor, one lock).
@Suite(.runSlot(.minutes(3))) struct InProcessTests {
  @Test func writersExcludeEachOtherAcrossCoordinatorsOfOneProcess() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("counter")
    try container.write(Data("0".utf8), to: url)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<4 {
        group.addTask {
          for _ in 0..<50 {
            try await FileCoordinator().coordinate(with: [.writingIntent(with: url)]) {
              let value = Int(String(decoding: try container.contents(of: url), as: UTF8.self))!
              try container.write(Data("\(value + 1)".utf8), to: url)
            }
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(String(decoding: try container.contents(of: url), as: UTF8.self) == "200")
  }

  @Test func theSameCoordinatorNeverBlocksItself() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("nested")
    let coordinator = FileCoordinator()
    let ran = await expectCompletes("a write, read and write nested in one coordinator") {
      try coordinator.coordinate(writingItemAt: url) { _ in
        try coordinator.coordinate(readingItemAt: url) { _ in
          try coordinator.coordinate(writingItemAt: url) { _ in true }
        }
      }
    }
    #expect(ran == true)
  }

  @Test func coordinatorsWithTheSamePresenterShareTheirLocks() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("shared")
    let presenter = QuietPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    defer { FileCoordinator.removeFilePresenter(presenter) }
    let ran = await expectCompletes("a write nested in a write of another coordinator with the same presenter") {
      try FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { _ in
        try FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { _ in true }
      }
    }
    #expect(ran == true)
  }

  @Test func aReadCannotBeUpgradedToAWriteByItsOwner() throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("upgrade")
    let coordinator = FileCoordinator()
    #expect(throws: FileCoordinatorError.self) {
      try coordinator.coordinate(readingItemAt: url) { _ in
        try coordinator.coordinate(writingItemAt: url) { _ in Issue.record("upgraded") }
      }
    }
  }

  @Test func cancelStopsAWaitingAccessBeforeItsAccessorRuns() throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("cancel")
    let holder = FileCoordinator()
    let waiter = FileCoordinator()
    let result = Mutex<(any Error)?>(nil)
    try holder.coordinate(writingItemAt: url) { _ in
      let thread = Thread {
        do {
          _ = try waiter.coordinate(writingItemAt: url) { _ in Issue.record("accessor ran after cancel") }
        } catch { result.withLock { $0 = error } }
      }
      thread.start()
      // `cancel()` stops only accesses already under way: cancelled until it ends, whenever the waiter began
      // (one cancel after a pause missed a waiter that had not started yet on a busy machine).
      let deadline = ContinuousClock.now + .seconds(Wait.condition)
      while result.withLock({ $0 == nil }) && ContinuousClock.now < deadline {
        waiter.cancel()
        Thread.sleep(forTimeInterval: 0.01)
      }
    }
    let error = result.withLock { $0 }
    guard (error as? FileCoordinatorError)?.code == .cancelled else {
      Issue.record("expected cancelled, got \(String(describing: error))")
      return
    }
  }

  @Test func accessorErrorsPropagateAndReleaseTheLocks() throws {
    struct Boom: Error {}
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("boom")
    #expect(throws: Boom.self) { try FileCoordinator().coordinate(writingItemAt: url) { _ in throw Boom() } }
    #expect(try FileCoordinator().coordinate(writingItemAt: url) { _ in 1 } == 1)
  }

  @Test func taskCancellationCancelsTheAsyncWait() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("task")
    let holder = try Child(
      .hold(mode: .write, item: "Documents/task"), root: root.path, group: "group.com.example.tests")
    await holder.line { $0 == "locked" }
    let task = Task {
      try await FileCoordinator().coordinate(with: [.writingIntent(with: url)]) {
        Issue.record("accessor ran while another process held the lock")
      }
    }
    try await Task.sleep(for: .milliseconds(200))
    task.cancel()
    await #expect(throws: FileCoordinatorError.self) { try await task.value }
    holder.kill()
  }

  @Test func presentersInThisProcessHearOtherCoordinatorsButNotTheirOwn() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("local.txt")
    let presenter = RecordingPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    defer { FileCoordinator.removeFilePresenter(presenter) }
    try FileCoordinator(filePresenter: presenter).coordinate(writingItemAt: url) { url in
      try container.write(Data("mine".utf8), to: url)
    }
    try FileCoordinator().coordinate(writingItemAt: url) { url in
      try container.write(Data("theirs".utf8), to: url)
    }
    #expect(
      await presenter.waitFor(["relinquishToWriter coordinated", "didChange coordinated", "reacquire coordinated"]))
    try? await Task.sleep(for: .seconds(0.3))
    // Exactly one write was reported: the presenter's own write was neither messaged nor seen through inotify.
    #expect(presenter.events.filter { $0.hasPrefix("didChange") }.count == 1, "\(presenter.events)")
  }
}

/// A presenter that ignores everything.
final class QuietPresenter: FilePresenter, @unchecked Sendable {  // immutable
  let presentedItemURL: URL?
  let presentedItemOperationQueue = OperationQueue()
  init(url: URL) { presentedItemURL = url }
}

/// A presenter that records "<event> <coordinated|uncoordinated>" lines.
final class RecordingPresenter: FilePresenter, @unchecked Sendable {  // `log` is a Mutex
  let presentedItemURL: URL?
  let presentedItemOperationQueue: OperationQueue = {
    let q = OperationQueue()
    q.maxConcurrentOperationCount = 1
    return q
  }()
  private let log = Mutex<[String]>([])

  init(url: URL) { presentedItemURL = url }

  var events: [String] { log.withLock { $0 } }

  /// The events but resyncs. This process's tests share one watcher, and a queue overflow (some tests stall the
  /// watcher on purpose) tells every presenter of the process that its item may have changed.
  var eventsBesideResyncs: [String] { events.filter { !$0.hasSuffix(" resync") } }

  /// Whether an uncoordinated change was heard within `timeout` seconds, a resync counting as one (the overflow
  /// that caused it may have dropped the change's event).
  func heardUncoordinatedChange(timeout: Double = Wait.condition) async -> Bool {
    await eventually(within: timeout) { events.contains { $0.hasPrefix("didChange uncoordinated") } }
  }

  /// Records "<event> <coordinated|uncoordinated>[ resync]", as gc-test-helper's presenter prints it.
  private func record(_ event: String) {
    let origin = ChangeOrigin.current
    let kind = origin?.isCoordinated == true ? "coordinated" : "uncoordinated"
    log.withLock { $0.append("\(event) \(kind)\(origin?.isResync == true ? " resync" : "")") }
  }

  /// Waits until `expected` appear in order (other events may interleave).
  func waitFor(_ expected: [String], timeout: Double = Wait.condition) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      var remaining = expected[...]
      for event in events where event == remaining.first { remaining = remaining.dropFirst() }
      if remaining.isEmpty { return true }
      try? await Task.sleep(for: .seconds(0.01))
    }
    return false
  }

  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    record("relinquishToWriter")
    writer { self.record("reacquire") }
  }
  func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    record("relinquishToReader")
    reader { self.record("reacquire") }
  }
  func presentedItemDidChange() { record("didChange") }
  func presentedSubitemDidAppear(at url: URL) { record("subitemDidAppear \(url.lastPathComponent)") }
  func presentedSubitemDidChange(at url: URL) { record("subitemDidChange \(url.lastPathComponent)") }
}
