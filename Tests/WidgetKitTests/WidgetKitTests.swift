import FileCoordination
import Foundation
import GroupContainerCore
import SharedDefaults
import Synchronization
import TestSupport
import Testing

@testable import WidgetKit

/// Widget timelines and Today-widget updates, with the widget in another process (gc-test-helper's
/// `.widgetTimeline` and `.todayWidget`) and the app in this one.
///
/// Mutants seen failing (break one, run the suite):
/// - `WidgetCenter.observeRequests` also listening to every other kind's key: `aReloadOfAnotherKindIsNotHeard`.
/// - `.never` treated as `.atEnd`: `neverWaitsForARequest`.
/// - `.atEnd` treated as `.never`: `atEndAsksForTheNextTimeline`.
/// - entries shown as soon as the timeline comes (no wait for their dates): `entriesAreShownAtTheirDates`.
/// - `Wakeup.signal` dropped when nobody waits (a request during `getTimeline` lost): `aRequestDuringAnUpdateIsNotLost`.
/// - `TodayWidgetUpdates` without its update time-out: `aStuckUpdateFailsAndTheScheduleGoesOn`.
/// - `OneAnswer` resuming twice: `aProviderAnsweringTwiceIsHeardOnce` traps.
@Suite("Widget timelines and Today widgets across processes", .runSlot(.minutes(3)))
struct WidgetKitTests {
  let root: TestRoot
  let container: GroupContainer
  let defaults: SharedDefaults
  let center: WidgetCenter

  init() throws {
    root = try TestRoot()
    container = try root.container()
    defaults = try SharedDefaults(container: container)
    center = try WidgetCenter(container: container)
  }

  func timelineWidget(
    _ kind: String, policy: HelperCommand.ReloadPolicy, entries: Int = 1, spacingMs: Int = 0
  ) throws -> Child {
    try Child(
      .widgetTimeline(kind: kind, policy: policy, entries: entries, spacingMS: spacingMs), root: root.path,
      group: container.identifier)
  }

  /// The parsed "entry <call> <index> <headline> <late-ms>" lines so far.
  func entries(_ child: Child) -> [(call: Int, index: Int, headline: String, lateMs: Int)] {
    child.output.compactMap { line in
      let f = line.split(separator: " ")
      guard f.count == 5, f[0] == "entry", let call = Int(f[1]), let index = Int(f[2]), let late = Int(f[4]) else {
        return nil
      }
      return (call, index, String(f[3]), late)
    }
  }

  @Test("the app's reloadTimelines(ofKind:) in this process makes the widget process get a new timeline at once")
  func aReloadFromAnotherProcessReachesTheWidget() async throws {
    try defaults.set("first", forKey: "headline")
    let widget = try timelineWidget("news", policy: .never)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 0 first") } != nil)
    try defaults.set("second", forKey: "headline")
    center.reloadTimelines(ofKind: "news")
    #expect(await widget.line { $0.hasPrefix("entry 2 0 second") } != nil)
    try defaults.set("third", forKey: "headline")
    center.reloadAllTimelines()
    #expect(await widget.line { $0.hasPrefix("entry 3 0 third") } != nil)
  }

  @Test("groupctl widgets reload asks one kind, or every kind")
  func groupctlReload() async throws {
    try defaults.set("one", forKey: "headline")
    let widget = try timelineWidget("news", policy: .never)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 0 one") } != nil)
    try defaults.set("two", forKey: "headline")
    let kind = try await groupctl(["widgets", "reload", container.identifier, "--root", root.path, "--kind", "news"])
    #expect(kind.status == 0, "\(kind.err)")
    #expect(await widget.line { $0.hasPrefix("entry 2 0 two") } != nil)
    try defaults.set("three", forKey: "headline")
    let all = try await groupctl(["widgets", "reload", container.identifier, "--root", root.path])
    #expect(all.status == 0, "\(all.err)")
    #expect(await widget.line { $0.hasPrefix("entry 3 0 three") } != nil)
  }

  @Test("a reload of another kind is not heard")
  func aReloadOfAnotherKindIsNotHeard() async throws {
    try defaults.set("a", forKey: "headline")
    let widget = try timelineWidget("news", policy: .never)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 0 a") } != nil)
    center.reloadTimelines(ofKind: "weather")
    // Room for a wrong reload to happen before the next request (its absence cannot be awaited otherwise).
    try await Task.sleep(for: .milliseconds(300))
    try defaults.set("b", forKey: "headline")
    center.reloadTimelines(ofKind: "news")
    #expect(await widget.line { $0.contains(" b ") } != nil)
    #expect(entries(widget).map { "\($0.call) \($0.headline)" } == ["1 a", "2 b"])
  }

  @Test("with .never the widget waits for a request, however long")
  func neverWaitsForARequest() async throws {
    try defaults.set("x", forKey: "headline")
    let widget = try timelineWidget("news", policy: .never, entries: 2, spacingMs: 50)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 1 x") } != nil)
    try await Task.sleep(for: .milliseconds(400))  // 8 reload floors: a wrong reload would have come by now
    try defaults.set("y", forKey: "headline")
    center.reloadTimelines(ofKind: "news")
    #expect(await widget.line { $0.hasPrefix("entry 2 0 y") } != nil)
    #expect(entries(widget).filter { $0.call == 1 }.count == 2)
    #expect(!entries(widget).contains { $0.call == 2 && $0.headline == "x" })
  }

