import AppIntents
import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities

/// The demo's match: where it lives and how a widget reaches the app.
public enum Scoreboard {
  /// The app group of the demo (the Timer's).
  public static let groupIdentifier = "group.com.example.simpletimer"
  /// The scheme the scoreboard app registers: intents performed by the widget's buttons are delivered through it.
  public static let scheme = "simplescore"
  /// The teams of the demo's match.
  public static let match = ScoreboardAttributes(homeTeam: "Lyon", awayTeam: "Nantes")

  /// The demo's container (its root from `GROUP_CONTAINER_ROOT`, as every demo process).
  public static func container() throws -> GroupContainer { try GroupContainer(identifier: groupIdentifier) }

  /// The newest match that still takes updates (active or stale), if any.
  public static func current(in container: GroupContainer) throws -> Activity<ScoreboardAttributes>? {
    try Activity<ScoreboardAttributes>.activities(in: container).last {
      $0.activityState == .active || $0.activityState == .stale
    }
  }
}

/// Why a like was not counted.
public enum ScoreboardError: Error, CustomStringConvertible {
  /// No match is on (none requested, or it ended).
  case noMatch
  /// A team other than "home" or "away".
  case unknownTeam(String)

  public var description: String {
    switch self {
    case .noMatch: "no match is on"
    case .unknownTeam(let team): "no team '\(team)' (home or away)"
    }
  }
}

/// The widget's "like" button (a `Button(intent:)` on iOS): performed in the app's process, it adds a like to the
/// team in the match's shared state, with an atomic update, and returns the team's likes.
public struct LikeIntent: LiveActivityIntent {
  public static let title = "Like"
  /// "home" or "away".
  public var team: String

  public init() { team = "home" }
  public init(team: String) { self.team = team }

  public func perform() async throws -> some IntentResult {
    guard team == "home" || team == "away" else { throw ScoreboardError.unknownTeam(team) }
    let container = try Scoreboard.container()
    guard let activity = try Scoreboard.current(in: container) else { throw ScoreboardError.noMatch }
    let written = try await activity.update { content in
      if team == "home" { content.state.homeLikes += 1 } else { content.state.awayLikes += 1 }
    }
    guard let state = written?.state else { throw ScoreboardError.noMatch }  // ended meanwhile
    return .result(value: team == "home" ? state.homeLikes : state.awayLikes)
  }
}
