import Foundation
import SystemLayer

/// The thread the agent's loop runs on (`DownloadAgent.run` prefers it as its task executor), with the timeouts of
/// its waits (`Doorbell`): the loop's jobs and its timer run here, in order, and nothing of an idle agent reaches
/// Dispatch's thread pools.
///
/// *Why*: each Dispatch worker keeps up to 1,024 freed continuations (a fixed limit on Linux) until it ends, and a
/// worker ends only after 5 s without work. The loop wakes every second, through Dispatch (its timeout an
/// `asyncAfter`, its resumption a job of the global pool), and the pool's idle threads are woken in turn: the
/// burst's workers never ended, and their ~2,400 cached continuations kept about 1 MB of heap pages resident at
/// 10,000 finished tasks (DownloadBenchmarks' `Scale: 10,000 tasks of 4 kB`). With the loop here, an idle agent
/// gives Dispatch nothing to do and its workers end 5 s after a burst, their caches with them.
final class LoopThread: TaskExecutor, @unchecked Sendable {
  /// One thread per process: agents run one at a time in a process, and the thread only waits between passes.
  static let shared = LoopThread(name: "download agent loop")

  private struct Timer {
    var deadline: UInt64
    var action: @Sendable () -> Void
  }

  private let thread: Thread
  /// Guards `jobs` and `timers` (`@unchecked Sendable`); the thread waits on it.
  private let condition = NSCondition()
  private var jobs: [UnownedJob] = []
  /// One timer per owner: a wait's timeout replaces the one of the wait before (ended by a ring), so a burst's
  /// thousands of waits leave no thousands of timers behind.
  private var timers: [ObjectIdentifier: Timer] = [:]

  private init(name: String) {
    thread = Thread { LoopThread.shared.serve() }
    thread.name = name
    thread.start()
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    condition.lock()
    jobs.append(job)
    condition.signal()
    condition.unlock()
  }

  /// Calls `action` on this thread `nanoseconds` from now, unless `owner` sets another timer before.
  func after(nanoseconds: UInt64, owner: AnyObject, _ action: @escaping @Sendable () -> Void) {
    condition.lock()
    timers[ObjectIdentifier(owner)] = Timer(deadline: MonotonicClock.nanoseconds() &+ nanoseconds, action: action)
    condition.signal()
    condition.unlock()
  }

  /// Whether the caller runs on this thread (tests).
  var isCurrent: Bool { Thread.current === thread }

  /// Whether `owner` has a timer set that has not run yet (tests).
  func hasTimer(owner: AnyObject) -> Bool {
    condition.lock()
    defer { condition.unlock() }
    return timers[ObjectIdentifier(owner)] != nil
  }

  private func serve() -> Never {
    let executor = asUnownedTaskExecutor()
    condition.lock()
    while true {
      if !jobs.isEmpty {
        let ready = jobs
        jobs.removeAll(keepingCapacity: true)
        condition.unlock()
        for job in ready { job.runSynchronously(on: executor) }
        condition.lock()
        continue
      }
      let now = MonotonicClock.nanoseconds()
      if let due = timers.first(where: { $0.value.deadline <= now }) {
        timers[due.key] = nil
        condition.unlock()
        due.value.action()
        condition.lock()
        continue
      }
      if let next = timers.values.map(\.deadline).min() {
        _ = condition.wait(until: Date(timeIntervalSinceNow: Double(next &- now) / 1e9))
      } else {
        condition.wait()
      }
    }
  }
}
