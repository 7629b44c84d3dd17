// Live Activities as "the other process": the app that requests and updates, the widget that observes, the user
// who dismisses. Times come from GROUPCONTAINER_ACTIVITY_CLOCK_FILE when the test sets it.
import FileCoordination
import Foundation
import LiveActivities
import ScoreboardKit
import SystemLayer

let activityModes: Set<String> = [
  "act-request", "act-observe", "act-observe-new", "act-update", "act-like", "act-dismiss", "act-state",
]

/// The content's line: `content <home> <away> <home likes> <away likes> <final> <monotonic ns when seen>`.
func describe(_ content: ActivityContent<ScoreboardAttributes.ContentState>) -> String {
  let s = content.state
  return
    "content \(s.homeScore) \(s.awayScore) \(s.homeLikes) \(s.awayLikes) \(s.isFinal) \(MonotonicClock.nanoseconds())"
}

func findActivity(_ id: String, _ container: GroupContainer) throws -> Activity<ScoreboardAttributes> {
  guard let activity = try Activity<ScoreboardAttributes>.activities(in: container).first(where: { $0.id == id }) else {
    FileHandle.standardError.write(Data("no activity \(id)\n".utf8))
    exit(4)
  }
  return activity
}

func runActivityMode(_ command: String, _ args: [String], _ container: GroupContainer) async throws {
  switch command {
  case "act-request":
    // act-request <root> <group> <home team> <away team> [count]: requests count activities, prints `id <id>` each.
    let count = args.count > 6 ? Int(args[6])! : 1
    for _ in 0..<count {
      let activity = try Activity.request(
        attributes: ScoreboardAttributes(homeTeam: args[4], awayTeam: args[5]),
        content: ActivityContent(state: .init(), staleDate: nil), in: container)
      await say("id \(activity.id)")
    }

  case "act-observe":
    // act-observe <root> <group> <id>: the widget. Prints `ready`, then a `content …` line per new content and a
    // `state <state>` line per new state, until the activity is dismissed (`done`).
    let activity = try findActivity(args[4], container)
    let contents = activity.contentUpdates
    let states = activity.activityStateUpdates
    await say("ready \(activity.activityState.rawValue)")
    let contentTask = Task { for await content in contents { await say(describe(content)) } }
    for await state in states { await say("state \(state.rawValue)") }
    contentTask.cancel()
    await say("done")

  case "act-observe-new":
    // act-observe-new <root> <group>: prints `ready`, then `new <id> <home> <away>` per activity started later.
    let updates = try Activity<ScoreboardAttributes>.activityUpdates(in: container)
    await say("ready")
    for await activity in updates {
      await say("new \(activity.id) \(activity.attributes.homeTeam) \(activity.attributes.awayTeam)")
    }

  case "act-update":
    // act-update <root> <group> <id> <home score> <away score>: one update; prints `updated`.
    let activity = try findActivity(args[4], container)
    var content = activity.content
    content.state.homeScore = Int(args[5])!
    content.state.awayScore = Int(args[6])!
    try await activity.update(content)
    await say("updated")

  case "act-like":
    // act-like <root> <group> <id> <count> <home|away>: count atomic read-modify-writes adding a like; `done`.
    let activity = try findActivity(args[4], container)
    let (count, home) = (Int(args[5])!, args[6] == "home")
    await say("ready")
    for _ in 0..<count {
      try await activity.update { content in
        if home { content.state.homeLikes += 1 } else { content.state.awayLikes += 1 }
      }
    }
    await say("done")

  case "act-dismiss":
    // act-dismiss <root> <group> <id>: the user's swipe in the widget.
    try await findActivity(args[4], container).dismiss()
    await say("dismissed")

  case "act-state":
    // act-state <root> <group> <id>: `state <state>` by this process's clock.
    // Read through the store: a dismissed activity is not among `activities(in:)`.
    let store = try ActivityStore(container: container)
    let state = store.read(args[4]).record.map { ActivityRules.effective($0, now: store.now).state } ?? .dismissed
    await say("state \(state.rawValue)")

  default:
    break
  }
}