  @Test("with .atEnd the widget asks for the next timeline once the last entry is shown; .after(date) at the date")
  func atEndAsksForTheNextTimeline() async throws {
    try defaults.set("x", forKey: "headline")
    let atEnd = try timelineWidget("a", policy: .atEnd, entries: 3, spacingMs: 40)
    defer { atEnd.kill() }
    let after = try timelineWidget("b", policy: .afterMS(200), entries: 2, spacingMs: 40)
    defer { after.kill() }
    #expect(await atEnd.line { $0.hasPrefix("entry 3 2 x") } != nil)
    #expect(await after.line { $0.hasPrefix("entry 3 1 x") } != nil)
    for widget in [atEnd, after] {
      let seen = entries(widget)
      // Every timeline's entries in order, timelines in order: nothing skipped, nothing repeated.
      let perTimeline = widget === atEnd ? 3 : 2
      let expected = (0..<seen.count).map { (1 + $0 / perTimeline, $0 % perTimeline) }
      #expect(seen.map { "\($0.call).\($0.index)" } == expected.map { "\($0.0).\($0.1)" })
    }
  }

  @Test("entries are shown when their dates come, never before")
  func entriesAreShownAtTheirDates() async throws {
    let widget = try timelineWidget("news", policy: .never, entries: 4, spacingMs: 150)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 3 ") } != nil)
    let seen = entries(widget)
    #expect(seen.map(\.index) == [0, 1, 2, 3])
    #expect(seen.allSatisfy { $0.lateMs >= 0 }, "shown before its date: \(seen)")
  }

  @Test("requests made while the provider works are coalesced into one more reload, never lost")
  func aRequestDuringAnUpdateIsNotLost() async throws {
    let wakeup = Wakeup()
    wakeup.signal()  // nobody waits: kept
    wakeup.signal()  // coalesced with the first
    #expect(await wakeup.wait(timeout: .seconds(10)))
    #expect(await !wakeup.wait(timeout: .milliseconds(20)))
    wakeup.signal()
    wakeup.reset()  // what it asked for is being done
    #expect(await !wakeup.wait(timeout: .milliseconds(20)))
    // A wait ended by a signal from another thread.
    let waiter = Task { await wakeup.wait(timeout: .seconds(20)) }
    try await Task.sleep(for: .milliseconds(50))
    wakeup.signal()
    #expect(await waiter.value)
    // Cancelled: ends at once, false.
    let cancelled = Task { await wakeup.wait(timeout: nil) }
    cancelled.cancel()
    #expect(await !cancelled.value)
  }

  @Test("a provider that calls its completion twice is heard once")
  func aProviderAnsweringTwiceIsHeardOnce() async throws {
    try defaults.set(true, forKey: "answerTwice")
    try defaults.set("once", forKey: "headline")
    let widget = try timelineWidget("news", policy: .never)
    defer { widget.kill() }
    #expect(await widget.line { $0.hasPrefix("entry 1 0 once") } != nil)
    try defaults.set("again", forKey: "headline")
    center.reloadTimelines(ofKind: "news")
    #expect(await widget.line { $0.hasPrefix("entry 2 0 again") } != nil)
    #expect(widget.process.isRunning)
  }

  func todayWidget(refreshMs: Int64, timeoutMs: Int64 = 30_000) throws -> Child {
    try Child(
      .todayWidget(kind: "today", refreshMS: refreshMs, updateTimeoutMS: timeoutMs), root: root.path,
      group: container.identifier)
  }

  @Test("a Today widget updates on request and says newData only when something changed")
  func todayWidgetRedrawsOnlyOnNewData() async throws {
    try defaults.set("A", forKey: "headline")
    let widget = try todayWidget(refreshMs: 600_000)
    defer { widget.kill() }
    #expect(await widget.line { $0 == "update newData A" } != nil)
    center.reloadTimelines(ofKind: "today")
    #expect(await widget.line { $0 == "update noData" } != nil)
    try defaults.set("B", forKey: "headline")
    center.reloadTimelines(ofKind: "today")
    #expect(await widget.line { $0 == "update newData B" } != nil)
    try defaults.set(true, forKey: "fail")
    center.reloadAllTimelines()
    #expect(await widget.line { $0 == "update failed" } != nil)
    #expect(widget.output == ["update newData A", "update noData", "update newData B", "update failed"])
  }

  @Test("a Today widget updates on its schedule without any request")
  func todayWidgetUpdatesOnItsSchedule() async throws {
    try defaults.set("A", forKey: "headline")
    let widget = try todayWidget(refreshMs: 100)
    defer { widget.kill() }
    #expect(await widget.line { $0 == "update newData A" } != nil)
    try defaults.set("C", forKey: "headline")
    #expect(await widget.line { $0 == "update newData C" } != nil)
  }

  @Test("an update that never calls its completion fails after its time-out, and the schedule goes on")
  func aStuckUpdateFailsAndTheScheduleGoesOn() async throws {
    try defaults.set("A", forKey: "headline")
    try defaults.set(true, forKey: "stuck")
    let widget = try todayWidget(refreshMs: 600_000, timeoutMs: 200)
    defer { widget.kill() }
    #expect(await widget.line { $0 == "update failed" } != nil)
    try defaults.set(false, forKey: "stuck")
    center.reloadTimelines(ofKind: "today")
    #expect(await widget.line { $0 == "update newData A" } != nil)
  }
}
