import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The ack of a `request`: its status and, when replied, the reply's bytes.
package struct RequestAnswerRecord: Codable, Sendable {
  package enum Status: String, Codable, Sendable { case replied, interrupted, notHandled }
  package var status: Status
  package var reply: Data?

  package init(status: Status, reply: Data? = nil) {
    self.status = status
    self.reply = reply
  }
}
