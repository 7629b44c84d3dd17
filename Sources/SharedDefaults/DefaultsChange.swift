import PropertyList

/// One change of one key, as observers see it.
///
/// It prints as a person reads it (`countdown: 41 → 40 (pid 812)`), compares with `==`, and reads the new value in
/// the type you stored: ``integerValue``, ``stringValue``, ``boolValue``, ``doubleValue`` or ``value(as:)``.
public struct DefaultsChange: Sendable, Hashable, CustomStringConvertible {
  /// The key that changed.
  public var key: String
  /// The value before (`nil`: the key was not set).
  public var oldValue: PropertyListValue?
  /// The value after (`nil`: the key was removed).
  public var newValue: PropertyListValue?
  /// The process that wrote it; `nil` when the change came from outside the framework (a tool rewrote the plist)
  /// or when several writes were folded together after a compaction.
  public var originProcessID: Int32?

  /// Makes a change record (for tests and tools that synthesize changes).
  public init(key: String, oldValue: PropertyListValue?, newValue: PropertyListValue?, originProcessID: Int32?) {
    self.key = key
    self.oldValue = oldValue
    self.newValue = newValue
    self.originProcessID = originProcessID
  }

  /// The new value as `T` (`Int`, `Double`, `Bool`, `String`, `Data`, `Date`, `URL`, `[String]`, or any
  /// ``DefaultsValue``), converted as the suite's typed getters convert (`"42"` reads as `42`); `nil` when the
  /// key was removed or the value does not convert.
  public func value<T: DefaultsValue>(as type: T.Type = T.self) -> T? {
    newValue.flatMap(T.init(propertyListValue:))
  }

  /// The new value as `Int` (`nil`: removed, or not convertible to `Int`).
  public var integerValue: Int? { value(as: Int.self) }
  /// The new value as `Double` (integers convert, as `double(forKey:)` does).
  public var doubleValue: Double? { value(as: Double.self) }
  /// The new value as `Bool`.
  public var boolValue: Bool? { value(as: Bool.self) }
  /// The new value as `String`.
  public var stringValue: String? { value(as: String.self) }
  /// Whether the change removed the key.
  public var isRemoval: Bool { newValue == nil }

  /// `key: old → new (pid N)`, with `(not set)` / `(removed)` for a missing side, values as
  /// `PropertyListValue.description` prints them.
  public var description: String {
    let old = oldValue?.description ?? "(not set)"
    let new = newValue?.description ?? "(removed)"
    let origin = originProcessID.map { " (pid \($0))" } ?? ""
    return "\(key): \(old) → \(new)\(origin)"
  }
}

/// A registration from ``SharedDefaults/observe(_:handler:)``; cancel it (or let it go) to stop.
public final class DefaultsObservation: Sendable {
  private let cancellation: @Sendable () -> Void

  init(_ cancellation: @escaping @Sendable () -> Void) { self.cancellation = cancellation }

  /// Stops the observation; later changes are not delivered. Calling it again does nothing.
  public func cancel() { cancellation() }

  deinit { cancellation() }
}
