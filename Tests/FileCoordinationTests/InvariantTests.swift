import Foundation
import Synchronization
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Invariants of the coordination core that no other test pinned down, each checked across real processes.
///
/// Mutants this suite catches (each broken on purpose once, seen failing by assertion, then restored):
/// - a new message overtakes the outbox's queued finishes (`Messenger.send` without `flushOutbox()`):
///   `aBurstOfWritesReachesAPresenterInOrder`;
/// - the in-process lock table drops the flock on the first of several holders' releases (`LockTable.release`
///   unlocking while holders remain): `theFlockStaysHeldUntilTheLastHolderInTheProcessReleases`;
/// - the root is chosen in another order than GROUP_CONTAINER_ROOT, XDG_DATA_HOME, HOME (e.g. XDG first):
///   `theRootComesFromGroupContainerRootThenXDGDataHomeThenHome`.
///
/// Breaks that used to hang the suite, now failed by assertion in the suites named (every multi-process test has
/// a one-minute time limit and bounded waits; a still-blocked access is abandoned, not waited for):
/// - liveness "never dead" (`isAlive` always true): MultiProcessTests `aLockHolderKilledWithSIGKILLBlocksNobody`,
///   `aPresenterKilledMidHandshakeIsNotWaitedFor`; DefaultsRobustnessTests (dead lock owners);
/// - liveness "always dead" (every other process reaped): `presenterHandshakeAcrossProcessesFollowsTheDocumentedOrder`,
///   GroupctlTests `statusListsProcessesPresentersAndLocks`, `aBurstOfWritesReachesAPresenterInOrder`;
/// - no wait for acks (`awaitAcks` returns at once): `aPresenterThatCannotSaveFailsTheAccessWithItsError`,
///   `anUnresponsivePresenterIsSkippedOrFailsAfterTheTimeout`, PresenterSemanticsTests;
/// - dropped reacquirers (`finish` runs none): the handshake test, PresenterSemanticsTests;
/// - no takeover of a dead lock owner (`SharedMemoryLock` never takes over): DefaultsRobustnessTests
///   `aProcessKilledHoldingTheLockNeverBlocksOthers`, `garbageInTheLockWordIsTakenOver`.
@Suite(.runSlot(.minutes(3))) struct InvariantTests {
  let group = "group.com.example.tests"

  @Test func aBurstOfWritesReachesAPresenterInOrder() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("burst.txt")
    try container.write(Data("0".utf8), to: url)
    let presenter = try Child(.present(item: "Documents/burst.txt"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    let writes = 60
    let coordinator = FileCoordinator()
    for i in 1...writes {
      try coordinator.coordinate(writingItemAt: url) { try container.write(Data("\(i)".utf8), to: $0) }
    }
    guard await PresenterSemanticsTests.waitFor("didChange", writes, presenter),
      await PresenterSemanticsTests.waitFor("reacquire", writes, presenter)
    else { return }
    let order = PresenterSemanticsTests.events(presenter).filter { $0 == "relinquishToWriter" || $0 == "didChange" }
    let expected = Array(repeating: ["relinquishToWriter", "didChange"], count: writes).flatMap { $0 }
    #expect(order == expected, "a prepare overtook a finish: \(order)")
    presenter.kill()
  }

  @Test func theFlockStaysHeldUntilTheLastHolderInTheProcessReleases() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("shared.txt")
    try container.write(Data("0".utf8), to: url)
    let log = root.path + "/order.log"
    var releasedAt: UInt64 = 0
    var writer: Child?
    // Two readers in this process, from two coordinators (two owners of one flock).
    try FileCoordinator().coordinate(readingItemAt: url) { _ in
      try FileCoordinator().coordinate(readingItemAt: url) { _ in }
      // One holder left: another process's write must still wait.
      writer = try Child(
        .access(mode: .write, item: "Documents/shared.txt", count: 1, holdMS: 0, log: log), root: root.path,
        group: group)
      // Room for a wrongly admitted writer to get in (an observation window, not a wait for success); the check
      // below is on order, not on time.
      let deadline = Date().addingTimeInterval(2)
      while Date() < deadline, !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("B ") {
        Thread.sleep(forTimeInterval: 0.01)
      }
      releasedAt = monotonicNow()
    }
    #expect(await writer?.exit() == 0)
    let intervals = Interval.parse((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    #expect(intervals.count == 1)
    #expect(
      intervals.allSatisfy { $0.start > releasedAt },
      "another process wrote while a reader of this process still held the item")
  }

  /// Runs gc-test-helper `.defaultRoot` with exactly `environment` and returns what it printed.
  func defaultRoot(_ root: TestRoot, _ environment: [String: String]) async throws -> String {
    let run = try await runHelperToEnd(.defaultRoot, root: root.path, group: group, environment: environment)
    return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  @Test func theRootComesFromGroupContainerRootThenXDGDataHomeThenHome() async throws {
    let root = try TestRoot()
    let all = ["GROUP_CONTAINER_ROOT": "/g/root", "XDG_DATA_HOME": "/x/data", "HOME": "/h/me"]
    await #expect(try defaultRoot(root, all) == "root /g/root")
    var env = all
    env["GROUP_CONTAINER_ROOT"] = nil
    await #expect(try defaultRoot(root, env) == "root /x/data/group-containers")
    env["XDG_DATA_HOME"] = nil
    await #expect(try defaultRoot(root, env) == "root /h/me/.local/share/group-containers")
    // Empty means unset; a relative XDG_DATA_HOME is ignored (XDG Base Directory rule); a relative root is an error.
    await #expect(
      try defaultRoot(root, ["GROUP_CONTAINER_ROOT": "", "XDG_DATA_HOME": "/x/data", "HOME": "/h/me"])
        == "root /x/data/group-containers")
    await #expect(
      try defaultRoot(root, ["XDG_DATA_HOME": "data", "HOME": "/h/me"])
        == "root /h/me/.local/share/group-containers")
    await #expect(try defaultRoot(root, ["GROUP_CONTAINER_ROOT": "g/root", "HOME": "/h/me"]).hasPrefix("error "))
  }
}
