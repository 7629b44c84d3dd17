import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The ack of a `request`: its status and, when replied, the reply's bytes.
struct RequestAnswerRecord: Codable, Sendable {
  enum Status: String, Codable, Sendable { case replied, interrupted, notHandled }
  var status: Status
  var reply: Data?
}
