import Foundation
import TestSupport
import Testing

@testable import FileCoordination

/// The fast path of a repeated access (FastAccess.swift): once a coordinator keeps a plan for an item, what the plan
/// skips must still be noticed when it changes. Mutants these tests catch (each run once, a test then failing):
/// - `PresenterRegistry.isUnchanged(since:)` answering true (a presenter registered since is never asked):
///   `aPresenterThatAppearsIsAskedByTheNextAccess`,
///   `aPresenterOfAnotherItemLeavesTheFastPathAndOneOfTheDirectoryIsTold`;
/// - `LinkFreePaths.Version.holds(_:)` without the watcher's proof (its `ioctl`), or the version not moved by an
///   event: `LinkFreePathsTests.exchangedDirectoryIsNoticedByTheFastPath` and `unhandledEventBlocksTheFastPath`.
@Suite(.runSlot(.minutes(2))) struct FastAccessTests {
  let group = "group.com.example.fastaccess"

  /// Whole accesses of `url` until `coordinator` keeps a plan for it, then one more that must go the fast way
  /// (the link-free memory is not asked); at most `Wait.condition` (other tests' events can hold the memory back).
  static func warm(_ coordinator: FileCoordinator, _ url: URL) async throws -> Bool {
    let space = try CoordinationSpace.locate(url).0
    let deadline = Date().addingTimeInterval(Wait.condition)
    while Date() < deadline {
      let asked = space.linkFreePaths.counts.remembered
      try coordinator.coordinate(writingItemAt: url) { _ in }
      if coordinator.fastPlan.withLock({ $0 != nil }) && space.linkFreePaths.counts.remembered == asked {
        return true
      }
      try await Task.sleep(for: .milliseconds(2))
    }
    return false
  }

  /// A presenter registered in another process after the plan was kept: the next access asks it, as a whole one.
  @Test func aPresenterThatAppearsIsAskedByTheNextAccess() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("a.txt")
    try container.write(Data("0".utf8), to: url)
    let coordinator = FileCoordinator()
    try await #require(await Self.warm(coordinator, url), "the fast path never served the access")
    let presenter = try Child(.present(item: "Documents/a.txt"), root: root.path, group: group)
    defer { presenter.kill() }
    #expect(await presenter.line { $0.hasPrefix("ready") } != nil)
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("1".utf8), to: $0) }
    // "coordinated": told by the access, not by the presenter's own inotify watch of the file.
    #expect(await presenter.line { $0 == "relinquishToWriter coordinated \(getpid())" } != nil)
    #expect(await presenter.line { $0 == "didChange coordinated \(getpid())" } != nil)
  }

  /// A presenter of another item does not keep the fast path away; one of the item's directory, registered since,
  /// is told of the write.
  @Test func aPresenterOfAnotherItemLeavesTheFastPathAndOneOfTheDirectoryIsTold() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("b.txt")
    try container.write(Data("0".utf8), to: url)
    let other = try Child(.present(item: "Documents/other.txt"), root: root.path, group: group)
    defer { other.kill() }
    #expect(await other.line { $0.hasPrefix("ready") } != nil)
    let coordinator = FileCoordinator()
    try await #require(await Self.warm(coordinator, url), "the fast path never served the access")
    let directory = try Child(.present(item: "Documents"), root: root.path, group: group)
    defer { directory.kill() }
    #expect(await directory.line { $0.hasPrefix("ready") } != nil)
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("1".utf8), to: $0) }
    #expect(await directory.line { $0.hasPrefix("subitemDidChange coordinated \(getpid())") } != nil)
    #expect(!other.output.contains { $0.contains("coordinated \(getpid())") }, "\(other.output)")
  }

  /// The fast path takes the locks the whole way takes: another process holding the item excludes it.
  @Test func anItemHeldByAnotherProcessIsWaitedFor() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("held.txt")
    let coordinator = FileCoordinator()
    try await #require(await Self.warm(coordinator, url), "the fast path never served the access")
    let holder = try Child(.hold(mode: .write, item: "Documents/held.txt"), root: root.path, group: group)
    defer { holder.kill() }
    #expect(await holder.line { $0 == "locked" } != nil, "the other process did not take the lock")
    coordinator.lockTimeout = .milliseconds(300)
    #expect(throws: FileCoordinatorError.self) {
      try coordinator.coordinate(writingItemAt: url) { _ in
        Issue.record("accessor ran while another process held the lock")
      }
    }
  }
}
