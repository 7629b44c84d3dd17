import Glibc

/// The calling thread.
package enum CurrentThread {
  /// Gives the processor to another runnable thread, if any (a spin's back-off). The corresponding C function is
  /// `sched_yield`.
  package static func yield() { _ = sched_yield() }
}

/// Who this process is, in a form PID reuse cannot fool: pid plus the kernel's start time of the process.
package enum CurrentProcess {
  package static var id: Int32 { getpid() }
  /// The parent's process id (1, or a subreaper's, once the parent died). The corresponding C function is `getppid`.
  package static var parentID: Int32 { getppid() }
  /// The effective user id: whose files this process trusts. The corresponding C function is `geteuid`.
  package static var userID: UInt32 { geteuid() }

  /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot. For this process, read once and kept
  /// (`ownStartTime`).
  package static func startTime(of pid: Int32 = getpid()) -> UInt64? {
    pid == getpid() ? ownStartTime : status(of: pid)?.startTime
  }

  /// This process's start time, which names it in lock words, temp files and its liveness file — read until a
  /// read succeeds (a few tries): a read that failed once (EIO, EMFILE) was kept as "unknown" for the process's
  /// whole life, and other processes then judged its lock word's owner dead while it held the lock (found by the
  /// I/O-error loops). Nil only when /proc cannot be read at all.
  private static let ownStartTime: UInt64? = {
    for attempt in 0..<5 {
      if let start = status(of: getpid())?.startTime { return start }
      if attempt < 4 { MonotonicClock.sleep(nanoseconds: 1_000_000 << attempt) }
    }
    return nil
  }()

  /// From `/proc/<pid>/stat`: whether the process still runs (not a zombie) and its start time (field 22, clock
  /// ticks since boot). Nil when there is no such process.
  package static func status(of pid: Int32) -> (running: Bool, startTime: UInt64)? {
    guard let bytes = try? FileSystem.readFile("/proc/\(pid)/stat", limit: 4096) else { return nil }
    // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
    guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
    let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
    // fields[0] is field 3 (state), so field 22 is fields[19].
    guard fields.count > 19, let start = UInt64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
    let state = fields[0].first ?? 0
    return (state != UInt8(ascii: "Z") && state != UInt8(ascii: "X"), start)
  }
}

/// `clock_gettime(clock)` in nanoseconds: every clock below reads through it.
@inline(__always) private func clockNanoseconds(_ clock: clockid_t) -> UInt64 {
  var ts = timespec()
  clock_gettime(clock, &ts)
  return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Monotonic time, comparable across processes on this machine.
package enum MonotonicClock {
  package static func nanoseconds() -> UInt64 { clockNanoseconds(CLOCK_MONOTONIC) }

  /// `nanoseconds()` as of the kernel's last clock tick (1–10 ms behind, never ahead): a read of the vDSO page with
  /// no clock-source read, a few nanoseconds where the precise clock costs up to a hundred on a loaded VM. For
  /// times that may err early by a tick (a lock cache's idle time). The corresponding C function is
  /// `clock_gettime(CLOCK_MONOTONIC_COARSE)`.
  package static func coarseNanoseconds() -> UInt64 { clockNanoseconds(CLOCK_MONOTONIC_COARSE) }

  /// Sleeps the calling thread. The corresponding C function is `nanosleep`.
  package static func sleep(nanoseconds: UInt64) {
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) == -1 && errno == EINTR { request = remaining }
  }
}

/// CPU time the calling thread has used: work done, without the time it waited (an `fsync`, a lock, another process
/// on the core). The corresponding C function is `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`.
package enum ThreadCPUClock {
  package static func nanoseconds() -> UInt64 { clockNanoseconds(CLOCK_THREAD_CPUTIME_ID) }
}

/// Wall-clock time, as other processes and the file system's timestamps count it.
package enum RealtimeClock {
  /// Nanoseconds since 1970 as of the kernel's last clock tick (1–10 ms behind the precise time): a read of the
  /// vDSO page, no system call and no clock-source read, so it costs a few nanoseconds even where the precise
  /// clock is slow (a loaded VM: 105 ns precise, 24 ns coarse). For timestamps compared at a granularity of
  /// seconds — expiry, recency — which is also how coarsely the kernel stamps file times. The corresponding C
  /// function is `clock_gettime(CLOCK_REALTIME_COARSE)`.
  package static func coarseNanoseconds() -> Int64 { Int64(clockNanoseconds(CLOCK_REALTIME_COARSE)) }

  /// Nanoseconds since 1970, precise: for dates a file records and names made unique by time. The corresponding C
  /// function is `clock_gettime(CLOCK_REALTIME)`.
  package static func nanoseconds() -> Int64 { Int64(clockNanoseconds(CLOCK_REALTIME)) }

  /// Whole seconds since 1970 (names that record when they were made).
  package static func seconds() -> Int64 { nanoseconds() / 1_000_000_000 }
}

/// Byte comparisons of raw memory, for the formats that compare keys in place.
package enum RawMemory {
  /// Whether `count` bytes at `a` and `b` are equal (any pointers when `count` is 0). The corresponding C function
  /// is `memcmp`.
  package static func equal(_ a: UnsafeRawPointer?, _ b: UnsafeRawPointer?, count: Int) -> Bool {
    count == 0 || memcmp(a!, b!, count) == 0
  }
}

/// Signals, for tests and the CLI.
package enum Signals {
  /// The corresponding C function is `kill`.
  package static func send(_ signal: Int32, to pid: Int32) -> Bool { kill(pid, signal) == 0 }
}

/// An entry of `/proc/locks`: which process holds a flock on which inode.
package struct KernelLock: Sendable {
  package var pid: Int32
  package var exclusive: Bool
  package var device: String
  package var inode: UInt64
}

package enum KernelLocks {
  /// The FLOCK entries of `/proc/locks` ("1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF").
  /// Blocked waiters ("1: -> FLOCK …") are left out: they do not hold the lock.
  package static func flocks() -> [KernelLock] {
    guard let bytes = try? FileSystem.readFile("/proc/locks", limit: 16 << 20) else { return [] }
    var result: [KernelLock] = []
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
      let f = line.split(separator: " ", omittingEmptySubsequences: true)
      guard f.count >= 6, f[1] == "FLOCK", let pid = Int32(f[4]) else { continue }
      let parts = f[5].split(separator: ":")
      guard parts.count == 3, let inode = UInt64(parts[2]) else { continue }
      result.append(KernelLock(pid: pid, exclusive: f[3] == "WRITE", device: "\(parts[0]):\(parts[1])", inode: inode))
    }
    return result
  }
}

extension Duration {
  /// Whole nanoseconds (negative durations count as 0): a `Duration` compared with `MonotonicClock` readings.
  package var nanoseconds: UInt64 {
    let (seconds, attoseconds) = components
    guard seconds >= 0 else { return 0 }
    return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
  }
}
