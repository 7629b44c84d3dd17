import LiveActivities

/// The scoreboard Live Activity of the demo: two teams (fixed for the match) and a score with likes that change.
public struct ScoreboardAttributes: ActivityAttributes {
  /// The changing part: scores, likes per team, and whether the match is over.
  public struct ContentState: Codable, Hashable, Sendable {
    /// The home team's score.
    public var homeScore: Int
    /// The away team's score.
    public var awayScore: Int
    /// Likes given to the home team (from the widget's buttons).
    public var homeLikes: Int
    /// Likes given to the away team.
    public var awayLikes: Int
    /// Whether the match is over (the final score).
    public var isFinal: Bool

    /// A state; everything at zero and not final by default.
    public init(homeScore: Int = 0, awayScore: Int = 0, homeLikes: Int = 0, awayLikes: Int = 0, isFinal: Bool = false) {
      self.homeScore = homeScore
      self.awayScore = awayScore
      self.homeLikes = homeLikes
      self.awayLikes = awayLikes
      self.isFinal = isFinal
    }
  }

  /// The home team's name.
  public var homeTeam: String
  /// The away team's name.
  public var awayTeam: String

  /// The match between `homeTeam` and `awayTeam`.
  public init(homeTeam: String, awayTeam: String) {
    self.homeTeam = homeTeam
    self.awayTeam = awayTeam
  }
}

/// The scoreboard's views as text: a compact line (the Dynamic Island's compact presentation) and an expanded
/// block (the Lock Screen's). Pure functions of the attributes, the content and the state, so host, widget and
/// tests render the same thing.
public enum ScoreboardView {
  /// One line, e.g. `LYO 2–1 NAN · FT` (three-letter codes; `· FT` once final, `· stale` when out of date).
  public static func compact(
    _ attributes: ScoreboardAttributes, _ state: ScoreboardAttributes.ContentState,
    activityState: ActivityState = .active
  ) -> String {
    var line = "\(code(attributes.homeTeam)) \(state.homeScore)–\(state.awayScore) \(code(attributes.awayTeam))"
    if state.isFinal || activityState == .ended {
      line += " · FT"
    } else if activityState == .stale {
      line += " · stale"
    }
    return line
  }

  /// Several lines: the teams with their scores and likes, and the status.
  ///
  /// ```
  /// Lyon          2   ♥ 14
  /// Nantes        1   ♥ 3
  /// Full time
  /// ```
  public static func expanded(
    _ attributes: ScoreboardAttributes, _ state: ScoreboardAttributes.ContentState,
    activityState: ActivityState = .active
  ) -> String {
    let width = max(attributes.homeTeam.count, attributes.awayTeam.count, 4) + 2
    func row(_ team: String, _ score: Int, _ likes: Int) -> String {
      team + String(repeating: " ", count: width - team.count) + "\(score)   ♥ \(likes)"
    }
    let status: String
    if state.isFinal || activityState == .ended || activityState == .dismissed {
      status = "Full time"
    } else if activityState == .stale {
      status = "Live (not updated lately)"
    } else {
      status = "Live"
    }
    return [
      row(attributes.homeTeam, state.homeScore, state.homeLikes),
      row(attributes.awayTeam, state.awayScore, state.awayLikes),
      status,
    ].joined(separator: "\n")
  }

  /// The first three letters of a team's name, upper-cased (the whole name when shorter).
  static func code(_ team: String) -> String { String(team.filter { !$0.isWhitespace }.prefix(3)).uppercased() }
}
