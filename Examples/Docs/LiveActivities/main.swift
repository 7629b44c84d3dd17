import Foundation
import GroupContainer
import ScoreboardKit  // ScoreboardAttributes: the demo's Live Activity (Examples/ScoreboardKit)

let container = try GroupContainer(identifier: "group.com.example.scores")

if CommandLine.arguments.dropFirst().first != "widget" {
  // The app:
  let activity = try Activity.request(
    attributes: ScoreboardAttributes(homeTeam: "Lyon", awayTeam: "Nantes"),
    content: ActivityContent(state: .init(), staleDate: .now + 600), in: container)
  try await activity.update(ActivityContent(state: .init(homeScore: 1), staleDate: .now + 600))
  try await activity.end(nil, dismissalPolicy: .default)
} else {
  // The widget, in its own process:
  for activity in try Activity<ScoreboardAttributes>.activities(in: container) {
    Task { for await content in activity.contentUpdates { print(activity.attributes, content.state) } }
    Task { for await state in activity.activityStateUpdates { print(activity.id, state) } }
  }
  for await started in try Activity<ScoreboardAttributes>.activityUpdates(in: container) {
    print("started:", started.attributes)
  }
}
