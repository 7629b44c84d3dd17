import AppLaunching
import FileCoordination
import GroupContainerCore
import Messaging

/// Why an intent was not performed, or its result not received.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`).
public struct IntentError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure an ``IntentError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `timedOut`.
    public var description: String { name }

    /// The intent could not be sent.
    public static let invalidIntent = Code("invalidIntent")
    /// The app reached by the scheme has not registered an intent of this identifier.
    public static let unknownIntentType = Code("unknownIntentType")
    /// The app refused the intent.
    public static let hostRefused = Code("hostRefused")
    /// The intent's `perform()` threw.
    public static let performFailed = Code("performFailed")
    /// The app did not answer within the timeout.
    public static let timedOut = Code("timedOut")
    /// The app died before answering, and again when started once more.
    public static let hostDied = Code("hostDied")
    /// The app died while performing this delivery; whether it took effect is unknown.
    public static let interrupted = Code("interrupted")
    /// The app's answer was not a valid reply.
    public static let invalidReply = Code("invalidReply")
    /// The app could not be reached (``IntentError/deliveryError``).
    public static let delivery = Code("delivery")
    /// The container could not be used.
    public static let unavailable = Code("unavailable")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case invalidIntent(String, reason: String)
    case unknownIntentType(String, scheme: String)
    case hostRefused(String, scheme: String, reason: String)
    case performFailed(String, message: String)
    case timedOut(String, scheme: String, seconds: Double)
    case hostDied(String, scheme: String)
    case interrupted(String, deliveryID: String)
    case invalidReply(String, reason: String)
    case delivery(OpenURLError)
    case unavailable(String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The intent could not be sent: it did not encode, or its encoding is over the size limit.
  public static func invalidIntent(_ type: String, reason: String) -> Self {
    Self(.invalidIntent(type, reason: reason))
  }
  /// The app reached by the scheme has not registered an intent of this identifier.
  public static func unknownIntentType(_ type: String, scheme: String) -> Self {
    Self(.unknownIntentType(type, scheme: scheme))
  }
  /// The app refused the intent: it handles no intents, or its parameters did not decode there (`reason`).
  public static func hostRefused(_ type: String, scheme: String, reason: String) -> Self {
    Self(.hostRefused(type, scheme: scheme, reason: reason))
  }
  /// The intent's `perform()` threw; `message` is the error's description.
  public static func performFailed(_ type: String, message: String) -> Self {
    Self(.performFailed(type, message: message))
  }
  /// The app did not answer within the timeout (it is still running; the intent may still be performed).
  public static func timedOut(_ type: String, scheme: String, seconds: Double) -> Self {
    Self(.timedOut(type, scheme: scheme, seconds: seconds))
  }
  /// The app died before answering, and again when started once more.
  public static func hostDied(_ type: String, scheme: String) -> Self { Self(.hostDied(type, scheme: scheme)) }
  /// The app died while performing this delivery, and was not asked to perform it again (intents are performed
  /// at most once): whether it took effect is unknown.
  public static func interrupted(_ type: String, deliveryID: String) -> Self {
    Self(.interrupted(type, deliveryID: deliveryID))
  }
  /// The app's answer was not a valid reply, or its value not of the expected type.
  public static func invalidReply(_ type: String, reason: String) -> Self { Self(.invalidReply(type, reason: reason)) }
  /// The app could not be reached: no app registered the scheme, its registration is untrusted, or it could not
  /// be started.
  public static func delivery(_ error: OpenURLError) -> Self { Self(.delivery(error)) }
  /// The container could not be used.
  public static func unavailable(_ reason: String) -> Self { Self(.unavailable(reason)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .invalidIntent: .invalidIntent
    case .unknownIntentType: .unknownIntentType
    case .hostRefused: .hostRefused
    case .performFailed: .performFailed
    case .timedOut: .timedOut
    case .hostDied: .hostDied
    case .interrupted: .interrupted
    case .invalidReply: .invalidReply
    case .delivery: .delivery
    case .unavailable: .unavailable
    }
  }

  /// The intent's identifier (its type), when the error names one.
  public var intentType: String? {
    switch detail {
    case .invalidIntent(let type, _), .unknownIntentType(let type, _), .hostRefused(let type, _, _),
      .performFailed(let type, _), .timedOut(let type, _, _), .hostDied(let type, _), .interrupted(let type, _),
      .invalidReply(let type, _):
      type
    case .delivery, .unavailable: nil
    }
  }

  /// The scheme of the app the intent was sent to, when the error names it (in lower case).
  public var scheme: String? {
    switch detail {
    case .unknownIntentType(_, let scheme), .hostRefused(_, let scheme, _), .timedOut(_, let scheme, _),
      .hostDied(_, let scheme):
      scheme
    default: nil
    }
  }

  /// The delivery id, for ``Code/interrupted``.
  public var deliveryID: String? {
    if case .interrupted(_, let id) = detail { id } else { nil }
  }

  /// How long the sender waited, for ``Code/timedOut``.
  public var seconds: Double? {
    if case .timedOut(_, _, let seconds) = detail { seconds } else { nil }
  }

  /// Why: what is wrong with the intent or the reply, why the app refused it, the message of `perform()`'s error,
  /// or why the container could not be used.
  public var reason: String? {
    switch detail {
    case .invalidIntent(_, let text), .hostRefused(_, _, let text), .performFailed(_, let text),
      .invalidReply(_, let text), .unavailable(let text):
      text
    default: nil
    }
  }

  /// Why the app could not be reached, for ``Code/delivery``.
  public var deliveryError: OpenURLError? {
    if case .delivery(let error) = detail { error } else { nil }
  }

  /// What failed, for which intent, and what to do.
  public var description: String {
    switch detail {
    case .invalidIntent(let type, let reason): "cannot send intent '\(type)': \(reason)"
    case .unknownIntentType(let type, let scheme):
      "the app for '\(scheme):' does not perform '\(type)': register it there with registerIntents(_:forScheme:)"
    case .hostRefused(let type, let scheme, let reason): "the app for '\(scheme):' refused '\(type)': \(reason)"
    case .performFailed(let type, let message): "intent '\(type)' failed in the app: \(message)"
    case .timedOut(let type, let scheme, let seconds):
      "the app for '\(scheme):' did not answer intent '\(type)' within \(seconds) s (it may still perform it)"
    case .hostDied(let type, let scheme):
      "the app for '\(scheme):' died before answering intent '\(type)', also when started again"
    case .interrupted(let type, let delivery):
      "the app died while performing intent '\(type)' (delivery \(delivery)); it is not performed twice, so "
        + "whether it took effect is unknown: check the app's state before sending it again"
    case .invalidReply(let type, let reason): "the reply to intent '\(type)' is invalid: \(reason)"
    case .delivery(let error): error.description
    case .unavailable(let reason): reason
    }
  }
}
