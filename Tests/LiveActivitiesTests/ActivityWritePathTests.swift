import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The update's write path: one event per update for observers, the store's lock shared by threads of a process and
/// kept on a file that exists.
///
/// Mutants these tests catch (each made once by hand, seen failing, restored):
/// - The lock file opened read-write and closed at every update (as before): `anUpdateByAnotherProcessIsOneEvent`
///   sees an `IN_CLOSE_WRITE` of `lock` per update.
/// - The record's temp file made beside it (no staging directory): the same test sees the temp file's events.
/// - The record replaced twice per update: the same test sees two `IN_MOVED_TO` for most updates (each update's events
///   are read before the next begins; read at the end, the kernel's merging of unread ones could hide it).
/// - No in-process turn before the flock (`serial` not taken): `threadsOfOneProcessLoseNoUpdate` loses increments
///   (flock on one open file description excludes nothing).
/// - The removed lock file not noticed (no link-count check): `aRemovedLockFileIsMadeAgain` finds no lock file.
@Suite(.runSlot(.minutes(3))) struct ActivityWritePathTests {
  /// Five updates by other processes, one at a time, each one's events read before the next begins: each is
  /// exactly one event, the record's `IN_MOVED_TO`. (Read only after all five, the count would be 1 to 5: the kernel
  /// merges an unread `IN_MOVED_TO` of the same name into the one before it — seen in a loaded parallel run, and
  /// shown by `WatcherBackendTests.theKernelMergesUnreadRenamesOfOneName`; the watcher loses none,
  /// `WatcherBackendTests.everyRenameByAnotherProcessReachesTheConsumer`.)
  @Test func anUpdateByAnotherProcessIsOneEvent() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let store = try ActivityStore(container: f.container)
    let (events, sink) = AsyncStream<Watcher.Event>.makeStream()
    let token = try Watcher.shared.watch(store.absoluteDirectory) { sink.yield($0) }
    defer { Watcher.shared.cancel(token) }
    var iterator = events.makeAsyncIterator()
    for update in 0..<5 {
      let liker = try f.helper(.actLike(id: activity.id, count: 1, side: .home))
      #expect(await liker.exit() == 0)
      // A marker after the update: its event is queued behind every event the update made.
      try store.root.replaceFile(ActivityStore.directory + "/marker-\(update)", with: [1], mode: 0o600)
      var seen: [String] = []
      while let event = await iterator.next(), event.name != "marker-\(update)" {
        seen.append("\(event.name) 0x\(String(event.mask, radix: 16))")
      }
      #expect(seen == ["\(activity.id).activity 0x80"], "update \(update)")
    }
    #expect(activity.content.state.homeLikes == 5)
  }

  @Test func threadsOfOneProcessLoseNoUpdate() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let store = activity.store
    // Real threads (not the two cooperative ones), all on this one store and its one lock descriptor.
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
      Thread.detachNewThread {
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
          for _ in 0..<25 {
            _ = try? store.modify(activity.id) { (record, _) throws(ActivityError) in
              guard case .object(var state) = record.contentState, case .integer(let likes)? = state["homeLikes"]
              else { return false }
              state["homeLikes"] = .integer(likes + 1)
              record.contentState = .object(state)
              return true
            }
          }
        }
        done.resume()
      }
    }
    #expect(activity.content.state.homeLikes == 100)
  }

  @Test func aRemovedLockFileIsMadeAgain() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try await activity.update(score(1, 0))  // the store's lock descriptor is open from now on
    let lock = activity.store.absoluteDirectory + "/lock"
    try FileManager.default.removeItem(atPath: lock)
    try await activity.update(score(2, 0))
    // Locked again on the file others open, not on the removed one only this process still holds.
    #expect(FileManager.default.fileExists(atPath: lock))
    #expect(activity.content.state.homeScore == 2)
  }
}
