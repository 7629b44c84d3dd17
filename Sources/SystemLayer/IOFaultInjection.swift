import Glibc
import Synchronization
import SystemPackage

/// Makes the Nth system call of one kind fail with a chosen `errno` (SQLite's I/O-error loop): a test runs an
/// operation with N = 1, 2, … until it completes without an injected failure, and checks after each failure that
/// the caller got a clear error, nothing acknowledged was lost, no file is torn and no temp file is left.
///
/// Process-wide, counted on every thread: background compactions, the watcher thread and Dispatch work make calls
/// outside any task, which a task-local (as `SyscallRecorder` uses) would not see — so a loop scoped that way would
/// miss exactly the calls most likely to mishandle an error. Tests run in parallel in one process, so the test
/// process never arms it: each run is a child process (gc-test-helper, the download agent) armed by
/// `GROUPCONTAINER_IO_FAULT=<call>:<N>:<errno>` at its start, or by `arm` after its setup (the helper, so N counts the calls of
/// the operation under test only).
///
/// An injected `EINTR` goes through `valueOrErrno`'s one retry loop like a real one (the call is retried and
/// counted again), so a loop with `EINTR` must see every operation succeed.
///
/// A test hook: compiled only with the package's `TestHooks` trait (`make test`). Without it — every dependent's
/// build — `failure` is an empty inline function that returns nil and the environment is never read.
package enum IOFaultInjection {
  /// The kinds of calls that can fail with an I/O error, named for their C functions (`rename` covers `renameat`
  /// and `renameat2`, `read` covers `pread`, `open` covers `openat` and `openat2`).
  package enum Call: String, Sendable, CaseIterable, Codable {
    case open, read, write, pwrite, fsync, fdatasync, rename, linkat, unlinkat, fallocate, ftruncate, mmap, flock
    case inotifyAddWatch = "inotify_add_watch"
    case send
  }

  /// What a run counted: the calls of each kind made while armed, and how many failures were injected.
  package struct Report: Sendable, Codable, Equatable {
    package var calls: [Call: Int]
    package var injected: Int
    package init(calls: [Call: Int] = [:], injected: Int = 0) {
      self.calls = calls
      self.injected = injected
    }
  }

  #if GROUPCONTAINER_TEST_HOOKS
    private struct Rule {
      var call: Call?  // nil: count only
      var nth: Int
      var errno: Errno
      var excludingClockWork = false
    }

    private struct State {
      var rule: Rule
      var calls: [Call: Int] = [:]
      var injected = 0
      var observer: (@Sendable (Call) -> Void)?
    }

    /// Set only while armed: a call costs one relaxed load when nothing is armed.
    private static let active = Atomic<Bool>(false)
    private static let state = Mutex<State?>(nil)
    private static let fromEnvironment: Void = {
      guard let raw = getenv("GROUPCONTAINER_IO_FAULT").map({ String(cString: $0) }), let rule = parse(raw) else {
        return
      }
      arm(rule.call, nth: rule.nth, errno: rule.errno)
    }()

    private static func parse(_ text: String) -> Rule? {
      let parts = text.split(separator: ":").map(String.init)
      guard parts.count == 3, let nth = Int(parts[1]), let code = Int32(parts[2]) ?? errnoNamed(parts[2]) else {
        return nil
      }
      return Rule(call: Call(rawValue: parts[0]), nth: nth, errno: Errno(rawValue: code))
    }

    private static func errnoNamed(_ name: String) -> Int32? {
      ["EIO": EIO, "ENOSPC": ENOSPC, "EINTR": EINTR, "EDQUOT": EDQUOT][name]
    }
  #endif

  /// The `errno` this call must fail with instead of being made, or nil to make it; counts the call when armed.
  @inline(__always)
  package static func failure(_ call: Call) -> Errno? {
    #if GROUPCONTAINER_TEST_HOOKS
      _ = fromEnvironment
      guard active.load(ordering: .relaxed) else { return nil }
      let clockWork = inClockWork
      let (injected, observer) = state.withLock { state -> (Errno?, (@Sendable (Call) -> Void)?) in
        guard state != nil, !(clockWork && state!.rule.excludingClockWork) else { return (nil, nil) }
        let count = state!.calls[call, default: 0] + 1
        state!.calls[call] = count
        guard state!.rule.call == call, count == state!.rule.nth else { return (nil, nil) }
        state!.injected += 1
        return (state!.rule.errno, state!.observer)
      }
      if injected != nil { observer?(call) }  // outside the lock: it may make calls of its own
      return injected
    #else
      nil
    #endif
  }

  /// Counts calls from now on and fails the `nth` call of kind `call` (nil: only count) with `errno`; replaces
  /// whatever was armed. `excludingClockWork`: the calls of `clockWork` are neither counted nor failed — for counts
  /// per operation (SyscallThresholdsTests), which the memory monitor's samples and the watcher's tick, made once a
  /// second whatever the process does, would make depend on how long the operations took.
  package static func arm(_ call: Call?, nth: Int, errno: Errno, excludingClockWork: Bool = false) {
    #if GROUPCONTAINER_TEST_HOOKS
      state.withLock {
        $0 = State(rule: Rule(call: call, nth: nth, errno: errno, excludingClockWork: excludingClockWork))
      }
      active.store(true, ordering: .relaxed)
    #endif
  }

  #if GROUPCONTAINER_TEST_HOOKS
    /// Set on a thread while it does `clockWork` (a task-local bound outside any task lives in the thread).
    @TaskLocal private static var inClockWork = false
  #endif

  /// Runs `body`, work done by the clock rather than for an operation (the memory monitor's samples, the watcher's
  /// once-a-second tick, a sender's liveness checks every 20 ms while it waits for an answer), marked so that a
  /// count per operation can leave it out (`arm(excludingClockWork:)`).
  @inline(__always)
  package static func clockWork<T>(_ body: () throws -> T) rethrows -> T {
    #if GROUPCONTAINER_TEST_HOOKS
      try $inClockWork.withValue(true) { try body() }
    #else
      try body()
    #endif
  }

  /// Calls `observer` on the thread of each injected failure (a test helper records where it struck), until
  /// `disarm`.
  package static func observe(_ observer: @escaping @Sendable (Call) -> Void) {
    #if GROUPCONTAINER_TEST_HOOKS
      state.withLock { $0?.observer = observer }
    #endif
  }

  /// Stops counting and injecting; returns what was counted since `arm`.
  @discardableResult
  package static func disarm() -> Report {
    #if GROUPCONTAINER_TEST_HOOKS
      active.store(false, ordering: .relaxed)
      return state.withLock { state in
        defer { state = nil }
        return Report(calls: state?.calls ?? [:], injected: state?.injected ?? 0)
      }
    #else
      Report()
    #endif
  }

  /// What was counted since `arm`, still armed.
  package static var report: Report {
    #if GROUPCONTAINER_TEST_HOOKS
      state.withLock { Report(calls: $0?.calls ?? [:], injected: $0?.injected ?? 0) }
    #else
      Report()
    #endif
  }
}
