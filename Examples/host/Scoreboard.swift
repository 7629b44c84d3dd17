// The scoreboard Live Activity's app side (`host scoreboard …`): starts the match, updates the score, performs the
// widget's "like" intents, ends the match with the final score, and stops updating once the user dismissed it.
//
// host scoreboard [--headless | --intents]
//   (no option)   the screen: h home goal, a away goal, e end the match, q quit
//   --headless    a script: the match, three score updates, waits for three likes from the widget, the final
//                 score, then waits for the widget's user to dismiss it
//   --intents     started for a widget's intent while the app was not running: performs it, leaves after 5 s idle
import Foundation
import GroupContainer
import ScoreboardKit
import SimpleTimerKit
import VideoWidgetKit

enum ScoreboardHost {
  static func run(_ arguments: [String]) async -> Never {
    let headless = arguments.contains("--headless")
    let intentsOnly = arguments.contains("--intents")
    let console = Console(prefix: "[host]", interactive: !headless && !intentsOnly && isatty(STDOUT_FILENO) == 1)
    let container: GroupContainer
    do {
      container = try Scoreboard.container()
      // The widget's buttons reach this process; when it is not running, the app is started for them.
      try container.registerURLScheme(
        Scoreboard.scheme, launching: URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL,
        arguments: ["scoreboard", "--intents"])
      try container.registerIntents([LikeIntent.self], forScheme: Scoreboard.scheme)
    } catch {
      console.log("cannot open the app group: \(error)")
      exit(1)
    }
    if intentsOnly {
      console.log("started for the widget's intent")
      try? await Task.sleep(for: .seconds(5))
      exit(0)
    }

    let activity: Activity<ScoreboardAttributes>
    do {
      activity = try Activity.request(
        attributes: Scoreboard.match, content: ActivityContent(state: .init(), staleDate: nil), in: container)
    } catch {
      console.log("cannot start the match: \(error)")
      exit(1)
    }
    console.log("match started: \(ScoreboardView.compact(activity.attributes, activity.content.state))")

    // Likes come from the widget's intents (performed in this process or another host process); the dismissal
    // from the widget's user.
    let likes = Locked(0)
    let dismissed = Locked(false)
    Task.detached {
      for await content in activity.contentUpdates {
        let total = content.state.homeLikes + content.state.awayLikes
        let previous = likes.withLock { old in
          defer { old = total }; return old
        }
        if total != previous {
          console.log(
            "likes from the widget: \(Scoreboard.match.homeTeam) ♥ \(content.state.homeLikes), "
              + "\(Scoreboard.match.awayTeam) ♥ \(content.state.awayLikes)")
        }
      }
    }
    Task.detached {
      for await state in activity.activityStateUpdates where state == .dismissed {
        dismissed.withLock { $0 = true }
        console.log("the widget's user dismissed the match: no more updates")
      }
    }

    @Sendable func score(home: Int, away: Int) async {
      if dismissed.withLock({ $0 }) { return console.log("not updating: the match was dismissed") }
      do {
        let written = try await activity.update { content in
          content.state.homeScore += home
          content.state.awayScore += away
        }
        if let written { console.log("score: \(ScoreboardView.compact(activity.attributes, written.state))") }
      } catch { console.log("cannot update the score: \(error)") }
    }
    @Sendable func end() async {
      var final = activity.content
      final.state.isFinal = true
      do {
        try await activity.end(final, dismissalPolicy: .default)
        console.log("final score: \(ScoreboardView.compact(activity.attributes, final.state, activityState: .ended))")
      } catch { console.log("cannot end the match: \(error)") }
    }

    if headless {
      for (home, away) in [(1, 0), (0, 1), (1, 0)] {
        try? await Task.sleep(for: .milliseconds(500))
        await score(home: home, away: away)
      }
      for _ in 0..<600 where likes.withLock({ $0 }) < 3 { try? await Task.sleep(for: .milliseconds(100)) }
      guard likes.withLock({ $0 }) >= 3 else {
        console.log("the widget's likes did not come within a minute")
        exit(1)
      }
      await end()
      for _ in 0..<600 where !dismissed.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(100)) }
      exit(dismissed.withLock { $0 } ? 0 : 1)
    }

    console.show("h: home goal · a: away goal · e: end the match · q: quit")
    Keyboard.listen { key in
      switch key {
      case "h": Task { await score(home: 1, away: 0) }
      case "a": Task { await score(home: 0, away: 1) }
      case "e": Task { await end() }
      case "q": exit(0)
      default: break
      }
    }
    while true { try? await Task.sleep(for: .seconds(3600)) }
  }
}
