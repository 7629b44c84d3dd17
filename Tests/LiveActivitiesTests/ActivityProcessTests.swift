import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import SystemLayer
import TestSupport
import Testing

/// Activities across real processes: a widget (gc-test-helper) observing the host (this process) live, the user
/// dismissing in the widget, several writers at once, and the clock moved for every process.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - No atomic read-modify-write (`ActivityStore.modify` reading the record before the suite's transaction and
///   setting it after): `concurrentLikesFromThreeProcessesLoseNothing` fails (fewer likes than given).
/// - The clock file not watched by observers (`ActivityWatch` without its watch of the clock's directory):
///   `widgetFollowsTheClockAcrossProcesses` times out waiting for `state stale` (and
///   `ActivityLifecycleTests.stateUpdatesFollowTheClock` hits its time limit).
/// - The dismissal not checked by `update` (updates written to dismissed activities):
///   `dismissalInTheWidgetIsSeenByTheHost` fails (the content changes after the dismissal).
@Suite(.runSlot(.minutes(3))) struct ActivityProcessTests {
  @Test func widgetSeesEachUpdateInOrder() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let widget = try f.helper(.actObserve(id: activity.id))
    defer { widget.kill() }
    #expect(await widget.line { $0 == "ready active" } != nil)
    var latencies: [UInt64] = []
    var writes: [UInt64] = []
    // Lockstep: each update waits until the widget printed it, so every one must arrive, in order.
    // LIVEACTIVITIES_REPORT_LATENCY=<n> measures over n updates (the latency is printed on stderr).
    let count = ProcessInfo.processInfo.environment["LIVEACTIVITIES_REPORT_LATENCY"].flatMap { Int($0) } ?? 30
    for i in 1...count {
      let sent = monotonicNow()
      try await activity.update(score(i, 0))
      writes.append(monotonicNow() - sent)
      guard let line = await widget.line({ $0.hasPrefix("content \(i) ") }) else { return }
      if let seen = line.split(separator: " ").last.flatMap({ UInt64($0) }), seen >= sent {
        latencies.append(seen - sent)
      }
    }
    let contents = widget.output.filter { $0.hasPrefix("content ") }.map { Int($0.split(separator: " ")[1])! }
    #expect(contents == Array(1...count))
    try await activity.end(nil, dismissalPolicy: .immediate)
    #expect(await widget.line { $0 == "state dismissed" } != nil)
    #expect(await widget.exit() == 0)
    if ProcessInfo.processInfo.environment["LIVEACTIVITIES_REPORT_LATENCY"] != nil {
      func percentiles(_ values: [UInt64]) -> String {
        let sorted = values.sorted()
        let p = { (q: Double) in Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))]) / 1000 }
        return "p50 \(p(0.5)) µs, p99 \(p(0.99)) µs, max \(p(1)) µs"
      }
      let report =
        "over \(latencies.count): update → widget sees it \(percentiles(latencies)); "
        + "the update call alone \(percentiles(writes))\n"
      FileHandle.standardError.write(Data(report.utf8))
    }
  }

  @Test func widgetSeesABurstInOrder() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let widget = try f.helper(.actObserve(id: activity.id))
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("ready") } != nil)
    for i in 1...100 { try await activity.update(score(i, 0)) }
    #expect(await widget.line { $0.hasPrefix("content 100 ") } != nil)
    // Quick updates may coalesce, never reorder.
    let seen = widget.output.filter { $0.hasPrefix("content ") }.map { Int($0.split(separator: " ")[1])! }
    #expect(seen == seen.sorted() && Set(seen).count == seen.count)
  }

  @Test func widgetSeesNewActivities() async throws {
    let f = try ActivityFixture()
    let widget = try f.helper(.actObserveNew)
    defer { widget.kill() }
    #expect(await widget.line { $0 == "ready" } != nil)
    let a = try f.request("Lyon", "Nantes")
    let b = try f.request("Lens", "Brest")
    #expect(await widget.line { $0 == "new \(a.id) Lyon Nantes" } != nil)
    #expect(await widget.line { $0 == "new \(b.id) Lens Brest" } != nil)
  }

  @Test func hostSeesActivitiesAWidgetRequested() async throws {
    let f = try ActivityFixture()
    let updates = try Activity<ScoreboardAttributes>.activityUpdates(in: f.container)
    let app = try f.helper(.actRequest(homeTeam: "Nice", awayTeam: "Metz", count: 2))
    #expect(await app.exit() == 0)
    var iterator = updates.makeAsyncIterator()
    let first = await iterator.next()
    let second = await iterator.next()
    let ids = app.output.filter { $0.hasPrefix("id ") }.map { String($0.dropFirst(3)) }
    #expect(Set([first?.id, second?.id].compactMap { $0 }) == Set(ids))
    #expect(first?.attributes.homeTeam == "Nice")
  }

  @Test func dismissalInTheWidgetIsSeenByTheHost() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try await activity.update(score(1, 1))
    var states = activity.activityStateUpdates.makeAsyncIterator()
    let widget = try f.helper(.actDismiss(id: activity.id))
    #expect(await widget.exit() == 0)
    #expect(await states.next() == .dismissed)
    #expect(activity.activityState == .dismissed)
    try await activity.update(score(2, 2))  // ignored: the user dismissed it
    #expect(activity.content.state == .init(homeScore: 1, awayScore: 1))
    #expect(
      try ActivityStore(container: f.container).read(activity.id).record?.contentState
        == JSONText(
          .object([
            "homeScore": .integer(1), "awayScore": .integer(1), "homeLikes": .integer(0), "awayLikes": .integer(0),
            "isFinal": .bool(false),
          ])))
  }

  @Test func concurrentLikesFromThreeProcessesLoseNothing() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let likers = try (0..<3).map { i in
      try f.helper(.actLike(id: activity.id, count: 40, side: i == 2 ? .away : .home))
    }
    defer { for l in likers { l.kill() } }
    // Meanwhile this process updates the score and reads: no read may meet a torn record.
    let store = try ActivityStore(container: f.container)
    var torn = 0
    for i in 1...40 {
      try await activity.update { $0.state.homeScore = i }
      if case .damaged = store.read(activity.id) { torn += 1 }
    }
    for liker in likers { #expect(await liker.exit() == 0) }
    #expect(torn == 0)
    let state = activity.content.state
    #expect(state.homeLikes == 80)
    #expect(state.awayLikes == 40)
    #expect(state.homeScore == 40)
  }

  /// An acknowledged update survives SIGKILL of its writer: a fresh process reads at least the last score the
  /// killed writer printed (it prints after each update returns).
  @Test func anAcknowledgedUpdateSurvivesTheWritersKill() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let writer = try f.helper(.actUpdateLoop(id: activity.id))
    defer { writer.kill() }
    #expect(await writer.line { $0 == "updated 200" } != nil)
    writer.kill()  // SIGKILL, mid-stream
    _ = await writer.exit()
    let acknowledged = writer.output.compactMap { $0.hasPrefix("updated ") ? Int($0.dropFirst(8)) : nil }.max() ?? 0
    let list = try await f.groupctl(["list", f.container.identifier, "--json"])
    let object = try #require(list.out.first.flatMap(GroupctlActivitiesTests.object))
    let home = try #require((object["content_state"] as? [String: Any])?["homeScore"] as? Int)
    #expect(home >= acknowledged && acknowledged >= 200, "acknowledged \(acknowledged), read \(home)")
  }

  @Test func widgetFollowsTheClockAcrossProcesses() async throws {
    let f = try ActivityFixture()
    let activity = try f.request(staleDate: f.now.addingTimeInterval(300))
    let widget = try f.helper(.actObserve(id: activity.id))
    defer { widget.kill() }
    #expect(await widget.line { $0 == "ready active" } != nil)
    try f.at(301)
    #expect(await widget.line { $0 == "state stale" } != nil)
    try f.at(8 * 3600)
    #expect(await widget.line { $0 == "state ended" } != nil)
    let state = try f.helper(.actState(id: activity.id))
    #expect(await state.line { $0 == "state ended" } != nil)
    try f.at(12 * 3600)
    #expect(await widget.line { $0 == "state dismissed" } != nil)
    #expect(await widget.exit() == 0)
  }
}
