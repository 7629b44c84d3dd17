// The scoreboard Live Activity in the widget (`widget scoreboard …`): follows the app's match live (compact and
// expanded views), a "like" button per team performed in the app's process, the final score after the end, and
// the user's dismissal.
//
// widget scoreboard [--headless]
//   (no option)   the screen: 1 like the home team, 2 like the away team, x dismiss the match, q quit
//   --headless    a script: follows the match, likes home twice and away once after the first score, shows the
//                 final score and dismisses the ended match
import Foundation
import GroupContainer
import ScoreboardKit
import SimpleTimerKit
import VideoWidgetKit

enum ScoreboardWidget {
  static func run(_ arguments: [String]) async -> Never {
    let headless = arguments.contains("--headless")
    let terminal = !headless && isatty(STDOUT_FILENO) == 1
    let console = Console(prefix: "[widget]", interactive: terminal)
    let container: GroupContainer
    let updates: AsyncStream<Activity<ScoreboardAttributes>>
    do {
      container = try Scoreboard.container()
      updates = try Activity<ScoreboardAttributes>.activityUpdates(in: container)  // before looking: none missed
    } catch {
      console.log("cannot open the app group: \(error)")
      exit(1)
    }
    console.log("waiting for a match (host scoreboard)")
    var found = try? Scoreboard.current(in: container)
    if found == nil {
      for await activity in updates {
        found = activity
        break
      }
    }
    guard let activity = found else { exit(1) }
    let attributes = activity.attributes
    console.log("following the match: \(ScoreboardView.compact(attributes, activity.content.state))")

    @Sendable func like(_ team: String) async {
      do {
        let response = try await container.perform(LikeIntent(team: team), inAppWithScheme: Scoreboard.scheme)
        let name = team == "home" ? attributes.homeTeam : attributes.awayTeam
        console.log("liked \(name): ♥ \(try response.value(as: Int.self)) (performed in the app)")
      } catch { console.log("the like was not counted: \(error)") }
    }
    @Sendable func draw(_ state: ScoreboardAttributes.ContentState, _ activityState: ActivityState) {
      if terminal {
        let expanded = ScoreboardView.expanded(attributes, state, activityState: activityState)
        let lines = [ScoreboardView.compact(attributes, state, activityState: activityState), ""]
          + expanded.split(separator: "\n").map(String.init)
          + ["", "1: like \(attributes.homeTeam) · 2: like \(attributes.awayTeam) · x: dismiss · q: quit"]
        FileHandle.standardOutput.write(Data(("\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\r\n")).utf8))
      } else {
        console.log("live: \(ScoreboardView.compact(attributes, state, activityState: activityState))")
      }
    }

    if terminal {
      draw(activity.content.state, activity.activityState)
      Keyboard.listen { key in
        switch key {
        case "1": Task { await like("home") }
        case "2": Task { await like("away") }
        case "x": Task { try? await activity.dismiss() }
        case "q":
          FileHandle.standardOutput.write(Data("\u{1B}[0m\r\n".utf8))
          exit(0)
        default: break
        }
      }
    }

    let liked = Locked(false)
    Task.detached {
      for await content in activity.contentUpdates {
        draw(content.state, activity.activityState)
        // The script likes once the match is under way (a score on the board).
        if headless, content.state.homeScore + content.state.awayScore > 0,
          !liked.withLock({ done in defer { done = true }; return done })
        {
          await like("home")
          await like("home")
          await like("away")
        }
      }
    }
    for await state in activity.activityStateUpdates {
      switch state {
      case .ended:
        let final = activity.content.state
        if terminal {
          draw(final, .ended)
        } else {
          console.log("final: \(ScoreboardView.compact(attributes, final, activityState: .ended))")
          for line in ScoreboardView.expanded(attributes, final, activityState: .ended).split(separator: "\n") {
            console.log("  \(line)")
          }
        }
        if headless {
          // The user swipes the final score away: the app sees it.
          try? await Task.sleep(for: .milliseconds(300))
          do {
            try await activity.dismiss()
            console.log("dismissed the match")
          } catch { console.log("cannot dismiss: \(error)") }
          exit(0)
        }
      case .dismissed:
        console.log("the match was dismissed")
        if headless { exit(0) }
      case .stale, .active:
        break
      }
    }
    exit(headless ? 1 : 0)
  }
}
