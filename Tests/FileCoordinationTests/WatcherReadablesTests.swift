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
/// Mutant this suite catches: the kept array made again only when the number of descriptors changes (no `didSet`
/// on `Watcher.readables`): `aSwappedDescriptorIsServed`.
@Suite(.timeLimit(.minutes(1))) struct WatcherReadablesTests {
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
    func send() {
      var byte: UInt8 = 1
      _ = Glibc.write(write, &byte, 1)
    }
  }

  @Test func aSwappedDescriptorIsServed() throws {
    try Watcher.shared.start()
    let first = try Pipe()
    let firstToken = Watcher.shared.watchReadable(first.read) { first.drain() }
    first.send()
    #expect(becomesTrue { first.got.withLock { $0 } == 1 }, "the first descriptor was not served")
    // Swapped in one turn of the watcher's loop (it sleeps through a short stall, so both requests wait for the
    // same turn): the number of served descriptors stays the same. The first pipe stays open and silent.
    Watcher.shared.stall(nanoseconds: 150_000_000)
    Thread.sleep(forTimeInterval: 0.02)
    Watcher.shared.cancel(firstToken)
    let second = try Pipe()
    let secondToken = Watcher.shared.watchReadable(second.read) { second.drain() }
    defer { Watcher.shared.cancel(secondToken) }
    // Sent once the loop is back in `poll` (every descriptor is also drained before each inotify event, and the
    // requests' wake-ups are such events): only `poll` can deliver this byte.
    Thread.sleep(forTimeInterval: 0.4)
    second.send()
    #expect(
      becomesTrue { second.got.withLock { $0 } == 1 }, "the descriptor that took the first one's place was not served")
    withExtendedLifetime(first) {}
  }
}
