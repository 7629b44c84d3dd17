import CSystemShims

/// Two words a function leaves for code it calls later on the same thread, in C thread-local storage (no lock, no
/// allocation: set and cleared around every coordinated accessor). `CheckedWrite` (FileCoordination) is its user.
package enum ThreadMark {
  package struct Value: Equatable, Sendable {
    package var owner: UInt
    package var key: UInt64
    package init(owner: UInt, key: UInt64) {
      self.owner = owner
      self.key = key
    }
  }

  /// This thread's mark.
  package static var current: Value {
    Value(owner: UInt(gc_thread_mark_owner()), key: gc_thread_mark_key())
  }

  /// Sets this thread's mark; returns the one it replaces (for the caller to put back: marks nest).
  @discardableResult
  package static func set(_ value: Value) -> Value {
    let previous = current
    gc_thread_mark_set(uintptr_t(value.owner), value.key)
    return previous
  }
}
