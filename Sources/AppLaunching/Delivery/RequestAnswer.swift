import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// What a request's receiver answered (`GroupContainer.sendRequest`).
package enum RequestAnswer: Sendable, Equatable {
  /// The handler's reply (also when the delivery id had been performed before: its recorded reply, DeliveryLedger.swift).
  case replied([UInt8])
  /// The delivery id (given) was claimed before by a process that died before replying: not performed again
  /// (at most once).
  case interrupted(String)
  /// The receiving process has no request handler for the scheme (any more).
  case notHandled
  /// No answer within the timeout; the receiver is still alive.
  case timedOut
  /// The receiver died before answering, also after the one retry (with the same delivery id).
  case receiverDied
}
