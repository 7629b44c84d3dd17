import Atomics
import CSystemShims
import Glibc

/// An exclusive lock between processes in one 64-bit word of a `MappedCounters` file: taking and releasing it
/// costs two atomic instructions and no system call when nobody else wants it (flock costs two system calls).
///
/// The word holds the owner, `start-time(low 32 bits) << 32 | waiting-bit | pid`, or 0 when free. A waiter spins
/// briefly, then sleeps on the low half with `futex`. Like flock, a process that dies holding it never blocks
/// anyone: a waiter that has waited `ownerCheckInterval` checks whether the owner is still the same live process
/// and takes the lock over if not. It asks `ownerIsAlive` first (the caller's flock-based liveness registry, which
/// holds across pid namespaces), then `/proc` (pid and start time, so a reused pid does not fool it). A word of
/// garbage (an outside write) names no live process, so it is taken over the same way.
///
/// Rules for callers: one holder per process at a time (the word names a process, not a thread — serialize the
/// process's threads first, e.g. with a `Mutex`); never hold it across a wait for another process.
package struct SharedMemoryLock: @unchecked Sendable {  // the word is shared memory, touched only through atomics
  private let counters: MappedCounters
  private let index: Int
  private let ownerIsAlive: @Sendable (_ pid: Int32, _ startTimeLow32: UInt32) -> Bool?

  /// How long a waiter sleeps before it checks whether the owner is still alive.
  package static let ownerCheckInterval: UInt64 = 20_000_000

  /// Waits of this process's threads that went to sleep on a lock another holds (tests: a thread is known to be
  /// waiting for the lock, not assumed to be after a pause).
  package static let sleepingWaits = TestCounter()

  private static let waitingBit: UInt64 = 1 << 31
  private static let pidMask: UInt64 = 0x7FFF_FFFF

  /// This process as it appears in the word.
  package static let me: UInt64 = {
    let start = CurrentProcess.startTime() ?? 0
    return (start & 0xFFFF_FFFF) << 32 | UInt64(UInt32(bitPattern: CurrentProcess.id))
  }()

  /// How a `lock()` got the lock.
  package enum Acquired: Equatable, Sendable {
    case normally
    /// The previous owner died holding it (or the word was garbage): what it protects may be half-updated.
    case fromDeadOwner(pid: Int32)
  }

  /// `ownerIsAlive` answers for a process it knows (nil: unknown, ask `/proc`).
  package init(
    _ counters: MappedCounters, index: Int,
    ownerIsAlive: @escaping @Sendable (_ pid: Int32, _ startTimeLow32: UInt32) -> Bool? = { _, _ in nil }
  ) {
    self.counters = counters
    self.index = index
    self.ownerIsAlive = ownerIsAlive
  }

  package func lock() -> Acquired {
    if counters.atomic(index).compareExchange(expected: 0, desired: Self.me, ordering: .acquiring).exchanged {
      return .normally
    }
    return lockContended()
  }

  /// Takes the lock without waiting: when it is free, or held by a process that is gone (taken over, as `lock()`
  /// would after its wait); nil when a live process holds it.
  package func tryLock() -> Acquired? {
    let word = counters.atomic(index)
    if word.compareExchange(expected: 0, desired: Self.me, ordering: .acquiring).exchanged { return .normally }
    let owner = word.load(ordering: .relaxed)
    // Taken over marked "waiting": others may sleep on it, and our unlock must wake them.
    if owner != 0 && !isAlive(owner)
      && word.compareExchange(expected: owner, desired: Self.me | Self.waitingBit, ordering: .acquiring).exchanged
    {
      return .fromDeadOwner(pid: Int32(truncatingIfNeeded: owner & Self.pidMask))
    }
    return nil
  }

  package func unlock() {
    let previous = counters.atomic(index).exchange(0, ordering: .releasing)
    if previous & Self.waitingBit != 0 { _ = gc_futex_wake(counters.futexWord(index), 1) }
  }

  private func lockContended() -> Acquired {
    let word = counters.atomic(index)
    // Once we have waited, we take the lock marked "waiting" (we cannot know whether others still sleep), so our
    // unlock wakes the next one.
    let mine = Self.me | Self.waitingBit
    var spins = 0
    var slept = false
    var lastCheck = MonotonicClock.nanoseconds()
    var timeout = timespec(tv_sec: 0, tv_nsec: Int(Self.ownerCheckInterval / 2))
    while true {
      var current = word.load(ordering: .relaxed)
      if current == 0 {
        if word.compareExchange(expected: 0, desired: mine, ordering: .acquiring).exchanged { return .normally }
        continue
      }
      if spins < 64 {
        spins += 1
        continue
      }
      if current & Self.waitingBit == 0 {
        guard word.compareExchange(expected: current, desired: current | Self.waitingBit, ordering: .relaxed).exchanged
        else { continue }
        current |= Self.waitingBit
      }
      if !slept {
        slept = true
        Self.sleepingWaits.add()
      }
      _ = gc_futex_wait(counters.futexWord(index), UInt32(truncatingIfNeeded: current), &timeout)
      let now = MonotonicClock.nanoseconds()
      guard now - lastCheck >= Self.ownerCheckInterval else { continue }
      lastCheck = now
      let owner = word.load(ordering: .relaxed)
      if owner != 0 && !isAlive(owner)
        && word.compareExchange(expected: owner, desired: mine, ordering: .acquiring).exchanged
      {
        return .fromDeadOwner(pid: Int32(truncatingIfNeeded: owner & Self.pidMask))
      }
    }
  }

  /// Whether the process named by `owner` still runs (not a zombie) and is the one that took the lock.
  private func isAlive(_ owner: UInt64) -> Bool {
    if owner & ~Self.waitingBit == Self.me { return true }
    let pid = Int32(truncatingIfNeeded: owner & Self.pidMask)
    guard pid > 0 else { return false }
    // An owner whose start time was unknown to itself (no /proc) is judged by its pid alone: judged by a start
    // time it does not have, it would be called dead while it holds the lock.
    if owner >> 32 == 0 { return CurrentProcess.status(of: pid)?.running ?? false }
    if let known = ownerIsAlive(pid, UInt32(truncatingIfNeeded: owner >> 32)) { return known }
    guard let process = CurrentProcess.status(of: pid) else { return false }
    return process.running && process.startTime & 0xFFFF_FFFF == owner >> 32
  }
}
