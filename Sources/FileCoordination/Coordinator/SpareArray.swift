import Synchronization

/// The buffer of an array a hot path makes on every call, kept from one call to the next: `take()` gives it back
/// empty, its capacity kept, once the last call's user let go of it, so the next call fills it in place instead of
/// allocating one. Calls that overlap make their own (the buffer is then shared, and emptying it copies nothing).
struct SpareArray<Element: Sendable>: ~Copyable {
  private let spare = Mutex<[Element]>([])

  init() {}

  /// An empty array: the kept one's buffer, or a new one.
  func take() -> [Element] {
    var array: [Element] = []
    spare.withLock { swap(&array, &$0) }
    array.removeAll(keepingCapacity: true)
    return array
  }

  /// Keeps `array`'s buffer for the next `take()` (its elements stay alive until then).
  func keep(_ array: [Element]) { spare.withLock { $0 = array } }
}
