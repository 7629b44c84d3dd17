import PropertyList

/// One change of one key, as observers see it.
public struct DefaultsChange: Sendable, Hashable {
  /// The key that changed.
  public var key: String
  /// The value before (`nil`: the key was not set).
  public var oldValue: PropertyListValue?
  /// The value after (`nil`: the key was removed).
  public var newValue: PropertyListValue?
  /// The process that wrote it; `nil` when the change came from outside the framework (a tool rewrote the plist)
  /// or when several writes were folded together after a compaction.
  public var originProcessID: Int32?
}

/// A registration from ``SharedDefaults/observe(_:handler:)``; cancel it (or let it go) to stop.
public final class DefaultsObservation: Sendable {
  private let cancellation: @Sendable () -> Void

  init(_ cancellation: @escaping @Sendable () -> Void) { self.cancellation = cancellation }

  /// Stops the handler; it is not called again after this returns (a call in progress finishes).
  public func cancel() { cancellation() }

  deinit { cancellation() }
}
