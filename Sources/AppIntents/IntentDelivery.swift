import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Messaging
import Synchronization

/// The intents this process performs, per container: identifier → performer.
enum IntentTable {
  typealias Performer = @Sendable (Data) async -> IntentWire.Reply
  struct Entry { var schemes: Set<String> = []; var performers: [String: Performer] = [:] }
  static let tables = Mutex<[String: Entry]>([:])
  static let logger = Logger(label: "GroupContainer.AppIntents")

  /// Decodes the parameters as `T` and performs it; every failure becomes a reply.
  static func performer<T: AppIntent>(_ type: T.Type) -> Performer {
    { parameters in
      let intent: T
      do { intent = try UntrustedJSON.decode(T.self, from: parameters) } catch {
        return IntentWire.Reply(
          status: .invalidRequest, message: "the parameters of '\(T.intentIdentifier)' did not decode: \(error)")
      }
      do {
        let result = try await intent.perform()
        return IntentWire.Reply(status: .performed, value: try result.encodedValue(), dialog: result.dialog)
      } catch {
        return IntentWire.Reply(status: .failed, message: String(describing: error))
      }
    }
  }

  /// The request handler of a container: decode, look up, perform, encode.
  static func handle(_ bytes: [UInt8], container: String) async -> [UInt8] {
    let request: IntentWire.Request
    switch IntentWire.decodeRequest(bytes) {
    case .success(let decoded): request = decoded
    case .failure(let reply):
      logger.error("refusing an intent request: \(reply.message ?? "")")
      return IntentWire.encode(reply)
    }
    guard let performer = tables.withLock({ $0[container]?.performers[request.type] }) else {
      return IntentWire.encode(IntentWire.Reply(status: .unknownType))
    }
    return IntentWire.encode(await performer(request.parameters))
  }
}

extension GroupContainer {
  /// Makes this process perform `intents` when another process (a widget, a Live Activity, `groupctl intent`)
  /// asks the app reached by `scheme`: Apple finds an app's intents in its binary; here the app names them at
  /// run time. Call it early, with `registerURLScheme(_:launching:arguments:)` so that the app is started when
  /// an intent comes while it is not running. Registering again adds to the set.
  ///
  /// Each intent is decoded from its `Codable` parameters and performed in this process, in the background:
  /// `onOpenURL(schemes:perform:)` is not called. A delivery is performed at most once, even when this process
  /// dies while performing it and is started again (see <doc:PerformingIntents>).
  public func registerIntents(_ intents: [any AppIntent.Type], forScheme scheme: String) throws(FileCoordinatorError) {
    let container = path
    let schemes = IntentTable.tables.withLock { tables in
      var entry = tables[container] ?? IntentTable.Entry()
      entry.schemes.insert(scheme.lowercased())
      for intent in intents { entry.performers[intent.intentIdentifier] = IntentTable.performer(intent) }
      tables[container] = entry
      return entry.schemes
    }
    try handleRequests(schemes: schemes) { bytes in await IntentTable.handle(bytes, container: container) }
  }

  /// Stops performing intents in this process.
  public func removeIntents() {
    let container = path
    IntentTable.tables.withLock { $0[container] = nil }
    stopHandlingRequests()
  }

  /// Asks the app reached by `scheme` to perform `intent` in its process — running, or started for it — and
  /// returns its result: what a widget's `Button(intent:)` does on iOS.
  ///
  /// ## Behavior
  /// - The intent is delivered to the running process that registered intents for `scheme`; when none runs, the
  ///   app registered for `scheme` (`registerURLScheme(_:launching:arguments:)`) is started without arguments
  ///   beyond its registered ones, and receives it once it called ``registerIntents(_:forScheme:)``.
  /// - At most once: each call has a delivery id. If the app dies before answering it is started again and the
  ///   same delivery is sent once more; an app that had begun performing it answers
  ///   ``IntentError/interrupted(_:deliveryID:)`` instead of performing it again.
  /// - A timeout does not cancel the intent: the app may still perform it (``IntentError/timedOut(_:scheme:seconds:)``).
  /// - Throws: ``IntentError``.
  @discardableResult
  public func perform<Intent: AppIntent>(
    _ intent: Intent, inAppWithScheme scheme: String, timeout: Duration = .seconds(10)
  ) async throws(IntentError) -> IntentResponse {
    let parameters: Data
    do { parameters = try JSONEncoder().encode(intent) } catch {
      throw .invalidIntent(Intent.intentIdentifier, reason: "its parameters did not encode: \(error)")
    }
    return try await performIntent(
      withIdentifier: Intent.intentIdentifier, parameters: parameters, inAppWithScheme: scheme, timeout: timeout)
  }

  /// ``perform(_:inAppWithScheme:timeout:)`` for an intent known by its identifier and JSON parameters, without
  /// its Swift type (`groupctl intent`, scripts).
  @discardableResult
  public func performIntent(
    withIdentifier identifier: String, parameters: Data = Data("{}".utf8), inAppWithScheme scheme: String,
    timeout: Duration = .seconds(10)
  ) async throws(IntentError) -> IntentResponse {
    let request = try IntentWire.encode(type: identifier, parameters: parameters)
    let answer: RequestAnswer
    do {
      answer = try await sendRequest(
        request, deliveryID: UUID().uuidString, toScheme: scheme, timeout: timeout)
    } catch let error as OpenURLError {
      throw .delivery(error)
    } catch let error as FileCoordinatorError {
      if let inner = error.openURLError { throw .delivery(inner) }
      throw .unavailable(error.description)
    } catch {
      throw .unavailable("\(error)")
    }
    let lower = scheme.lowercased()
    switch answer {
    case .replied(let bytes):
      let reply = try IntentWire.decodeReply(bytes, type: identifier)
      switch reply.status {
      case .performed: return IntentResponse(encodedValue: reply.value, dialog: reply.dialog)
      case .unknownType: throw .unknownIntentType(identifier, scheme: lower)
      case .invalidRequest: throw .hostRefused(identifier, scheme: lower, reason: reply.message ?? "invalid request")
      case .failed: throw .performFailed(identifier, message: reply.message ?? "")
      }
    case .interrupted(let delivery): throw .interrupted(identifier, deliveryID: delivery)
    case .notHandled:
      throw .hostRefused(identifier, scheme: lower, reason: "the app performs no intents (registerIntents)")
    case .timedOut:
      throw .timedOut(
        identifier, scheme: lower,
        seconds: Double(timeout.components.seconds)
          + Double(timeout.components.attoseconds) / 1e18)
    case .receiverDied: throw .hostDied(identifier, scheme: lower)
    }
  }
}
