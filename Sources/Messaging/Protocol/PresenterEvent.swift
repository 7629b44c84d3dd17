import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// One callback a process must run on one of its presenters.
struct PresenterEvent: Codable, Sendable, Hashable {
  enum Kind: String, Codable, Sendable, CaseIterable {
    // Before the access (the sender waits for the ack).
    case relinquishToReader, relinquishToWriter, save, accommodateDeletion, accommodateSubitemDeletion
    // After it.
    case didChange, didMove, subitemDidAppear, subitemDidChange, subitemDidMove

    var isBefore: Bool {
      switch self {
      case .relinquishToReader, .relinquishToWriter, .save, .accommodateDeletion, .accommodateSubitemDeletion: true
      default: false
      }
    }
  }

  var presenter: String
  var kind: Kind
  /// The subitem (subitem events) or the new location (`didMove`), container-relative.
  var path: String?
  /// The destination of `subitemDidMove`.
  var newPath: String?
}
