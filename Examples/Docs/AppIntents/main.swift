import Foundation
import GroupContainer

// An intent: its stored properties are its parameters, perform() runs in the app's process.
struct LikeIntent: AppIntent {
  static let title = "Like"
  var team = "home"
  func perform() async throws -> some IntentResult {
    .result(value: try await Scoreboard.shared.like(team))
  }
}

let container = try GroupContainer(identifier: "group.com.example.scores")
if CommandLine.arguments.dropFirst().first == "like" {
  // The widget: performed in the app's process (started for it if it is not running); returns the intent's value.
  let likes = try await container.perform(LikeIntent(team: "away"), inAppWithScheme: "scoreboard")
    .value(as: Int.self)
  print("away has \(likes) likes")
} else {
  // The app (host), early in main:
  try container.registerURLScheme("scoreboard", launching: Bundle.main.executableURL!)
  try container.registerIntents([LikeIntent.self], forScheme: "scoreboard")
}
