// Live Activities as "the other process": the app that requests and updates, the widget that observes, the user
// who dismisses. Times come from GROUPCONTAINER_ACTIVITY_CLOCK_FILE when the test sets it.
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import LiveActivities
import ScoreboardKit
import SystemLayer

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

/// Runs the `.act…` commands (HelperCommand.swift says what each does and prints).
func runActivityMode(_ command: HelperCommand, _ container: GroupContainer) async throws {
  switch command {
  case .actRequest(let homeTeam, let awayTeam, let count):
    for _ in 0..<count {
      let activity = try Activity.request(
        attributes: ScoreboardAttributes(homeTeam: homeTeam, awayTeam: awayTeam),
        content: ActivityContent(state: .init(), staleDate: nil), in: container)
      await say("id \(activity.id)")
    }

  case .actObserve(let id):
    let activity = try findActivity(id, container)
    let contents = activity.contentUpdates
    let states = activity.activityStateUpdates
    await say("ready \(activity.activityState.rawValue)")
    let contentTask = Task { for await content in contents { await say(describe(content)) } }
    for await state in states { await say("state \(state.rawValue)") }
    contentTask.cancel()
    await say("done")

  case .actObserveNew:
    let updates = try Activity<ScoreboardAttributes>.activityUpdates(in: container)
    await say("ready")
    for await activity in updates {
      await say("new \(activity.id) \(activity.attributes.homeTeam) \(activity.attributes.awayTeam)")
    }

  case .actUpdate(let id, let homeScore, let awayScore):
    let activity = try findActivity(id, container)
    var content = activity.content
    content.state.homeScore = homeScore
    content.state.awayScore = awayScore
    try await activity.update(content)
    await say("updated")

  case .actUpdateLoop(let id):
    let activity = try findActivity(id, container)
    for n in 1... {
      try await activity.update(ActivityContent(state: .init(homeScore: n, awayScore: 0), staleDate: nil))
      await say("updated \(n)")
    }

  case .actLike(let id, let count, let side):
    let activity = try findActivity(id, container)
    let home = side == .home
    await say("ready")
    for _ in 0..<count {
      try await activity.update { content in
        if home { content.state.homeLikes += 1 } else { content.state.awayLikes += 1 }
      }
    }
    await say("done")

  case .actDismiss(let id):
    try await findActivity(id, container).dismiss()
    await say("dismissed")

  case .actState(let id):
    // Read through the store: a dismissed activity is not among `activities(in:)`.
    let store = try ActivityStore(container: container)
    let state = store.read(id).record.map { ActivityRules.effective($0, now: store.now).state } ?? .dismissed
    await say("state \(state.rawValue)")

  default:
    break
  }
}
