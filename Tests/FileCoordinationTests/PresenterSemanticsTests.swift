import Foundation
import Synchronization
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Apple's presenter semantics across real processes: every relinquish gets its reacquirer (also when the
/// presenter answers after the coordinator stopped waiting), and accesses whose accessor never ran tell nobody
/// that the item changed.
///
/// Mutants this suite catches:
/// - a late reacquirer is dropped (PresenterHost `keep` ignores an answer whose finish already came);
/// - a finish of an access that never ran carries `didChange` (CoordinatedAccess `finish` ignores `accessorRan`);
/// - a process without an inotify instance cannot coordinate (CoordinationSpace.open throws the watcher's start
///   error again), or its presenter error loses the limit's name: `coordinationWorksWithoutInotifyOnlyPresentersNeedIt`;
/// - nothing re-armed after `rm -rf` of the container (`PresenterHost.containerRemoved` does nothing):
///   `presentersHearCoordinatedWritesAgainAfterTheContainerWasRemoved`;
/// - the lock timeout ignored (`CoordinatedAccess.lock` never expires): `aLockTimeoutFailsAnAccessBehindAStoppedHolder`
///   (the access is abandoned after 20 s and the test fails, instead of waiting forever).
@Suite(.runSlot(.minutes(3))) struct PresenterSemanticsTests {
  let group = "group.com.example.tests"

  /// The event names a `present` helper printed, in order ("ready" left out).
  static func events(_ child: Child) -> [String] {
    child.output.compactMap { $0.split(separator: " ").first.map(String.init) }.filter { $0 != "ready" }
  }

  static func count(_ event: String, _ child: Child) -> Int { events(child).filter { $0 == event }.count }

  /// Waits until `child` printed `event` at least `n` times; fails the test after 20 s and returns false (callers
  /// stop there, so a broken invariant fails the test well within its time limit).
  @discardableResult
  static func waitFor(
    _ event: String, _ n: Int, _ child: Child, sourceLocation: SourceLocation = #_sourceLocation
  ) async -> Bool {
    let deadline = Date().addingTimeInterval(Wait.condition)
    while count(event, child) < n && Date() < deadline && child.process.isRunning {
      try? await Task.sleep(for: .seconds(0.01))
    }
    let seen = count(event, child) >= n
    #expect(seen, "waited for \(n) × \(event), got \(child.output)", sourceLocation: sourceLocation)
    return seen
  }

  func presenter(_ root: TestRoot, _ path: String, delay: Double = 0) async throws -> Child {
    let child = try Child(.present(item: path, answerDelay: delay), root: root.path, group: group)
    await child.line { $0.hasPrefix("ready") }
    return child
  }

  // MARK: Item 4: late answers

  @Test func aPresenterThatAnswersAfterTheTimeoutStillGetsItsReacquirer() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("late.txt")
    try container.write(Data("v0".utf8), to: url)
    // Relinquishes for 1.5 s; the coordinator waits 0.2 s and goes on without it.
    let child = try await presenter(root, "Documents/late.txt", delay: 1.5)
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .milliseconds(200)
    for i in 1...2 {
      try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v\(i)".utf8), to: $0) }
    }
    guard await Self.waitFor("reacquire", 2, child) else { return }
    #expect(Self.count("relinquishToWriter", child) == 2)
    #expect(Self.count("reacquire", child) == 2, "\(child.output)")
    child.kill()
  }

  @Test func aStoppedPresenterGetsEveryReacquirerWhenItResumes() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("stopped.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/stopped.txt")
    kill(child.pid, SIGSTOP)
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .milliseconds(200)
    for i in 1...3 {
      try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v\(i)".utf8), to: $0) }
    }
    kill(child.pid, SIGCONT)
    guard await Self.waitFor("reacquire", 3, child) else { return }
    #expect(Self.count("relinquishToWriter", child) == 3)
    #expect(Self.count("reacquire", child) == 3, "\(child.output)")
    child.kill()
  }

  // MARK: Item 5: no "after" callbacks for accesses that never ran

  /// After an access that failed, a successful write of the same item: its didChange must be the only one, and
  /// it must come after that write's relinquish (finishes reach a presenter in order, so a didChange of the
  /// failed access would come first).
  func expectOnlyTheSentinelChanged(_ child: Child, url: URL, container: GroupContainer) async throws {
    guard await Self.waitFor("reacquire", 1, child) else { return }
    let relinquishesBefore = Self.count("relinquishToWriter", child)
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("sentinel".utf8), to: $0) }
    guard await Self.waitFor("didChange", 1, child), await Self.waitFor("reacquire", 2, child) else { return }
    let events = Self.events(child)
    let relinquishes = events.indices.filter { events[$0] == "relinquishToWriter" }
    let sentinelStart = relinquishes.count > relinquishesBefore ? relinquishes[relinquishesBefore] : nil
    #expect(sentinelStart != nil, "\(events)")
    let beforeSentinel = events[..<(sentinelStart ?? events.endIndex)]
    #expect(!beforeSentinel.contains("didChange"), "the failed access told the presenter its item changed: \(events)")
    #expect(events.filter { $0 == "didChange" }.count == 1, "\(events)")
  }

  @Test func aRefusedSaveOnAMergingWriteChangesNothing() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("failsave.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/failsave.txt")
    // The refusal must be heard: with the default 5 s a presenter slowed by load (`make test-under-load`) was
    // skipped by the timeout policy and the accessor ran. A limit for a hang, not for slowness.
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .seconds(60)
    #expect(throws: FileCoordinatorError.self) {
      try coordinator.coordinate(writingItemAt: url, options: .forMerging) { _ in
        Issue.record("accessor ran after a refused save")
      }
    }
    try await expectOnlyTheSentinelChanged(child, url: url, container: container)
    child.kill()
  }

  @Test func anAccessFailedByTheTimeoutPolicyChangesNothing() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("strict.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/strict.txt", delay: 1)
    let strict = FileCoordinator()
    strict.presenterTimeout = .milliseconds(200)
    strict.presenterTimeoutPolicy = .fail
    #expect(throws: FileCoordinatorError.self) {
      try strict.coordinate(writingItemAt: url) { _ in Issue.record("accessor ran after a timeout under .fail") }
    }
    try await expectOnlyTheSentinelChanged(child, url: url, container: container)
    child.kill()
  }

  /// Runs a write of `url` on another thread, cancels it once `cancelWhen` says so (then again until it ends), and
  /// returns what it threw.
  func cancelledWrite(_ url: URL, timeout: Duration = .seconds(30), cancelWhen: () async -> Void) async -> (any Error)?
  {
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = timeout
    let result = Mutex<(any Error)??>(nil)
    let thread = Thread {
      do {
        _ = try coordinator.coordinate(writingItemAt: url) { _ in Issue.record("accessor ran after cancel") }
        result.withLock { $0 = .some(nil) }
      } catch { result.withLock { $0 = .some(error) } }
    }
    thread.start()
    await cancelWhen()
    let deadline = Date().addingTimeInterval(Wait.condition)
    while result.withLock({ $0 == nil }) && Date() < deadline {
      coordinator.cancel()
      try? await Task.sleep(for: .seconds(0.01))
    }
    return result.withLock { $0 } ?? nil
  }

  @Test func anAccessCancelledWhileWaitingForAPresenterChangesNothing() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("cancel1.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/cancel1.txt", delay: 1)
    let error = await cancelledWrite(url) { await child.line { $0.hasPrefix("relinquishToWriter") } }
    guard (error as? FileCoordinatorError)?.code == .cancelled else {
      Issue.record("expected cancelled, got \(String(describing: error))")
      return
    }
    try await expectOnlyTheSentinelChanged(child, url: url, container: container)
    child.kill()
  }

  @Test func anAccessCancelledWhileWaitingForTheLockChangesNothing() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("cancel2.txt")
    try container.write(Data("v0".utf8), to: url)
    // The holder takes its lock before the presenter exists, so it never messages it.
    let holder = try Child(.hold(mode: .write, item: "Documents/cancel2.txt"), root: root.path, group: group)
    await holder.line { $0 == "locked" }
    let child = try await presenter(root, "Documents/cancel2.txt")
    let error = await cancelledWrite(url) {
      await child.line { $0.hasPrefix("relinquishToWriter") }
      // Most likely waiting for the lock by now (either wait is a valid case).
      try? await Task.sleep(for: .seconds(0.2))
    }
    guard (error as? FileCoordinatorError)?.code == .cancelled else {
      Issue.record("expected cancelled, got \(String(describing: error))")
      return
    }
    holder.kill()
    try await expectOnlyTheSentinelChanged(child, url: url, container: container)
    child.kill()
  }

  // MARK: Item 9: no inotify instance

  @Test func coordinationWorksWithoutInotifyOnlyPresentersNeedIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("count.txt")
    try container.write(Data("0".utf8), to: url)
    let presenter = try await presenter(root, "Documents/count.txt")
    // Two processes with no inotify instance increment one counter: exclusion, messages and acks without inotify.
    let env = ["GROUP_CONTAINER_SIMULATE_NO_INOTIFY": "1"]
    let writers = try (0..<2).map { _ in
      try Child(.noInotify(item: "Documents/count.txt", count: 20), root: root.path, group: group, environment: env)
    }
    for writer in writers {
      #expect(await writer.exit() == 0, "\(writer.output) \(writer.errors.text)")
      #expect(writer.output.contains("incremented 20"))
      let refusal = writer.output.first { $0.hasPrefix("presenter-") } ?? "none"
      #expect(refusal.hasPrefix("presenter-error"), "\(refusal)")
      #expect(refusal.contains("fs.inotify.max_user_instances") && refusal.contains("sysctl"), "\(refusal)")
    }
    #expect(try container.contents(of: url) == Data("40".utf8))
    // The presenter in a process that has inotify heard every one of those writes.
    #expect(await Self.waitFor("didChange", 40, presenter))
    #expect(Self.count("relinquishToWriter", presenter) == 40)
    presenter.kill()
  }

  // MARK: Item 8: the container removed under running presenters

  /// `rm -rf` of the whole container, as a user would.
  func removeWithRM(_ container: GroupContainer) async throws {
    #expect(try await runToEnd("/bin/rm", ["-rf", container.path]).status == 0)
  }

  @Test func presentersHearCoordinatedWritesAgainAfterTheContainerWasRemoved() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("kept.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/kept.txt")
    try await removeWithRM(container)
    // The presenter's process re-registers it once the removal is over (in the bucket of its item).
    let presenters = container.url.appendingPathComponent(
      ".coordination/presenters/" + PresenterRegistry.bucketName(try ContainerPath("Documents/kept.txt").bytesHash)
    ).path
    guard await entryAppears(in: presenters, prefix: "\(child.pid).") else {
      Issue.record("the presenter was not registered again after the container was removed")
      return
    }
    // A coordinated write of the recreated item from another process reaches it.
    let writer = try Child(
      .access(mode: .write, item: "Documents/kept.txt", count: 1, holdMS: 0, log: root.path + "/w.log"),
      root: root.path, group: group)
    #expect(await writer.exit() == 0, "\(writer.errors.text)")
    let fromWriter: @Sendable (String) -> Bool = { line in line.hasSuffix("coordinated \(writer.pid)") }
    #expect(await child.line { $0.hasPrefix("relinquishToWriter") && fromWriter($0) } != nil)
    #expect(await child.line { $0.hasPrefix("didChange") && fromWriter($0) } != nil)
    child.kill()
  }

  /// The process that lived through the removal keeps coordinating: its counters and ack board are mapped onto the
  /// new files, so it messages a presenter registered after the removal and gets its ack (under `.fail`, a lost ack
  /// fails the access). Mutant: no rebind of the mappings (`CoordinationSpace.recreateAfterRemoval`).
  @Test func aProcessThatLivedThroughTheRemovalMessagesPresentersRegisteredAfterIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("late.txt")
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("v0".utf8), to: $0) }
    try await removeWithRM(container)
    // This process publishes its liveness lock again once it has recreated what it needs.
    let processes = container.url.appendingPathComponent(".coordination/processes").path
    #expect(
      await entryAppears(in: processes, prefix: "\(getpid())."), "this process did not recover from the removal")
    let late = try await presenter(root, "Documents/late.txt")
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .seconds(20)
    coordinator.presenterTimeoutPolicy = .fail
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v1".utf8), to: $0) }
    #expect(await late.line { $0.hasPrefix("relinquishToWriter") } != nil, "the late presenter was not asked")
    late.kill()
  }

  /// A coordinator that accessed an item before the container was removed still excludes another process after,
  /// through the plan it remembers (with its lock table entries): the idle lock descriptors were on the deleted
  /// files, and a flock on a deleted file excludes no one. Mutant: the table's rebind keeping its idle descriptors —
  /// the accessor ran while the other process held the lock. (The remembered plan's check that its entries are still
  /// the table's is not what this catches: a dropped entry's descriptor is closed, so it opens the new file.)
  @Test func anAccessAfterTheContainerWasRemovedStillExcludesOtherProcesses() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("again.txt")
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v0".utf8), to: $0) }
    try await removeWithRM(container)
    let processes = container.url.appendingPathComponent(".coordination/processes").path
    #expect(
      await entryAppears(in: processes, prefix: "\(getpid())."), "this process did not recover from the removal")
    let holder = try Child(.hold(mode: .write, item: "Documents/again.txt"), root: root.path, group: group)
    defer { holder.kill() }
    #expect(await holder.line { $0 == "locked" } != nil, "the other process did not take the lock")
    coordinator.lockTimeout = .milliseconds(300)
    let outcome = await expectCompletes("an access to an item another process holds, after the removal") {
      () -> FileCoordinatorError? in
      do {
        try coordinator.coordinate(writingItemAt: url) { _ in
          Issue.record("accessor ran while another process held the lock")
        }
        return nil
      } catch let error as FileCoordinatorError {
        return error
      }
    }
    #expect((outcome ?? nil)?.code == .lockTimedOut, "expected lockTimedOut, got \(String(describing: outcome))")
  }

  // MARK: A bound on lock waits

  @Test func aLockTimeoutFailsAnAccessBehindAStoppedHolder() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("stuck.txt")
    let holder = try Child(.hold(mode: .write, item: "Documents/stuck.txt"), root: root.path, group: group)
    await holder.line { $0 == "locked" }
    kill(holder.pid, SIGSTOP)
    defer {
      kill(holder.pid, SIGCONT)
      holder.kill()
    }
    let coordinator = FileCoordinator()
    coordinator.lockTimeout = .milliseconds(300)
    let outcome = await expectCompletes("an access with a lock timeout behind a stopped holder") {
      () -> FileCoordinatorError? in
      do {
        _ = try coordinator.coordinate(writingItemAt: url) { _ in
          Issue.record("accessor ran while another held the lock")
        }
        return nil
      } catch let error as FileCoordinatorError {
        return error
      }
    }
    guard let error = outcome ?? nil, error.code == .lockTimedOut, let item = error.item, let pid = error.processID
    else {
      Issue.record("expected lockTimedOut, got \(String(describing: outcome))")
      return
    }
    #expect(item == "Documents/stuck.txt")
    #expect(pid == holder.pid, "the error should name the holder")
    #expect(outcome??.description.contains("process \(holder.pid) holds it") == true)
  }
}
