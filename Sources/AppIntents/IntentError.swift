import FileCoordination

/// Why an intent was not performed, or its result not received.
public enum IntentError: Error, CustomStringConvertible, Sendable, Equatable {
  /// The intent could not be sent: it did not encode, or its encoding is over the size limit.
  case invalidIntent(String, reason: String)
  /// The app reached by the scheme has not registered an intent of this identifier.
  case unknownIntentType(String, scheme: String)
  /// The app refused the intent: it handles no intents, or its parameters did not decode there (`reason`).
  case hostRefused(String, scheme: String, reason: String)
  /// The intent's `perform()` threw; `message` is the error's description.
  case performFailed(String, message: String)
  /// The app did not answer within the timeout (it is still running; the intent may still be performed).
  case timedOut(String, scheme: String, seconds: Double)
  /// The app died before answering, and again when started once more.
  case hostDied(String, scheme: String)
  /// The app died while performing this delivery, and was not asked to perform it again (intents are performed
  /// at most once): whether it took effect is unknown.
  case interrupted(String, deliveryID: String)
  /// The app's answer was not a valid reply, or its value not of the expected type.
  case invalidReply(String, reason: String)
  /// The app could not be reached: no app registered the scheme, its registration is untrusted, or it could not
  /// be started.
  case delivery(OpenURLError)
  /// The container could not be used.
  case unavailable(String)

  /// What failed, for which intent, and what to do.
  public var description: String {
    switch self {
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
