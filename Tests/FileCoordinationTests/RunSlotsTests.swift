import Synchronization
import TestSupport
import Testing

/// The test process's run slots (TestSupport/RunSlots.swift): a test that asks for every slot (`alone`) runs with no
/// other, and is not passed over by tests asking after it. On a set of slots of its own, not the process's.
///
/// Mutants this suite catches: a slot given to a later asker while an earlier one waits (no `waiting.isEmpty` in
/// `acquire`): `aTestThatRunsAloneWaitsForTheOthersAndGoesFirst`.
@Suite struct RunSlotsTests {
  private final class Runs: Sendable {
    let alone = Atomic(false)
    let later = Atomic(false)
  }

  /// Waits (a hang's limit) until `condition` holds.
  private func until(_ what: String, _ condition: () -> Bool) async throws {
    for _ in 0..<60_000 where !condition() { try await Task.sleep(for: .milliseconds(1)) }
    try #require(condition(), "\(what) within a minute")
  }

  @Test func aTestThatRunsAloneWaitsForTheOthersAndGoesFirst() async throws {
    let slots = RunSlots(width: 3)
    await slots.acquire()
    await slots.acquire()
    let runs = Runs()
    let alone = Task {
      await slots.acquire(3)
      runs.alone.store(true, ordering: .releasing)
    }
    try await until("the alone test asks") { slots.waiting == 1 }
    // One slot is free, but the test asking for all of them asked first: a later one-slot test waits behind it.
    let later = Task {
      await slots.acquire()
      runs.later.store(true, ordering: .releasing)
    }
    try await until("the later test asks") { slots.waiting == 2 }
    #expect(slots.free == 1)
    let bothWait = !runs.alone.load(ordering: .acquiring) && !runs.later.load(ordering: .acquiring)
    #expect(bothWait)
    // One of the two running tests ends: two free, still not all.
    slots.release()
    #expect(slots.waiting == 2 && slots.free == 2)
    // The other ends: the alone test takes all three; the later one still waits.
    slots.release()
    await alone.value
    #expect(slots.free == 0 && slots.waiting == 1)
    let laterWaits = !runs.later.load(ordering: .acquiring)
    #expect(laterWaits)
    // The alone test ends: the later one runs.
    slots.release(3)
    await later.value
    #expect(slots.free == 2 && slots.waiting == 0)
  }

  private final class Order: Sendable { let list = Mutex<[Int]>([]) }

  @Test func slotsGoToTheWaitingInTheOrderTheyAsked() async throws {
    let slots = RunSlots(width: 2)
    await slots.acquire(2)
    let order = Order()
    var tasks: [Task<Void, Never>] = []
    for n in 0..<3 {
      tasks.append(
        Task {
          await slots.acquire()
          order.list.withLock { $0.append(n) }
        })
      try await until("test \(n) asks") { slots.waiting == n + 1 }
    }
    slots.release(2)  // two free: the first two askers run, the third waits
    for task in tasks.prefix(2) { await task.value }
    #expect(order.list.withLock { $0 } == [0, 1])
    #expect(slots.waiting == 1 && slots.free == 0)
    slots.release()
    await tasks[2].value
    #expect(order.list.withLock { $0 } == [0, 1, 2])
  }

  /// The test process's own slots: a test that stalls the shared watcher holds every one of them.
  @Test(.runSlot(.minutes(1), alone: true)) func aTestThatRunsAloneHoldsEverySlot() async {
    #expect(RunSlots.shared.free == 0)
    await withWatcherStalled(nanoseconds: 1_000_000) {}
  }
}
