import Foundation
import Synchronization
import Testing

/// How long a wait on another process or thread may take before the test calls it a hang. These bounds catch hangs,
/// never slowness: they are sized for a machine kept busy by four CPU-bound processes on two cores (`make
/// test-under-load`), where a child can take a minute to start and print.
public enum Wait {
  /// A child's next expected line.
  public static let line: Double = 180
  /// A child's exit.
  public static let exit: Double = 300
  /// A condition another process or thread makes true (`eventually`).
  public static let condition: Double = 120
}

/// A value set once by any thread and awaited by any number of tasks, each with its own deadline.
public final class Latch<Value: Sendable>: Sendable {
  private struct State {
    var value: Value?
    var waiters: [UInt64: CheckedContinuation<Value?, Never>] = [:]
    var nextWaiter: UInt64 = 0
    /// Waiters whose deadline passed before they were registered.
    var abandoned: Set<UInt64> = []
  }
  private let state = Mutex(State())

  public init() {}

  /// The value, if it has been set.
  public var value: Value? { state.withLock { $0.value } }

  /// Sets the value (only the first call counts) and wakes every waiter.
  public func resolve(_ value: Value) {
    let waiters = state.withLock { s -> [CheckedContinuation<Value?, Never>] in
      guard s.value == nil else { return [] }
      s.value = value
      defer { s.waiters = [:] }
      return Array(s.waiters.values)
    }
    for waiter in waiters { waiter.resume(returning: value) }
  }

  /// The value once it is set; nil when `seconds` pass first or the task is cancelled.
  public func wait(seconds: Double) async -> Value? {
    if let value { return value }
    let id = state.withLock { s -> UInt64 in
      s.nextWaiter += 1
      return s.nextWaiter
    }
    let timer = Task {
      do {
        try await Task.sleep(for: .seconds(seconds))
        self.giveUp(id)
      } catch {}  // cancelled: the wait ended first
    }
    defer { timer.cancel() }
    return await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        let resumeNow = state.withLock { s -> Value?? in
          if let value = s.value { return .some(value) }
          if s.abandoned.remove(id) != nil { return .some(nil) }
          s.waiters[id] = continuation
          return nil
        }
        if let now = resumeNow { continuation.resume(returning: now) }
      }
    } onCancel: {
      giveUp(id)
    }
  }

  /// Resumes waiter `id` with nil (its deadline passed or it was cancelled); the value wins if it is already set.
  private func giveUp(_ id: UInt64) {
    let (waiter, value) = state.withLock { s in
      let waiter = s.waiters.removeValue(forKey: id)
      if waiter == nil { s.abandoned.insert(id) }
      return (waiter, s.value)
    }
    waiter?.resume(returning: value)
  }
}

/// Whether `condition` became true within `seconds`: for a state another process or thread reaches that no event
/// announces (a file appearing, a count reaching a value). Looks every 10 ms without holding a thread; the bound only
/// keeps a broken test from hanging.
public func eventually(within seconds: Double = Wait.condition, _ condition: () throws -> Bool) async rethrows -> Bool {
  let deadline = ContinuousClock.now + .seconds(seconds)
  while try !condition() {
    if ContinuousClock.now > deadline { return try condition() }
    try? await Task.sleep(for: .milliseconds(10))
    if Task.isCancelled { return try condition() }
  }
  return true
}

/// Whether `directory` came to hold an entry whose name starts with `prefix` within `Wait.condition` (a process
/// registering, or publishing its liveness lock again).
public func entryAppears(in directory: String, prefix: String) async -> Bool {
  await eventually {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).contains { $0.hasPrefix(prefix) }
  }
}

/// Runs `body` on a thread of its own (it may block: a lock, a coordinated access, a wait on another process) and
/// waits at most `timeout` seconds for it, so a deadlock fails the test by assertion instead of hanging it (the stuck
/// thread is abandoned). Returns what `body` returned, nil (with an issue recorded) on failure or timeout.
@discardableResult
public func expectCompletes<T: Sendable>(
  within timeout: Double = Wait.condition, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
  _ body: @escaping @Sendable () throws -> T
) async -> T? {
  switch await onThread(within: timeout, body) {
  case .success(let value)?: return value
  case .failure(let error)?:
    Issue.record("\(what) failed: \(error)", sourceLocation: sourceLocation)
    return nil
  case nil:
    Issue.record("\(what) did not complete within \(timeout) s", sourceLocation: sourceLocation)
    return nil
  }
}

/// Runs `body` on a thread of its own and returns its result, or nil when it has not finished within `seconds`.
/// For blocking work (system calls that wait, long CPU-bound loops) that must not hold one of the few threads
/// Swift Testing runs every test on.
public func onThread<T: Sendable>(
  within seconds: Double = Wait.exit, _ body: @escaping @Sendable () throws -> T
) async -> Result<T, any Error>? {
  let outcome = Latch<Result<T, any Error>>()
  Thread { outcome.resolve(Result { try body() }) }.start()
  return await outcome.wait(seconds: seconds)
}
