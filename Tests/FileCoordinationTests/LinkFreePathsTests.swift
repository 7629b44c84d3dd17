import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The memory of link-free paths (LinkFreePaths.swift): an access set up from memory must refuse a path whose way
/// another process changed, exactly as the kernel's answer would. Each test first makes sure the memory answers
/// (its counts move), then has a helper process change the way once, then expects the next access to be refused
/// as leading out of the container.
///
/// Mutants these tests catch (each run once, the suite then failing):
/// - the event handler ignoring `IN_CREATE` / `IN_MOVED_TO` (nothing forgotten): every test;
/// - `Watcher.hasHandledEveryEvent` answering true without looking at the queue (`unhandledEventBlocksTheMemory`:
///   the watcher is stalled, so the change's event waits unread);
/// - a path in a busy directory answered from its parent without asking its own name
///   (`busyDirectoryStillAsksTheItemsName`);
/// - a dropped directory's watch kept for the directories beneath it (`remadeDirectoryIsWatchedAgain`: the deeper
///   watch stays on the directory moved aside, and a link planted in the new one goes unheard);
/// - `Watcher.watchLater` answering a path watched before with that watch, as `watch` does
///   (`pathWatchedBeforeIsResolvedAgain`: that watch follows the directory moved aside);
/// - `Watcher.watch` of a path not watched yet replacing the inode's mask instead of adding to it
///   (`anotherWatchOfTheDirectoryKeepsTheMask`).
/// Not caught, being races of microseconds: a check's result remembered although an event came during it; the
/// watcher's `reading` count left out (an event read and not yet handled).
@Suite(.runSlot(.minutes(10)), .serialized) struct LinkFreePathsTests {
  static let group = "group.com.example.linkfree"

  struct Fixture: CustomStringConvertible {
    let root: TestRoot
    let container: GroupContainer
    let space: CoordinationSpace
    let outside: String
    let coordinator = FileCoordinator()

    init() throws {
      root = try TestRoot()
      container = try root.container(LinkFreePathsTests.group)
      space = try CoordinationSpace.locate(container.documentsURL).0
      outside = root.path + "/outside"
      try FileManager.default.createDirectory(atPath: outside + "/deeper", withIntermediateDirectories: true)
      #expect(FileManager.default.createFile(atPath: outside + "/file", contents: Data("outside".utf8)))
    }

    var description: String { "the container at \(container.path)" }

    func url(_ relative: String) -> URL { container.documentsURL.appendingPathComponent(relative) }

    /// Makes `Documents/<relative>` (and what leads to it).
    func makeDirectory(_ relative: String) throws {
      try FileManager.default.createDirectory(
        atPath: container.path + "/Documents/" + relative, withIntermediateDirectories: true)
    }

    /// `Documents/link`, a symlink to the directory outside.
    func makeLinkOut() throws {
      try FileManager.default.createSymbolicLink(
        atPath: container.path + "/Documents/link", withDestinationPath: outside)
    }

    /// Accesses `relative` until the memory answers (`counted` moves), at most 10 s (other tests' events on the
    /// process's inotify queue can keep it from answering for a while); with `writing`, each access writes it.
    func warm(_ relative: String, counted: KeyPath<LinkFreePaths.Counts, Int>, writing: Bool = false) async throws
      -> Bool
    {
      let before = space.linkFreePaths.counts[keyPath: counted]
      let deadline = Date().addingTimeInterval(Wait.condition)
      var i = 0
      while Date() < deadline {
        try coordinator.coordinate(writingItemAt: url(relative)) { url in
          if writing { try container.write(Data("\(i)".utf8), to: url) }
        }
        if space.linkFreePaths.counts[keyPath: counted] > before { return true }
        i += 1
        if !writing { try? await Task.sleep(for: .seconds(0.002)) }
      }
      return false
    }

    /// `Documents/sub` with `Documents/link`, a link out, beside it; then `sub/x` accessed until remembered.
    func subBesideALinkOut() async throws {
      try makeDirectory("sub")
      try makeLinkOut()
      try await #require(try warm("sub/x", counted: \.remembered), "the memory never answered")
    }

    /// Runs a one-shot helper (PathAttacks.swift) and waits for it.
    func attack(_ command: HelperCommand) async {
      let child = try? Child(command, root: root.path, group: LinkFreePathsTests.group)
      #expect(await child?.exit() == 0, "\(command): \(child?.errors.text ?? "")")
    }

    /// Whether an access to `relative` is refused as leading out of the container.
    func isRefused(_ relative: String) -> Bool {
      do {
        try coordinator.coordinate(writingItemAt: url(relative)) { _ in }
        return false
      } catch let error as FileCoordinatorError where error.containerError?.code == .pathEscapesContainer {
        return true
      } catch {
        Issue.record("unexpected: \(error)")
        return false
      }
    }
  }

  /// A directory on the way swapped with a link out (`renameat2(RENAME_EXCHANGE)`, as the swap attack does).
  @Test(.runSlot(.minutes(3))) func exchangedDirectoryIsNoticed() async throws {
    let f = try Fixture()
    try await f.subBesideALinkOut()
    await f.attack(.exchange(a: "Documents/sub", b: "Documents/link"))
    #expect(f.isRefused("sub/x"))
  }

  /// The item itself replaced by a link to a file outside.
  @Test(.runSlot(.minutes(3))) func itemReplacedByALinkIsNoticed() async throws {
    let f = try Fixture()
    try f.makeDirectory("sub")
    #expect(FileManager.default.createFile(atPath: f.container.path + "/Documents/sub/target", contents: Data()))
    try await #require(try await f.warm("sub/target", counted: \.remembered), "the memory never answered")
    await f.attack(.plantLink(item: "Documents/sub/target", target: f.outside + "/file"))
    #expect(f.isRefused("sub/target"))
  }

  /// The fast path (FastAccess.swift) keeps the memory's answer with its plan: the same change must reach it.
  @Test(.runSlot(.minutes(3))) func exchangedDirectoryIsNoticedByTheFastPath() async throws {
    let f = try Fixture()
    try await f.subBesideALinkOut()
    try await #require(await FastAccessTests.warm(f.coordinator, f.url("sub/x")), "the fast path never served")
    await f.attack(.exchange(a: "Documents/sub", b: "Documents/link"))
    #expect(f.isRefused("sub/x"))
  }

  /// And with the change's event still in the queue.
  @Test(.runSlot(.minutes(3), alone: true)) func unhandledEventBlocksTheFastPath() async throws {
    let f = try Fixture()
    try await f.subBesideALinkOut()
    try await #require(await FastAccessTests.warm(f.coordinator, f.url("sub/x")), "the fast path never served")
    await withWatcherStalled(nanoseconds: 3_000_000_000) {
      await f.attack(.exchange(a: "Documents/sub", b: "Documents/link"))
      #expect(f.isRefused("sub/x"))
    }
  }

  /// The same change while the watcher reads nothing: its event waits in the queue, and the memory must not answer.
  @Test(.runSlot(.minutes(3), alone: true)) func unhandledEventBlocksTheMemory() async throws {
    let f = try Fixture()
    try await f.subBesideALinkOut()
    await withWatcherStalled(nanoseconds: 3_000_000_000) {
      await f.attack(.exchange(a: "Documents/sub", b: "Documents/link"))
      #expect(f.isRefused("sub/x"))
    }
  }

  /// A directory on the way moved aside and made again, then a link planted in the new one: the watches beneath
  /// the old one must go with it, or the new directory is never watched.
  @Test(.runSlot(.minutes(3))) func remadeDirectoryIsWatchedAgain() async throws {
    let f = try Fixture()
    try f.makeDirectory("sub/deeper")
    try await #require(try await f.warm("sub/deeper/x", counted: \.remembered), "the memory never answered")
    await f.attack(.remake(directory: "Documents/sub"))
    try await #require(try await f.warm("sub/deeper/x", counted: \.remembered), "the memory never answered again")
    await f.attack(.plantLink(item: "Documents/sub/deeper/x", target: f.outside + "/file"))
    #expect(f.isRefused("sub/deeper/x"))
  }

  /// A directory another part of this process watches by path, moved aside and made again: that watch follows the
  /// old directory, and the memory must watch the one the path names now, not reuse that watch.
  @Test(.runSlot(.minutes(3))) func pathWatchedBeforeIsResolvedAgain() async throws {
    let f = try Fixture()
    try f.makeDirectory("sub/deeper")
    let other = try Watcher.shared.watch(f.container.path + "/Documents/sub") { _ in }
    defer { Watcher.shared.cancel(other) }
    await f.attack(.remake(directory: "Documents/sub"))
    try await #require(try await f.warm("sub/x", counted: \.remembered), "the memory never answered")
    await f.attack(.plantLink(item: "Documents/sub/x", target: f.outside + "/file"))
    #expect(f.isRefused("sub/x"))
  }

  /// Another part of this process watching a directory on the way under another spelling of its path, for other
  /// events: its watch must add to the directory's mask, not replace the memory's.
  @Test(.runSlot(.minutes(3))) func anotherWatchOfTheDirectoryKeepsTheMask() async throws {
    let f = try Fixture()
    try await f.subBesideALinkOut()
    let other = try Watcher.shared.watch(f.container.path + "/Documents/", mask: Watcher.delete) { _ in }
    defer { Watcher.shared.cancel(other) }
    await f.attack(.exchange(a: "Documents/sub", b: "Documents/link"))
    #expect(f.isRefused("sub/x"))
  }

  /// A directory written to many times a second is not watched (each event would wake the watcher, at the
  /// writer's cost): its items are answered from their parent's memory, and their own name is still asked.
  @Test(.runSlot(.minutes(3))) func busyDirectoryStillAsksTheItemsName() async throws {
    let f = try Fixture()
    try f.makeDirectory("busy")
    // Written until the directory is found busy (its watch may be placed only after the first writes).
    try #require(
      try await f.warm("busy/f", counted: \.parentRemembered, writing: true), "the parent's memory never answered")
    await f.attack(.plantLink(item: "Documents/busy/f", target: f.outside + "/file"))
    #expect(f.isRefused("busy/f"))
  }
}
