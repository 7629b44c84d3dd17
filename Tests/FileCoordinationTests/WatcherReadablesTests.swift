import Foundation
import Glibc
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The watcher thread serves descriptors (`watchReadable`: the inbox socket) in one `poll` with inotify. Its `poll`
/// array is kept between turns, so it must follow every change of the served set — also a swap that keeps the count
/// (the container made anew: a new inbox socket replaces the old one).
///
/// Mutants this suite catches: the kept array made again only when the number of descriptors changes (no `didSet`
/// on `Watcher.readables`): `aSwappedDescriptorIsServed`; a quiet begun whatever was polled since the last (no
/// `queuePolled` in `Watcher.beginQuiet`): `quietAfterQuietStillPollsTheQueue`.
@Suite(.runSlot(.minutes(3))) struct WatcherReadablesTests {
  /// A non-blocking pipe whose read end counts what its handler read.
  final class Pipe: Sendable {
    let read: Int32
    let write: Int32
    let got = Mutex(0)
    init() throws {
      var fds: [Int32] = [-1, -1]
      try #require(pipe(&fds) == 0)
      for fd in fds { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
      (read, write) = (fds[0], fds[1])
    }
    deinit {
      close(read)
      close(write)
    }
    func drain() {
      var byte: UInt8 = 0
      while Glibc.read(read, &byte, 1) == 1 { got.withLock { $0 += 1 } }
    }
    /// Bytes written and not read yet (-1 when that cannot be told).
    var unread: Int32 {
      var bytes: Int32 = 0
      return ioctl(read, UInt(FIONREAD), &bytes) == 0 ? bytes : -1
    }
    func send() {
      var byte: UInt8 = 1
      _ = Glibc.write(write, &byte, 1)
    }
  }

  // Alone: the stall holds back every test's events and datagrams in this process.
  @Test(.runSlot(.minutes(3), alone: true)) func aSwappedDescriptorIsServed() async throws {
    try Watcher.shared.start()
    let first = try Pipe()
    let firstToken = Watcher.shared.watchReadable(first.read) { first.drain() }
    first.send()
    #expect(await eventually { first.got.withLock { $0 } == 1 }, "the first descriptor was not served")
    // Swapped in one turn of the watcher's loop (it sleeps through the stall, so both requests wait for the same
    // turn): the number of served descriptors stays the same. The first pipe stays open and silent.
    let second = try Pipe()
    let secondToken = await withWatcherStalled(nanoseconds: 150_000_000) {
      try? await Task.sleep(for: .seconds(0.02))
      Watcher.shared.cancel(firstToken)
      return Watcher.shared.watchReadable(second.read) { second.drain() }
    }
    defer { Watcher.shared.cancel(secondToken) }
    // Sent once the loop is back in `poll` (every descriptor is also drained before each inotify event, and the
    // requests' wake-ups are such events): only `poll` can deliver this byte.
    try? await Task.sleep(for: .seconds(0.4))
    second.send()
    #expect(
      await eventually { second.got.withLock { $0 } == 1 },
      "the descriptor that took the first one's place was not served")
    withExtendedLifetime(first) {}
  }

  /// Back-to-back writes bring one write's finish and the next one's prepare to the watcher in the same turn: a
  /// quiet ends and the next begins with the inotify queue unpolled in between. Here a served pipe plays the
  /// inbox socket: every 2 ms it receives "fp" in one write (its handler ends a quiet, then begins one), while a
  /// file is created in a watched directory. The event must still be heard while the pairs go on.
  ///
  /// Mutant: a quiet begins whatever was polled (no `queuePolled` in `Watcher.beginQuiet`): quiet after quiet,
  /// each starting anew, and the event is not heard until the pairs stop.
  @Test func quietAfterQuietStillPollsTheQueue() async throws {
    try Watcher.shared.start()
    let root = try TestRoot()
    let heard = Flag()
    let watch = try Watcher.shared.watch(root.path) { event in
      if event.name == "created" { heard.set() }
    }
    defer { Watcher.shared.cancel(watch) }
    // The queue is shared with the other tests of this process: another test's flood (PathSafetyTests' swap race) can
    // overflow it and drop the event. An overflow read is the queue read, which is what this test asks.
    let overflow = Watcher.shared.onOverflow { heard.set() }
    defer { Watcher.shared.cancel(overflow) }
    let inbox = try Pipe()
    let token = Watcher.shared.watchReadable(inbox.read) {
      var byte: UInt8 = 0
      while Glibc.read(inbox.read, &byte, 1) == 1 {
        if byte == UInt8(ascii: "p") { Watcher.shared.beginQuiet() } else { Watcher.shared.endQuiet() }
      }
    }
    let (stop, stopped) = (Flag(), Flag())
    let feeder = Thread {
      var pair: [UInt8] = Array("fp".utf8)
      _ = Glibc.write(inbox.write, &pair[1], 1)
      while !stop.isSet {
        _ = Glibc.write(inbox.write, &pair, 2)
        usleep(2_000)
      }
      _ = Glibc.write(inbox.write, &pair, 1)  // ends the last quiet
      stopped.set()
    }
    feeder.start()
    try? await Task.sleep(for: .seconds(0.1))
    #expect(FileManager.default.createFile(atPath: root.path + "/created", contents: Data()))
    #expect(await eventually { heard.isSet }, "quiet after quiet left the inotify queue unread")
    stop.set()
    #expect(await eventually { stopped.isSet })
    // The last "f" is read before the pipe goes: every quiet this test began is ended.
    #expect(await eventually { inbox.unread == 0 })
    // Cancelling is served on the watcher's next turn: the pipe stays open until then, so its descriptor number is
    // not reused (and read by this handler) meanwhile.
    Watcher.shared.cancel(token)
    try? await Task.sleep(for: .seconds(0.2))
    withExtendedLifetime(inbox) {}
  }

  final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
  }
}
