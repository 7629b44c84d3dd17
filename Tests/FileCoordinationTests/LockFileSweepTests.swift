import Foundation
import Messaging
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Removing unused lock files (LockFileSweep.swift, Rule 3b), across real processes: the lock directory stays
/// small, and a lock is never taken on a removed file — the case where two writers would both hold "the" lock.
///
/// Mutants this suite catches (each broken on purpose once, seen failing, then restored):
/// - an acquirer trusting its descriptor without the check (`LockFileSweep.verify` returning `seen`):
///   `writersCountExactlyWhileTheirLockFileIsRemoved` loses increments;
/// - one bump, after the removal (no odd sequence): `aSweeperKilledInsideARemovalLeavesNoStaleLockTrusted` — the
///   write on the removed file runs while another process holds the new one;
/// - no sweep on creation (`noteCreated` never due): `theLockFilesOfProcessesGoneAreRemovedByTheNextOnesSweeps`;
/// - a sweep removing files a process has open (no `isOpenElsewhere` in `LockFileSweep.remove`):
///   `aSweepKeepsTheLockFilesAProcessHasOpen`;
/// - the sweep removing what it can flock, regular or not (no `.regular` check in `LockFileSweep.remove`): the
///   planted FIFO goes, `aSweepRemovesOnlyRegularLockFiles`;
/// - an acquirer that keeps waiting on a removed file (`LockFileSweep.isRemovedWhileWaiting` false):
///   `aStoppedSweeperHoldsBackNoAcquirerOfTheRemovedFile` times out;
/// - a sweep that does not ask whether a process of an older build lives (`olderBuildIsAlive` not called):
///   `noLockFileIsRemovedWhileAProcessOfAnOlderBuildLives` sees its files go;
/// - the mark without the counters' epoch (`LockFileSweep.mark` the sequence alone):
///   `aCountersFileThatLostItsValuesLeavesNoStaleLockTrusted` and
///   `aLockHeldWhileTheContainerIsRemovedIsNotTrustedAfter` — the write on the removed file runs beside the holder
///   of the new one.
@Suite(.runSlot(.minutes(3))) struct LockFileSweepTests {
  let group = "group.com.example.tests"

  static func lockFiles(_ container: GroupContainer) -> [String] {
    let directory = container.url.path + "/" + CoordinationPaths.locks
    return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
      LockOrder.isLockFileName($0)
    }
  }

  static func sequence(_ container: GroupContainer) throws -> UInt64 {
    try container.coordinationSpace().counters.load(CoordinationCounters.lockSweepSequence)
  }

  /// A container where another process holds the root's tree lock and y's item lock, so that x's item lock file,
  /// which this process made (with `coordinator`) and keeps open, is the only one a sweep can remove.
  func onlyXsLockFileRemovable() async throws -> (TestRoot, GroupContainer, URL, Child, FileCoordinator) {
    let root = try TestRoot()
    let container = try root.container(group)
    let x = container.url.appendingPathComponent("x")
    let holder = try Child(.hold(mode: .read, item: "y"), root: root.path, group: group)
    #expect(await holder.line { $0 == "locked" } != nil)
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: x) { _ in }
    return (root, container, x, holder, coordinator)
  }

  /// Another process makes x's lock file anew (it was removed under this process's descriptor) and holds it: this
  /// process's write of x must wait for it — fail within a short `lockTimeout` — and run once it is gone.
  /// `whileHeld` runs before it lets go.
  func expectANewHolderExcludes(
    _ x: URL, _ coordinator: FileCoordinator, in root: TestRoot, whileHeld: () async throws -> Void = {}
  ) async throws {
    let writer = try Child(.hold(mode: .write, item: x.lastPathComponent), root: root.path, group: group)
    #expect(await writer.line { $0 == "locked" } != nil)
    coordinator.lockTimeout = .milliseconds(300)
    #expect(throws: FileCoordinatorError.self, "a write on the removed lock file ran beside the holder's") {
      try coordinator.coordinate(writingItemAt: x) { _ in }
    }
    try await whileHeld()
    writer.kill()
    #expect(throws: Never.self) { try coordinator.coordinate(writingItemAt: x) { _ in } }
  }

  /// Three processes count to 1,500 under one item's lock, closing their idle lock files as they go, while this
  /// process removes every lock file nobody holds, again and again: each count must land.
  @Test func writersCountExactlyWhileTheirLockFileIsRemoved() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let item = "Documents/counter"
    let writers = try (0..<3).map { _ in
      try Child(.lockCounter(item: item, count: 500), root: root.path, group: group)
    }
    let stop = Atomic<Bool>(false)
    let removed = Atomic<Int>(0)
    let sweeper = Thread {
      while !stop.load(ordering: .relaxed) {
        // Open ones too: the writers that keep the file open are the ones that must notice its removal.
        removed.add(container.removeUnusedLockFiles(keepingOpen: false), ordering: .relaxed)
        usleep(200)
      }
    }
    sweeper.start()
    for writer in writers {
      #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    }
    stop.store(true, ordering: .relaxed)
    let count = try String(contentsOf: container.url.appendingPathComponent(item), encoding: .utf8)
    #expect(count == "1500", "increments were lost: two writers held the lock at once")
    // The race was run: the item's lock file was removed between writes (it is the only one the writers release).
    #expect(removed.load(ordering: .relaxed) > 10, "sweeps removed \(removed.load(ordering: .relaxed)) lock files")
    #expect(try Self.sequence(container) % 2 == 0)
  }

  /// Two processes each write 400 new items, with a sweep due every 64 lock files made, and exit; a third writes
  /// 100: its sweeps remove what the first two left, and the directory ends with its own files (kept open for its
  /// next accesses) and a few, not 900.
  @Test func theLockFilesOfProcessesGoneAreRemovedByTheNextOnesSweeps() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let churners = try ["a", "b"].map { prefix in
      try Child(.lockChurn(prefix: "Documents/\(prefix)", items: 400, threshold: 64), root: root.path, group: group)
    }
    for churner in churners {
      #expect(await churner.line { $0 == "done" } != nil)
      churner.kill()
    }
    let made = try container.coordinationSpace().counters.load(CoordinationCounters.lockFilesCreated)
    #expect(made >= 800, "lock files made: \(made)")
    let next = try Child(
      .lockChurn(prefix: "Documents/c", items: 100, threshold: 64), root: root.path, group: group)
    #expect(await next.line { $0 == "done" } != nil)
    // Its sweep runs in its background (it stays alive): within a hang's limit, its 100 files (open there), the
    // two tree locks and at most a few of the others' (a sweep may end before another's last file was made).
    let bounded = await eventually { Self.lockFiles(container).count <= 100 + 2 + 8 }
    #expect(bounded, "\(Self.lockFiles(container).count) lock files left of \(made) made")
    next.kill()
    // Nobody has anything open now: one sweep leaves nothing at all.
    _ = container.removeUnusedLockFiles()
    #expect(Self.lockFiles(container).isEmpty, "left: \(Self.lockFiles(container))")
  }

  /// A lock file another process keeps open for its next access stays (removing it would only make that process
  /// create it again); once that process is gone, a sweep removes it.
  @Test func aSweepKeepsTheLockFilesAProcessHasOpen() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let user = try Child(
      .lockChurn(prefix: "Documents/kept", items: 1, threshold: 1_000_000), root: root.path, group: group)
    #expect(await user.line { $0 == "done" } != nil)
    let files = Set(Self.lockFiles(container))
    #expect(files.count == 3, "\(files)")  // the root's and Documents' tree locks, the item's lock
    // Its tree locks may still be cached (held); the item's lock is not held, but the file is open there.
    #expect(container.removeUnusedLockFiles() == 0)
    #expect(Set(Self.lockFiles(container)) == files)
    user.kill()
    #expect(container.removeUnusedLockFiles() == 3)
    #expect(Self.lockFiles(container).isEmpty)
  }

  /// What is not a lock file of ours is left alone, and never blocks a sweep: a FIFO, a symlink (to a lock file
  /// elsewhere) and a directory under lock-file names, a file under another name.
  @Test func aSweepRemovesOnlyRegularLockFiles() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try FileCoordinator().coordinate(writingItemAt: container.documentsURL.appendingPathComponent("a")) { _ in }
    let locks = container.url.path + "/" + CoordinationPaths.locks
    let hex = { (digit: Character) in String(repeating: digit, count: 32) }
    #expect(mkfifo(locks + "/" + hex("a"), 0o600) == 0)
    let outside = root.path + "/outside"
    #expect(FileManager.default.createFile(atPath: outside, contents: Data("tree .\n".utf8)))
    try FileManager.default.createSymbolicLink(atPath: locks + "/" + hex("b"), withDestinationPath: outside)
    try FileManager.default.createDirectory(atPath: locks + "/" + hex("c"), withIntermediateDirectories: false)
    #expect(FileManager.default.createFile(atPath: locks + "/notes", contents: Data("x".utf8)))
    let planted = [hex("a"), hex("b"), hex("c"), "notes"]
    let ours = Set(Self.lockFiles(container)).subtracting(planted)
    #expect(ours.count >= 1)
    // Once the cached tree locks are dropped (the linger), every lock file of ours is unused.
    let removedAll = await eventually {
      _ = container.removeUnusedLockFiles(keepingOpen: false)  // this process keeps its own open
      return Set(Self.lockFiles(container)).intersection(ours).isEmpty
    }
    #expect(removedAll, "left: \(Self.lockFiles(container))")
    let left = try FileManager.default.contentsOfDirectory(atPath: locks)
    #expect(Set(left) == Set(planted))
    #expect(FileManager.default.fileExists(atPath: outside))
  }

  /// A sweeper stopped right after removing a lock file still holds the removed file's lock (it unlocks after its
  /// second bump). A process that kept that file open must not wait for it: the name now leads to a new file.
  @Test func aStoppedSweeperHoldsBackNoAcquirerOfTheRemovedFile() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let x = container.url.appendingPathComponent("x")
    // The root's tree lock and y's item lock are held: x's item lock is the only file the sweeper can remove.
    let holder = try Child(.hold(mode: .read, item: "y"), root: root.path, group: group)
    defer { holder.kill() }
    #expect(await holder.line { $0 == "locked" } != nil)
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: x) { _ in }  // x's lock file, kept open here
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let sweeper = try Child(
      .lockSweep, root: root.path, group: group,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "locks.sweepRemoved", "GROUPCONTAINER_PAUSE_DIR": pauses])
    defer { sweeper.kill() }
    let pause = pauses + "/locks.sweepRemoved"
    #expect(await eventually { FileManager.default.fileExists(atPath: pause) }, "the sweeper never removed x's file")
    #expect(try Self.sequence(container) % 2 == 1, "the removal is under way")
    // A hang's limit, not a timing: without the check this waits for the stopped sweeper until it runs out.
    coordinator.lockTimeout = .seconds(20)
    #expect(throws: Never.self, "the write waited for the stopped sweeper's lock on the removed file") {
      try coordinator.coordinate(writingItemAt: x) { _ in }
    }
    #expect(FileManager.default.fileExists(atPath: pause), "the sweeper ran on before the write")
    try FileManager.default.removeItem(atPath: pause)
    #expect(await sweeper.line { $0.hasPrefix("swept") } == "swept 1")
    #expect(await sweeper.exit() == 0, "stderr: \(sweeper.errors.text)")
    #expect(try Self.sequence(container) % 2 == 0)
  }

  /// A process of a build from before lock files were removed takes flocks without reading the sweep sequence; its
  /// liveness lock is empty (Liveness.swift). While one lives, a sweep in another process removes nothing; once it
  /// is gone, the next sweep does. A process of this build marks its own liveness lock.
  @Test func noLockFileIsRemovedWhileAProcessOfAnOlderBuildLives() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let coordinator = FileCoordinator()
    for name in ["a", "b"] {
      try coordinator.coordinate(writingItemAt: container.documentsURL.appendingPathComponent(name)) { _ in }
    }
    FileCoordinator.closeIdleLockFiles()
    let files = Set(Self.lockFiles(container))
    #expect(files.count >= 4, "\(files)")  // the tree locks and the two items' (unheld, closed here)
    let processes = container.url.path + "/" + CoordinationPaths.processes
    let me = try container.coordinationSpace().messaging.me
    #expect(FileManager.default.contents(atPath: "\(processes)/\(me).lock") == Data(MessagingSpace.livenessMarker))
    // The older build's process as it publishes itself: an empty file under its name, held LOCK_SH (a pid above any
    // pid_max, so no process of this machine).
    let older = try SystemFD.open("\(processes)/4000000.77.lock", [.readWrite, .create], mode: 0o600)
    try older.lock(.shared)
    let blocked = try Child(.lockSweep, root: root.path, group: group)
    #expect(await blocked.line { $0.hasPrefix("swept") } == "swept 0")
    #expect(await blocked.exit() == 0, "stderr: \(blocked.errors.text)")
    #expect(Set(Self.lockFiles(container)) == files, "a lock file went while the older build's process lived")
    older.close()  // it exits
    let sweeper = try Child(.lockSweep, root: root.path, group: group)
    let swept = await sweeper.line { $0.hasPrefix("swept") }
    #expect((swept.flatMap { Int($0.dropFirst(6)) } ?? 0) >= 2, "\(swept ?? "no line"): the items' files stayed")
    #expect(await sweeper.exit() == 0, "stderr: \(sweeper.errors.text)")
  }

  /// A sweeper killed between removing a lock file and its second bump leaves the sequence odd; a process that
  /// still has the removed file open must not trust a lock on it, while another holds the new file of that name.
  @Test func aSweeperKilledInsideARemovalLeavesNoStaleLockTrusted() async throws {
    let (root, container, x, holder, coordinator) = try await onlyXsLockFileRemovable()
    #expect(Self.lockFiles(container).count == 3)
    let before = try Self.sequence(container)
    #expect(before % 2 == 0)
    let sweeper = try Child(
      .lockSweep, root: root.path, group: group, environment: ["GROUPCONTAINER_FAULT_POINT": "locks.sweepRemoved"])
    #expect(await sweeper.exit() != 0, "the sweeper lived: \(sweeper.output)")
    #expect(Self.lockFiles(container).count == 2, "x's lock file was not the one removed")
    #expect(try Self.sequence(container) == before + 1, "the sequence is odd while the dead sweeper's removal is")
    // Another process makes x's lock file anew and holds it (its opening also starts the repair sweep).
    try await expectANewHolderExcludes(x, coordinator, in: root) {
      // The repair made the sequence even again (a sweep started by the writer's opening).
      #expect(await eventually { (try? Self.sequence(container)).map { $0 % 2 == 0 } ?? false })
    }
    holder.kill()
  }

  /// The counters file truncated (a hostile or careless group member) and sized again by the next process: the
  /// sequence starts over from zero and comes back to the value this process checked its descriptor at, while that
  /// descriptor's file was removed in between. The counters' new epoch is what tells them apart.
  @Test func aCountersFileThatLostItsValuesLeavesNoStaleLockTrusted() async throws {
    let (root, container, x, holder, coordinator) = try await onlyXsLockFileRemovable()
    #expect(try Self.sequence(container) == 0)  // x's descriptor was checked at 0
    let sweeper = try Child(.lockSweep, root: root.path, group: group)
    #expect(await sweeper.line { $0 == "swept 1" } != nil, "x's lock file was not removed: \(sweeper.output)")
    #expect(await sweeper.exit() == 0)
    #expect(try Self.sequence(container) == 2)
    // Truncated: the next process to open the container gives it its size back — zeros, the sequence 0 again.
    let counters = container.url.path + "/" + CoordinationPaths.counters
    #expect(truncate(counters, 0) == 0)
    // That process makes x's lock file anew and holds it.
    try await expectANewHolderExcludes(x, coordinator, in: root) { () async throws in
      #expect(try Self.sequence(container) == 0, "the sequence did not start over")
    }
    holder.kill()
  }

  /// The container removed (`rm -rf`) and made again while this process holds x's lock: its descriptor of the
  /// removed file is kept once the access ends, and the new counters file's sequence starts where the old one was
  /// when that descriptor was checked. Another process's lock of x's new file must still exclude this process.
  @Test func aLockHeldWhileTheContainerIsRemovedIsNotTrustedAfter() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let x = container.url.appendingPathComponent("x")
    let coordinator = FileCoordinator()
    final class Gate: Sendable { let state = Mutex((inside: false, leave: false, done: false)) }
    let gate = Gate()
    let thread = Thread {
      try? coordinator.coordinate(writingItemAt: x) { _ in
        gate.state.withLock { $0.inside = true }
        while !gate.state.withLock({ $0.leave }) { usleep(1000) }
      }
      gate.state.withLock { $0.done = true }
    }
    thread.start()
    #expect(await eventually { gate.state.withLock { $0.inside } }, "the access never began")
    #expect(try await runToEnd("/bin/rm", ["-rf", container.path]).status == 0)
    // This process makes its layout again, the counters and lock directory anew, then publishes its liveness lock.
    let processes = container.url.path + "/" + CoordinationPaths.processes
    #expect(await entryAppears(in: processes, prefix: "\(getpid())."), "this process did not recover from the removal")
    #expect(try Self.sequence(container) == 0)
    gate.state.withLock { $0.leave = true }  // the access ends: the removed file's descriptor stays, idle
    #expect(await eventually { gate.state.withLock { $0.done } }, "the access never ended")
    // Another process makes x's lock file anew and holds it.
    try await expectANewHolderExcludes(x, coordinator, in: root)
  }
}
