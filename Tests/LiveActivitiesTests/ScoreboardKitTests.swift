import Foundation
import LiveActivities
import ScoreboardKit
import TestSupport
import Testing

/// The scoreboard's text views (pure functions: no container).
@Suite(.runSlot(.minutes(10))) struct ScoreboardKitTests {
  let match = ScoreboardAttributes(homeTeam: "Lyon", awayTeam: "Nantes")

  @Test func compactLine() {
    let live = ScoreboardAttributes.ContentState(homeScore: 2, awayScore: 1, homeLikes: 14, awayLikes: 3)
    #expect(ScoreboardView.compact(match, live) == "LYO 2–1 NAN")
    #expect(ScoreboardView.compact(match, live, activityState: .stale) == "LYO 2–1 NAN · stale")
    var final = live
    final.isFinal = true
    #expect(ScoreboardView.compact(match, final) == "LYO 2–1 NAN · FT")
  }

  @Test func expandedBlock() {
    let state = ScoreboardAttributes.ContentState(
      homeScore: 2, awayScore: 1, homeLikes: 14, awayLikes: 3, isFinal: true)
    #expect(ScoreboardView.expanded(match, state) == "Lyon    2   ♥ 14\nNantes  1   ♥ 3\nFull time")
    let live = ScoreboardAttributes.ContentState(homeScore: 0, awayScore: 0)
    #expect(ScoreboardView.expanded(match, live, activityState: .stale).hasSuffix("\nLive (not updated lately)"))
  }

  @Test func stateEncodesWellUnderTheLimit() throws {
    let state = ScoreboardAttributes.ContentState(homeScore: 99, awayScore: 99, homeLikes: .max, awayLikes: .max)
    let bytes = try JSONEncoder().encode(state)
    #expect(bytes.count < ActivityLimits.maximumContentStateBytes)
  }
}
