import Foundation
import Synchronization

/// A wait that ends at a deadline or as soon as another thread signals: a widget's schedule waits for its next
/// entry's date or for a reload request, whichever comes first. A signal that comes while nobody waits is kept for
/// the next wait (requests are coalesced, never lost). One waiter at a time.
final class Wakeup: Sendable {
  private struct State {
    var signaled = false
    var waiter: (id: UInt64, continuation: CheckedContinuation<Bool, Never>)?
    var nextID: UInt64 = 0
    /// The latest wait ended by its timer or its cancellation before it was stored (one waiter at a time).
    var endedID: UInt64 = 0
  }

  private let state = Mutex(State())

  /// Ends the current wait with `true`, or makes the next one return `true` at once.
  func signal() {
    let waiter: CheckedContinuation<Bool, Never>? = state.withLock { s in
      guard let w = s.waiter else {
        s.signaled = true
        return nil
      }
      s.waiter = nil
      return w.continuation
    }
    waiter?.resume(returning: true)
  }

  /// Forgets a signal that came while nobody waited: what it asked for is being done now.
  func reset() {
    state.withLock { $0.signaled = false }
  }

  /// Waits until `date` (wall clock) or a signal; true when signaled. Long waits are taken in steps of at most an
  /// hour, so a far date neither overflows a `Duration` nor misses a change of the system clock for long.
  func wait(until date: Date) async -> Bool {
    while !Task.isCancelled {
      let left = date.timeIntervalSinceNow
      guard left > 0 else { return false }
      if await wait(timeout: .milliseconds(Int64((min(left, 3600) * 1000).rounded(.up)))) { return true }
    }
    return false
  }

  /// Waits for a signal for at most `timeout` (forever when `nil`); true when signaled, false at the timeout or
  /// when the task is cancelled.
  func wait(timeout: Duration?) async -> Bool {
    let id: UInt64 = state.withLock { s in
      s.nextID &+= 1
      return s.nextID
    }
    let timer: Task<Void, Never>? = timeout.map { timeout in
      Task { [self] in
        try? await Task.sleep(for: timeout)
        end(id, signaled: false)
      }
    }
    defer { timer?.cancel() }
    return await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        let immediate: Bool? = state.withLock { s in
          if s.signaled {
            s.signaled = false
            return true
          }
          if Task.isCancelled || s.endedID >= id { return false }
          s.waiter = (id, continuation)
          return nil
        }
        if let immediate { continuation.resume(returning: immediate) }
      }
    } onCancel: {
      end(id, signaled: false)
    }
  }

  /// Ends wait `id` if it is still the current one.
  private func end(_ id: UInt64, signaled: Bool) {
    let waiter: CheckedContinuation<Bool, Never>? = state.withLock { s in
      guard let w = s.waiter, w.id == id else {
        s.endedID = max(s.endedID, id)
        return nil
      }
      s.waiter = nil
      return w.continuation
    }
    waiter?.resume(returning: signaled)
  }
}
