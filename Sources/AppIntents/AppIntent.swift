import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore

/// An action an app performs for its widget, Live Activity or another process: Apple's `AppIntent`, as used by
/// interactive widget buttons (`Button(intent:)`).
///
/// ```swift
/// struct LikeIntent: AppIntent {
///   static let title = "Like"
///   var team = "home"
///   init() {}
///   init(team: String) { self.team = team }
///   func perform() async throws -> some IntentResult {
///     let likes = try await Scoreboard.shared.like(team)
///     return .result(value: likes)
///   }
/// }
/// ```
///
/// The app registers the intents it performs (``GroupContainerCore/GroupContainer/registerIntents(_:forScheme:)``),
/// and a widget asks it to perform one (``GroupContainerCore/GroupContainer/perform(_:inAppWithScheme:timeout:)``):
/// the intent is encoded, delivered to the app's process — started for it when not running — decoded there and
/// performed there; the result comes back.
///
/// Departures from Apple's framework, each because nothing on Linux discovers intents or parameters for you:
/// - Parameters are the intent's `Codable` stored properties (Apple: `@Parameter` properties): what the widget
///   sets is what the app decodes. Validate them in ``perform()`` as input from another process.
/// - ``title`` is a `String` (Apple: `LocalizedStringResource`).
/// - The app registers its intent types at run time, with the URL scheme it is reached by (Apple: found in the
///   app's binary).
/// - Every intent is performed in the app's process, in the background (Apple performs an `AppIntent` in the
///   widget's process unless it is a ``LiveActivityIntent`` or `openAppWhenRun`): the app owns the data.
public protocol AppIntent: Codable, Sendable {
  /// What the intent is called, for people (logs, `groupctl`).
  static var title: String { get }
  /// The name the intent travels under; both processes must agree on it. By default the type's name.
  static var intentIdentifier: String { get }
  /// The result of ``perform()``: ``IntentResult/result(dialog:)`` or ``IntentResult/result(value:dialog:)``.
  associatedtype PerformResult: IntentResult
  /// An intent with default parameters (Apple requires it too).
  init()
  /// Does the work, in the app's process. A thrown error reaches the caller as
  /// ``IntentError/performFailed(_:message:)`` (its description, not the error itself).
  func perform() async throws -> PerformResult
}

extension AppIntent {
  /// The type's name, e.g. `LikeIntent`.
  public static var intentIdentifier: String { TypeName.unqualified(Self.self) }
}

/// An intent that starts, updates or ends a Live Activity: Apple's `LiveActivityIntent`. Here every intent runs in
/// the app's process, so it differs from ``AppIntent`` only in what it says to readers of the code.
public protocol LiveActivityIntent: AppIntent {}

/// What ``AppIntent/perform()`` returns: Apple's `IntentResult`. Make one with ``result(dialog:)`` or
/// ``result(value:dialog:)``.
public protocol IntentResult: Sendable {
  /// The value as the caller receives it (JSON), or nil when there is none.
  func encodedValue() throws -> Data?
  /// A sentence for the person who triggered the intent (Apple's `dialog`), or nil.
  var dialog: String? { get }
}

/// An intent's result with a value of type `Value`: Apple's `IntentResultContainer`.
public struct IntentResultContainer<Value: Codable & Sendable>: IntentResult {
  /// The value, nil for a result without one.
  public let value: Value?
  /// A sentence for the person who triggered the intent.
  public let dialog: String?

  /// The value encoded as JSON (nil without a value).
  public func encodedValue() throws -> Data? {
    try value.map { try JSONEncoder().encode($0) }
  }
}

/// The value type of a result without a value.
public struct NoIntentValue: Codable, Sendable, Hashable {}

extension IntentResult where Self == IntentResultContainer<NoIntentValue> {
  /// A result without a value: Apple's `.result()`.
  public static func result(dialog: String? = nil) -> Self { IntentResultContainer(value: nil, dialog: dialog) }
}

extension IntentResult {
  /// A result with `value`, which the caller reads with ``IntentResponse/value(as:)``: Apple's `.result(value:)`.
  public static func result<Value>(value: Value, dialog: String? = nil) -> Self
  where Self == IntentResultContainer<Value> {
    IntentResultContainer(value: value, dialog: dialog)
  }
}

/// What the caller of ``GroupContainerCore/GroupContainer/perform(_:inAppWithScheme:timeout:)`` gets back.
public struct IntentResponse: Sendable, Equatable {
  /// The result's value as JSON, nil when the intent returned none.
  public let encodedValue: Data?
  /// The result's dialog, if any.
  public let dialog: String?

  /// The result's value decoded as `type`.
  /// - Throws: ``IntentError/invalidReply(_:reason:)`` when there is no value or it is not a `type`.
  public func value<T: Decodable>(as type: T.Type) throws(IntentError) -> T {
    guard let encodedValue else { throw .invalidReply("\(T.self)", reason: "the intent returned no value") }
    do { return try UntrustedJSON.decode(T.self, from: encodedValue) } catch {
      throw .invalidReply("\(T.self)", reason: "the value is not a \(T.self): \(error)")
    }
  }
}
