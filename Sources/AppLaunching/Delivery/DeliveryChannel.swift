import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// Which receiver of a process a delivery is for. Each has its own marker in `handlers/`, so a process that
/// handles a scheme's URLs but has not installed its request handler yet (still starting) is not sent requests.
enum DeliveryChannel: Sendable {
  /// `onOpenURL`: `handlers/<scheme>.<proc>`.
  case url
  /// Requests (app intents, AppIntents module): `handlers/@requests.<scheme>.<proc>`. A scheme starts with a
  /// letter, so no URL marker can begin with `@`.
  case requests

  var markerPrefix: String { self == .url ? "" : "@requests." }
}
