import Foundation
import Glibc
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// What the watcher's backend (libinotifytools behind `InotifyTools`) must keep, across real processes: a watcher
/// started late still works (or is refused cleanly: the library's `select` takes no descriptor ≥ 1,024), a watch
/// removed and added again hears the next change, a stop wakes the thread, and no event another process causes is
/// lost on the way to the consumer.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - the wake-up eventfd made before the library's instance (it takes the one free descriptor below 1,024):
///   `aWatcherStartedWithManyDescriptorsOpenWorks` hears nothing, the watcher refused;
/// - no check of the descriptor against FD_SETSIZE: `aWatcherThatWouldGetADescriptorAbove1024IsRefused` sees the
///   helper abort in the library's `select` ("bit out of range 0 - FD_SETSIZE on fd_set");
/// - watches added through the library's table (`inotifytools_watch_file`, then `inotifytools_wd_from_filename`):
///   `aWatchRemovedAndAddedAgainHearsTheNextChange` hears nothing in the directory made again (the table answers the
///   dropped watch);
/// - `stop` without waking the thread: `stoppingTheWatcherWakesItsThread` never sees "stopped" (the thread waits in
///   `poll` without a timeout);
/// - the consumer's handler skipped for every other event: `everyRenameByAnotherProcessReachesTheConsumer` waits
///   for an acknowledgement that never comes.
@Suite(.runSlot(.minutes(3))) struct WatcherBackendTests {
  static let group = "group.com.example.watcher"

  /// 1,100 descriptors open, one below 1,024 free: the library's instance takes it, and the watcher works.
  @Test func aWatcherStartedWithManyDescriptorsOpenWorks() async throws {
    let root = try TestRoot()
    let child = try Child(
      .watchAfterDescriptors(directory: root.path, open: 1100, freeSlot: 700), root: root.path, group: Self.group)
    #expect(await child.line { $0.hasPrefix("descriptors") } == "descriptors 1100 lowest free 700")
    let started = await child.line { $0 == "watching" || $0.hasPrefix("unavailable") }
    try #require(started == "watching")
    #expect(FileManager.default.createFile(atPath: root.path + "/created", contents: Data()))
    #expect(await child.line { $0 == "heard created" } != nil)
    #expect(await child.exit() == 0)
  }

  /// 1,100 descriptors open, none free below 1,024: libinotifytools' `select` cannot wait on the instance (glibc
  /// aborts the process; so did the watcher before its backend checked). The watcher is refused with a reason, and the
  /// process lives on.
  @Test func aWatcherThatWouldGetADescriptorAbove1024IsRefused() async throws {
    let root = try TestRoot()
    let child = try Child(
      .watchAfterDescriptors(directory: root.path, open: 1100, freeSlot: nil), root: root.path, group: Self.group)
    #expect(await child.line { $0.hasPrefix("descriptors") } == "descriptors 1100 lowest free 1100")
    let started = await child.line { $0 == "watching" || $0.hasPrefix("unavailable") }
    #expect(started?.contains("FD_SETSIZE") == true, "\(started ?? "nothing")")
    #expect(started?.contains("no inotify instance is left") == false, "not the per-user limit")
    #expect(await child.exit() == 0, "\(child.errors.text)")
  }

  /// A watch cancelled and placed again on the same path; then the directory removed (the kernel drops its watch)
  /// and made again, and watched again: each time the new watch hears another process's next rename into it, and
  /// the cancelled handlers hear nothing.
  @Test func aWatchRemovedAndAddedAgainHearsTheNextChange() async throws {
    try Watcher.shared.start()
    let root = try TestRoot()
    let directory = root.path + "/watched"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let heard = Mutex<[Int]>([])
    func watch(_ n: Int) throws -> Watcher.Token {
      try Watcher.shared.watch(directory, mask: Watcher.movedTo) { event in
        if event.name == "item" { heard.withLock { $0.append(n) } }
      }
    }
    func renameIntoIt() async throws {
      let child = try Child(
        .renameInto(directory: directory, name: "item", count: 1, acknowledgements: nil), root: root.path,
        group: Self.group)
      #expect(await child.exit() == 0)
    }
    Watcher.shared.cancel(try watch(1))
    let second = try watch(2)
    try await renameIntoIt()
    #expect(await eventually { heard.withLock { $0 } == [2] }, "\(heard.withLock { $0 })")
    Watcher.shared.cancel(second)
    try FileManager.default.removeItem(atPath: directory)
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let third = try watch(3)
    defer { Watcher.shared.cancel(third) }
    try await renameIntoIt()
    #expect(await eventually { heard.withLock { $0 } == [2, 3] }, "\(heard.withLock { $0 })")
  }

  /// A process with no tick handler (its watcher waits in `poll` without a timeout) stops its watcher: the thread
  /// wakes through its eventfd and ends, and a later watch is refused.
  @Test func stoppingTheWatcherWakesItsThread() async throws {
    let root = try TestRoot()
    let child = try Child(.watchThenStop(directory: root.path), root: root.path, group: Self.group)
    #expect(await child.line { $0 == "watching" } != nil)
    // Up and watching by now: a stop takes microseconds; the bound catches a thread that never wakes.
    #expect(await child.line(timeout: 60) { $0 == "stopped" } != nil, "the stopped watcher's thread did not end")
    #expect(await child.line { $0.hasSuffix("after stop") } == "refused after stop")
    #expect(await child.exit() == 0)
  }

  /// Another process renames a file into a watched directory 100 times, each time under the same name, and waits
  /// before the next until the consumer (the watch's handler) has acknowledged it — under load, two busy loops on
  /// the two cores. Every `IN_MOVED_TO` reaches the consumer: none is lost on the way.
  @Test func everyRenameByAnotherProcessReachesTheConsumer() async throws {
    let root = try TestRoot()
    let (directory, acknowledgements) = (root.path + "/records", root.path + "/acknowledgements")
    for path in [directory, acknowledgements] {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    let count = 100
    // The consumer is a process of its own: this process's watcher is shared with tests that stall it or flood its
    // queue, and an overflow there (seen under load) drops events for good — not what this test is about.
    let consumer = try Child(
      .consumeRenames(directory: directory, name: "record", count: count, acknowledgements: acknowledgements),
      root: root.path, group: Self.group)
    defer { consumer.kill() }
    #expect(await consumer.line { $0 == "watching" } != nil)
    let load = try (0..<2).map { _ in try Child(.spin(seconds: 60), root: root.path, group: Self.group) }
    defer { for busy in load { busy.kill() } }
    let renamer = try Child(
      .renameInto(directory: directory, name: "record", count: count, acknowledgements: acknowledgements),
      root: root.path, group: Self.group)
    #expect(await renamer.line { $0 == "done" || $0.hasPrefix("no acknowledgement") } == "done")
    #expect(await renamer.exit() == 0)
    #expect(await consumer.line { $0.hasPrefix("consumed") } == "consumed \(count)")
    #expect(await consumer.exit() == 0)
  }

  /// What `ActivityWritePathTests` saw in a loaded run (fewer events than updates): the kernel merges an
  /// `IN_MOVED_TO` into the one before it when that one is still unread and has the same name — different cookies
  /// notwithstanding. Five renames of one name by another process while nothing reads the queue, then one of another
  /// name: two events.
  @Test func theKernelMergesUnreadRenamesOfOneName() async throws {
    let root = try TestRoot()
    let directory = root.path + "/records"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let instance = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    try #require(instance >= 0)
    defer { close(instance) }
    try #require(inotify_add_watch(instance, directory, Watcher.movedTo) >= 0)
    for (name, count) in [("record", 5), ("other", 1)] {
      let child = try Child(
        .renameInto(directory: directory, name: name, count: count, acknowledgements: nil), root: root.path,
        group: Self.group)
      #expect(await child.exit() == 0)
    }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let bytes = read(instance, &buffer, buffer.count)
    var names: [String] = []
    var offset = 0
    while offset + 16 <= bytes {
      let length = buffer[offset + 12..<offset + 16].reversed().reduce(0) { $0 << 8 | Int($1) }
      let name = buffer[offset + 16..<offset + 16 + length].prefix { $0 != 0 }
      names.append(String(decoding: name, as: UTF8.self))
      offset += 16 + length
    }
    #expect(names == ["record", "other"])
  }
}
