// The scoreboard Live Activity in the widget (`widget scoreboard …`): follows the app's match live (compact and
// expanded views), a "like" button per team performed in the app's process, the final score after the end, and
// the user's dismissal.
//
// widget scoreboard [--headless]
//   (no option)   the screen: 1 like the home team, 2 like the away team, x dismiss the match, q quit; a dismissed
//                 match leaves the widget waiting for the next one (as a widget stays after its activity is gone)
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
    @Sendable func like(_ team: String, _ activity: Activity<ScoreboardAttributes>?) async {
      guard let activity else { return }
      do {
        let response = try await container.perform(LikeIntent(team: team), inAppWithScheme: Scoreboard.scheme)
        let name = team == "home" ? activity.attributes.homeTeam : activity.attributes.awayTeam
        console.log("liked \(name): ♥ \(try response.value(as: Int.self)) (performed in the app)")
      } catch { console.log("the like was not counted: \(error)") }
    }

    // The match on screen: the keys act on it (the keyboard thread is started once, matches come and go).
    let shown = Locked<Activity<ScoreboardAttributes>?>(nil)
    if terminal {
      Keyboard.listen { key in
        switch key {
        case "1": Task { await like("home", shown.withLock { $0 }) }
        case "2": Task { await like("away", shown.withLock { $0 }) }
        case "x": if let activity = shown.withLock({ $0 }) { Task { try? await activity.dismiss() } }
        case "q":
          FileHandle.standardOutput.write(Data("\u{1B}[0m\r\n".utf8))
          exit(0)
        default: break
        }
      }
    }
    /// Shows `activity` until it is dismissed (headless: until the script dismissed it).
    func follow(_ activity: Activity<ScoreboardAttributes>) async {
      let attributes = activity.attributes
      console.log("following the match: \(ScoreboardView.compact(attributes, activity.content.state))")
      @Sendable func draw(_ state: ScoreboardAttributes.ContentState, _ activityState: ActivityState) {
        if terminal {
          let expanded = ScoreboardView.expanded(attributes, state, activityState: activityState)
          let lines =
            [ScoreboardView.compact(attributes, state, activityState: activityState), ""]
            + expanded.split(separator: "\n").map(String.init)
            + ["", "1: like \(attributes.homeTeam) · 2: like \(attributes.awayTeam) · x: dismiss · q: quit"]
          FileHandle.standardOutput.write(Data(("\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\r\n")).utf8))
        } else {
          console.log("live: \(ScoreboardView.compact(attributes, state, activityState: activityState))")
        }
      }
      if terminal { draw(activity.content.state, activity.activityState) }

      let liked = Locked(false)
      let drawing = Task.detached {
        for await content in activity.contentUpdates {
          draw(content.state, activity.activityState)
          // The script likes once the match is under way (a score on the board).
          if headless, content.state.homeScore + content.state.awayScore > 0,
            !liked.withLock({ done in
              defer { done = true }; return done
            })
          {
            await like("home", activity)
            await like("home", activity)
            await like("away", activity)
          }
        }
      }
      defer { drawing.cancel() }
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
          return
        case .stale, .active:
          break
        }
      }
      if headless { exit(1) }
    }

    var newMatches = updates.makeAsyncIterator()
    var gone: Set<String> = []  // matches already followed to their dismissal (the stream may still hold them)
    while true {
      console.log("waiting for a match (host scoreboard)")
      var found = (try? Scoreboard.current(in: container)).flatMap { gone.contains($0.id) ? nil : $0 }
      while found == nil {
        guard let next = await newMatches.next() else { exit(1) }
        if !gone.contains(next.id) { found = next }
      }
      guard let activity = found else { exit(1) }
      shown.withLock { $0 = activity }
      await follow(activity)
      gone.insert(activity.id)
      shown.withLock { $0 = nil }
      if headless { exit(0) }
      if terminal {
        // The dismissal stays on screen above the waiting line: the widget does not end with the match.
        let final = ScoreboardView.compact(activity.attributes, activity.content.state, activityState: .dismissed)
        let lines = [final, "", "dismissed: the app no longer updates this match", "", "q: quit"]
        FileHandle.standardOutput.write(Data(("\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\r\n") + "\r\n\r\n").utf8))
      }
    }
  }
}
