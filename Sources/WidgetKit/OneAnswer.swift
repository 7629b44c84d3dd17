import Synchronization

/// A continuation that the first answer resumes and later answers leave alone: a provider or widget that calls its
/// completion handler twice, or after its time-out, must not crash the process.
final class OneAnswer<Value: Sendable>: Sendable {
  private let continuation: Mutex<CheckedContinuation<Value, Never>?>

  init(_ continuation: CheckedContinuation<Value, Never>) { self.continuation = Mutex(continuation) }

  /// Resumes with `value` if nothing answered yet; true when this call did.
  @discardableResult
  func answer(_ value: Value) -> Bool {
    guard
      let continuation = continuation.withLock({ c in
        defer { c = nil }; return c
      })
    else { return false }
    continuation.resume(returning: value)
    return true
  }
}
