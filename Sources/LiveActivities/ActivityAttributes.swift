import Foundation
import GroupContainerCore

/// What an activity shows that never changes (``ActivityAttributes``) and what changes (its `ContentState`):
/// ActivityKit's `ActivityAttributes`.
///
/// ```swift
/// struct DeliveryAttributes: ActivityAttributes {
///   struct ContentState: Codable, Hashable, Sendable { var minutesLeft: Int }
///   var orderNumber: String
/// }
/// ```
///
/// Departure from iOS: both types must be `Sendable` too (Swift 6 strict concurrency: an ``Activity`` is shared
/// between tasks), and the type is named in the container by ``activityTypeName`` (the widget process must name it
/// the same way to find the app's activities).
public protocol ActivityAttributes: Codable, Sendable {
  /// The dynamic part: encoded as JSON, at most ``ActivityLimits/maximumContentStateBytes`` bytes.
  associatedtype ContentState: Codable & Hashable & Sendable

  /// The name activities of this type carry in the container; ``Activity/activities(in:)`` of a process lists
  /// the records carrying its type's name. Default: the type's unqualified name (`String(describing: Self.self)`),
  /// so an app and its widget that share the type (one module both link) agree.
  static var activityTypeName: String { get }
}

extension ActivityAttributes {
  /// The type's unqualified name, e.g. `ScoreboardAttributes`.
  public static var activityTypeName: String { TypeName.unqualified(Self.self) }
}

/// An activity's content: its state, when it goes stale and how relevant it is (ActivityKit's `ActivityContent`).
public struct ActivityContent<State: Codable & Hashable & Sendable>: Hashable, Sendable {
  /// The dynamic state the widget renders.
  public var state: State
  /// When the content is out of date: past it the activity's state is ``ActivityState/stale`` until the next
  /// update. `nil`: never.
  public var staleDate: Date?
  /// Orders several activities (higher first), as iOS does when it shows only some of them.
  public var relevanceScore: Double

  /// The content `state`, stale after `staleDate` (if any), with `relevanceScore` (default 0).
  public init(state: State, staleDate: Date?, relevanceScore: Double = 0.0) {
    self.state = state
    self.staleDate = staleDate
    self.relevanceScore = relevanceScore
  }
}

/// Where an activity is in its life (ActivityKit's `ActivityState`).
public enum ActivityState: String, Codable, Hashable, Sendable, CaseIterable {
  /// Started and shown; updates apply.
  case active
  /// Ended (by ``Activity/end(_:dismissalPolicy:)`` or 8 hours after its start); still shown until dismissed,
  /// updates are ignored.
  case ended
  /// Gone: removed by its dismissal policy, by the user (``Activity/dismiss()``) or 4 hours after its end.
  case dismissed
  /// Active, but its content's ``ActivityContent/staleDate`` has passed: the widget should say it is out of date.
  /// Updates apply (a fresh update makes it ``active`` again).
  case stale
}

/// When an ended activity goes away (ActivityKit's `ActivityUIDismissalPolicy`).
public struct ActivityUIDismissalPolicy: Hashable, Sendable {
  enum Kind: Hashable, Sendable {
    case `default`, immediate
    case after(Date)
  }
  let kind: Kind

  /// Stays visible up to 4 hours after its end.
  public static let `default` = ActivityUIDismissalPolicy(kind: .default)
  /// Dismissed at once.
  public static let immediate = ActivityUIDismissalPolicy(kind: .immediate)
  /// Dismissed at `date`, at the latest 4 hours after the end (a later date is capped; a past date is immediate).
  public static func after(_ date: Date) -> ActivityUIDismissalPolicy { ActivityUIDismissalPolicy(kind: .after(date)) }
}

/// How an activity would be updated by push (ActivityKit's `PushType`). Recorded with the activity; no push
/// service exists on Linux, so nothing is ever received: update through ``Activity/update(_:)`` instead.
public struct PushType: Hashable, Sendable {
  let name: String
  /// Updates sent to the activity's own push token.
  public static let token = PushType(name: "token")
  /// Updates broadcast on a channel.
  public static func channel(_ channelID: String) -> PushType { PushType(name: "channel:" + channelID) }
}

/// The limits and time rules of activities, as iOS applies them.
public enum ActivityLimits {
  /// The encoded (JSON) content state's largest size in bytes: 4 KB, as ActivityKit's.
  public static let maximumContentStateBytes = 4096
  /// The encoded (JSON) attributes' largest size in bytes.
  public static let maximumAttributesBytes = 4096
  /// An activity ends by itself this long after its start: 8 hours.
  public static let maximumDuration: TimeInterval = 8 * 3600
  /// An ended activity stays visible at most this long: 4 hours.
  public static let maximumDismissalDelay: TimeInterval = 4 * 3600
}
