import Testing

@testable import DownloadAgent

/// The agent loop's idle state (`AgentActivity`): which trim each pass brings, and since when the agent is idle.
///
/// Mutants this suite catches (each run once and seen failing): no trim at the end of a burst (`.busy` staying busy
/// on an idle pass), the late trim never due (`lateTrimAt` not reached), the idle time not restarting with a busy
/// pass.
@Suite struct AgentActivityTests {
  let delay: UInt64 = 10

  @Test func aBurstIsTrimmedAtItsEndAndOnceMoreLater() {
    var activity = AgentActivity(lateTrimDelay: delay)
    #expect(activity.passed(busy: true, listed: true, now: 1) == nil)
    #expect(activity.idleFor(now: 2) == nil)
    #expect(activity.passed(busy: false, listed: false, now: 5) == .endOfBurst)
    #expect(activity.idleFor(now: 7) == 2)
    #expect(activity.passed(busy: false, listed: true, now: 8) == .afterListing)
    #expect(activity.passed(busy: false, listed: false, now: 9) == nil)
    #expect(activity.passed(busy: false, listed: false, now: 15) == .late)
    #expect(activity.passed(busy: false, listed: false, now: 16) == nil)
    #expect(activity.passed(busy: false, listed: true, now: 17) == .afterListing)
    #expect(activity.idleFor(now: 20) == 15)
  }

  @Test func aStartedAgentIsIdleFromItsFirstPassWithoutTrimming() {
    var activity = AgentActivity(lateTrimDelay: delay)
    #expect(activity.idleFor(now: 1) == nil)
    #expect(activity.passed(busy: false, listed: true, now: 3) == .afterListing)
    #expect(activity.passed(busy: false, listed: false, now: 30) == nil)
    #expect(activity.idleFor(now: 30) == 27)
  }

  @Test func aBusyPassRestartsTheIdleTimeAndDropsALateTrim() {
    var activity = AgentActivity(lateTrimDelay: delay)
    _ = activity.passed(busy: true, listed: false, now: 1)
    #expect(activity.passed(busy: false, listed: false, now: 2) == .endOfBurst)
    #expect(activity.passed(busy: true, listed: false, now: 4) == nil)
    #expect(activity.idleFor(now: 5) == nil)
    #expect(activity.passed(busy: false, listed: false, now: 6) == .endOfBurst)
    #expect(activity.passed(busy: false, listed: false, now: 13) == nil)  // due at 16 now, not 12
    #expect(activity.passed(busy: false, listed: false, now: 16) == .late)
  }

  @Test func takingTheLockAgainRestartsTheIdleTimeAndKeepsALateTrimDue() {
    var activity = AgentActivity(lateTrimDelay: delay)
    _ = activity.passed(busy: true, listed: false, now: 1)
    _ = activity.passed(busy: false, listed: false, now: 2)
    activity.restartIdleTime(now: 5)
    #expect(activity.idleFor(now: 6) == 1)
    #expect(activity.passed(busy: false, listed: false, now: 12) == .late)
    activity.restartIdleTime(now: 20)
    #expect(activity.idleFor(now: 21) == 1)
  }
}
