// What the article's example leaves to the app: its model.
actor Scoreboard {
  static let shared = Scoreboard()
  private var likes: [String: Int] = [:]
  func like(_ team: String) -> Int {
    likes[team, default: 0] += 1
    return likes[team]!
  }
}
