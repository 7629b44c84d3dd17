import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import TestSupport
import Testing

/// Request, update, end and the time rules in one process, with an injected clock (no test sleeps for hours).
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - The 4 KB check skipped in `Activity.encode` (the limit not compared): `contentStateLimit` fails (4097 accepted).
/// - The 4 KB check left out of `end(_:dismissalPolicy:)` alone, or of `update(using:)` alone (`limit: .max` in
///   its encode): `contentStateLimitOnEndAndTransform` fails (the 4,097 bytes are written).
/// - The switch ignored in `request` (no `areActivitiesEnabled` guard): `disabledSwitchRefusesRequest` fails.
/// - Updates applied to ended activities (the `.active || .stale` guard of `update` removed):
///   `endWithDefaultPolicyStaysFourHours` fails (the content changes after the end).
/// - The 8 hour rule dropped from `ActivityRules.effective`: `endsByItselfAfterEightHours` fails.
/// - `.after(date)` not capped at 4 hours in `ActivityRules.end`: `endAfterDateIsCappedAtFourHours` fails.
@Suite(.runSlot(.minutes(3))) struct ActivityLifecycleTests {
  @Test func requestUpdateAndRead() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    #expect(activity.activityState == .active)
    #expect(activity.attributes.homeTeam == "Lyon")
    try await activity.update(score(1, 0))
    #expect(activity.content.state.homeScore == 1)
    // Another handle, as another process would get it, reads the same.
    let listed = try Activity<ScoreboardAttributes>.activities(in: f.container)
    #expect(listed.map(\.id) == [activity.id])
    #expect(listed.first?.content.state == .init(homeScore: 1, awayScore: 0))
  }

  @Test func endWithDefaultPolicyStaysFourHours() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try f.at(600)
    try await activity.end(score(3, 2), dismissalPolicy: .default)
    #expect(activity.activityState == .ended)
    #expect(activity.content.state.homeScore == 3)
    try await activity.update(score(9, 9))  // ignored, as on iOS
    #expect(activity.content.state == .init(homeScore: 3, awayScore: 2))
    try f.at(600 + 4 * 3600 - 1)
    #expect(activity.activityState == .ended)
    try f.at(600 + 4 * 3600)
    #expect(activity.activityState == .dismissed)
    #expect(try Activity<ScoreboardAttributes>.activities(in: f.container).isEmpty)
  }

  @Test func endImmediateDismissesNow() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try await activity.end(nil, dismissalPolicy: .immediate)
    #expect(activity.activityState == .dismissed)
    #expect(try Activity<ScoreboardAttributes>.activities(in: f.container).isEmpty)
  }

  @Test func endAfterDateIsCappedAtFourHours() async throws {
    let f = try ActivityFixture()
    let soon = try f.request()
    let late = try f.request()
    try await soon.end(nil, dismissalPolicy: .after(f.now.addingTimeInterval(3600)))
    try await late.end(nil, dismissalPolicy: .after(f.now.addingTimeInterval(10 * 3600)))
    try f.at(3600 - 1)
    #expect(soon.activityState == .ended)
    try f.at(3600)
    #expect(soon.activityState == .dismissed)
    #expect(late.activityState == .ended)
    try f.at(4 * 3600 - 1)
    #expect(late.activityState == .ended)
    try f.at(4 * 3600)
    #expect(late.activityState == .dismissed)
  }

  @Test func endsByItselfAfterEightHours() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try f.at(8 * 3600 - 1)
    #expect(activity.activityState == .active)
    try f.at(8 * 3600)
    #expect(activity.activityState == .ended)
    try await activity.update(score(5, 5))  // ignored: it has ended
    #expect(activity.content.state.homeScore == 0)
    try f.at(12 * 3600 - 1)
    #expect(activity.activityState == .ended)
    try f.at(12 * 3600)
    #expect(activity.activityState == .dismissed)
  }

  @Test func stalenessAndRecovery() async throws {
    let f = try ActivityFixture()
    let activity = try f.request(staleDate: f.now.addingTimeInterval(60))
    try f.at(59)
    #expect(activity.activityState == .active)
    try f.at(60)
    #expect(activity.activityState == .stale)
    try await activity.update(ActivityContent(state: .init(homeScore: 1), staleDate: f.now.addingTimeInterval(60)))
    #expect(activity.activityState == .active)
    #expect(activity.content.state.homeScore == 1)
  }

  @Test func severalActivitiesAtOnce() async throws {
    let f = try ActivityFixture()
    let a = try f.request("Lyon", "Nantes")
    let b = try f.request("Lens", "Brest")
    let c = try f.request("Nice", "Metz")
    try Activity.request(
      attributes: Note(title: "other type"), content: ActivityContent(state: .init(text: ""), staleDate: nil),
      in: f.container)
    #expect(Set([a.id, b.id, c.id]).count == 3)
    try await b.update(score(2, 2))
    try await a.end(nil, dismissalPolicy: .immediate)
    let listed = try Activity<ScoreboardAttributes>.activities(in: f.container)
    #expect(listed.map(\.id).sorted() == [b.id, c.id].sorted())
    #expect(listed.first { $0.id == b.id }?.content.state.homeScore == 2)
    #expect(listed.first { $0.id == c.id }?.content.state.homeScore == 0)
    #expect(try Activity<Note>.activities(in: f.container).count == 1)
  }

  @Test func contentStateLimit() async throws {
    let f = try ActivityFixture()
    let overhead = try JSONEncoder().encode(Note.ContentState(text: "")).count
    let exactly = Note.ContentState(text: String(repeating: "a", count: 4096 - overhead))
    let over = Note.ContentState(text: String(repeating: "a", count: 4097 - overhead))
    let activity = try Activity.request(
      attributes: Note(title: "limit"), content: ActivityContent(state: exactly, staleDate: nil), in: f.container)
    try await activity.update(ActivityContent(state: exactly, staleDate: nil))
    await #expect(throws: ActivityError.contentStateTooLarge(bytes: 4097, limit: 4096)) {
      try await activity.update(ActivityContent(state: over, staleDate: nil))
    }
    #expect(activity.content.state == exactly)
    #expect(throws: ActivityError.contentStateTooLarge(bytes: 4097, limit: 4096)) {
      try Activity.request(
        attributes: Note(title: "x"), content: ActivityContent(state: over, staleDate: nil), in: f.container)
    }
    #expect(try Activity<Note>.activities(in: f.container).count == 1)
  }

  /// The cap holds on every write of a state, not only `request` and `update(_:)`: an over-limit final content of
  /// `end` and an over-limit result of `update(using:)` are refused, and nothing is written (the activity stays
  /// active with its content, as another handle reads it).
  /// Mutants: `limit: .max` in `end`'s encode — the activity ends with 4,097 bytes; the same in `update(using:)` —
  /// the transform's 4,097 bytes are written. Each seen failing here.
  @Test func contentStateLimitOnEndAndTransform() async throws {
    let f = try ActivityFixture()
    let overhead = try JSONEncoder().encode(Note.ContentState(text: "")).count
    let exactly = Note.ContentState(text: String(repeating: "a", count: 4096 - overhead))
    let over = Note.ContentState(text: String(repeating: "a", count: 4097 - overhead))
    let activity = try Activity.request(
      attributes: Note(title: "limit"), content: ActivityContent(state: exactly, staleDate: nil), in: f.container)
    await #expect(throws: ActivityError.contentStateTooLarge(bytes: 4097, limit: 4096)) {
      try await activity.update(using: { $0.state = over })
    }
    await #expect(throws: ActivityError.contentStateTooLarge(bytes: 4097, limit: 4096)) {
      try await activity.end(ActivityContent(state: over, staleDate: nil))
    }
    let listed = try #require(try Activity<Note>.activities(in: f.container).first)
    #expect(listed.activityState == .active)
    #expect(listed.content.state == exactly)
    // At the limit both are written.
    let written = try await activity.update(using: { $0.state.text = "b" + $0.state.text.dropFirst() })
    #expect(written?.state.text.first == "b")
    try await activity.end(ActivityContent(state: exactly, staleDate: nil))
    #expect(activity.activityState == .ended)
    #expect(activity.content.state == exactly)
  }

  @Test func disabledSwitchRefusesRequest() async throws {
    let f = try ActivityFixture()
    #expect(try ActivityAuthorizationInfo(container: f.container).areActivitiesEnabled)
    let disable = try await f.groupctl(["disable", f.container.identifier])
    #expect(disable.status == 0)
    #expect(try ActivityAuthorizationInfo(container: f.container).areActivitiesEnabled == false)
    #expect(throws: ActivityError.denied(group: f.container.identifier)) { try f.request() }
    #expect(try Activity<ScoreboardAttributes>.activities(in: f.container).isEmpty)
    let enable = try await f.groupctl(["enable", f.container.identifier])
    #expect(enable.status == 0)
    _ = try f.request()
    #expect(try Activity<ScoreboardAttributes>.activities(in: f.container).count == 1)
  }

  @Test func enablementUpdatesFollowTheSwitch() async throws {
    let f = try ActivityFixture()
    var updates = try ActivityAuthorizationInfo(container: f.container).activityEnablementUpdates.makeAsyncIterator()
    #expect(try await f.groupctl(["disable", f.container.identifier]).status == 0)
    #expect(await updates.next() == false)
    #expect(try await f.groupctl(["enable", f.container.identifier]).status == 0)
    #expect(await updates.next() == true)
  }

  @Test func stateUpdatesFollowTheClock() async throws {
    let f = try ActivityFixture()
    let activity = try f.request(staleDate: f.now.addingTimeInterval(60))
    var states = activity.activityStateUpdates.makeAsyncIterator()
    try f.at(61)
    #expect(await states.next() == .stale)
    try f.at(8 * 3600)
    #expect(await states.next() == .ended)
    try f.at(12 * 3600)
    #expect(await states.next() == .dismissed)
    #expect(await states.next() == nil)
  }
}

/// A second attributes type, whose state is padded to a chosen size.
struct Note: ActivityAttributes {
  struct ContentState: Codable, Hashable, Sendable { var text: String }
  var title: String
}
