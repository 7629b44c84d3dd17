import BackgroundDownloads
import SystemLayer
import Testing

/// What a read of every task costs for `ScanPacing`: the CPU time it used, not the time it waited. Counted as wall
/// time, the agent's scan charged itself the `fsync` of its group commit and put the next listing 20 times that off
/// (200–300 ms on a journaled ext4): the rest of a burst of new tasks waited unseen.
///
/// Mutant this suite catches (run once and seen failing): `measure` reading `MonotonicClock` instead of the thread's
/// CPU clock (`aReadsWaitIsNotItsCost`).
@Suite struct ScanPacingTests {
  @Test func aReadsWaitIsNotItsCost() {
    let waited: UInt64 = 200_000_000
    let began = MonotonicClock.nanoseconds()
    let (value, cost) = ScanPacing.measure {
      MonotonicClock.sleep(nanoseconds: waited)
      return 7
    }
    #expect(value == 7)
    #expect(MonotonicClock.nanoseconds() - began >= waited)
    // A sleeping thread uses microseconds of CPU, however loaded the machine: a quarter of the wait is far above it.
    #expect(cost < waited / 4, "a 200 ms sleep cost \(cost) ns")
    #expect(ScanPacing.interval(minimum: 20_000_000, lastCost: cost) < waited)
  }

  @Test func aReadsWorkIsItsCost() {
    let began = MonotonicClock.nanoseconds()
    // Work, not waiting: spins until this thread has used 20 ms of CPU by its own clock.
    let (_, cost) = ScanPacing.measure {
      let start = ThreadCPUClock.nanoseconds()
      var spins = 0
      while ThreadCPUClock.nanoseconds() - start < 20_000_000 { spins &+= 1 }
      return spins
    }
    #expect(cost >= 20_000_000)
    #expect(cost <= MonotonicClock.nanoseconds() - began, "CPU time within the wall time it took")
    #expect(ScanPacing.interval(minimum: 20_000_000, lastCost: cost) == cost * 20)
  }

  @Test func readsAre20TimesTheirCostApartOrTwiceWithNothingElseToDo() {
    #expect(ScanPacing.interval(minimum: 20_000_000, lastCost: 30_000_000) == 600_000_000)
    #expect(ScanPacing.interval(minimum: 20_000_000, lastCost: 30_000_000, idle: true) == 60_000_000)
    #expect(ScanPacing.interval(minimum: 20_000_000, lastCost: 5_000_000, idle: true) == 20_000_000, "the floor")
  }
}
