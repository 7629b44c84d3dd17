import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// One callback a process must run on one of its presenters.
package struct PresenterEvent: Codable, Sendable, Hashable {
  package enum Kind: String, Codable, Sendable, CaseIterable {
    // Before the access (the sender waits for the ack).
    case relinquishToReader, relinquishToWriter, save, accommodateDeletion, accommodateSubitemDeletion
    // After it.
    case didChange, didMove, subitemDidAppear, subitemDidChange, subitemDidMove

    package var isBefore: Bool {
      switch self {
      case .relinquishToReader, .relinquishToWriter, .save, .accommodateDeletion, .accommodateSubitemDeletion: true
      default: false
      }
    }
  }

  package var presenter: String
  package var kind: Kind
  /// The subitem (subitem events) or the new location (`didMove`), container-relative.
  package var path: String?
  /// The destination of `subitemDidMove`.
  package var newPath: String?

  package init(presenter: String, kind: Kind, path: String? = nil, newPath: String? = nil) {
    self.presenter = presenter
    self.kind = kind
    self.path = path
    self.newPath = newPath
  }
}
