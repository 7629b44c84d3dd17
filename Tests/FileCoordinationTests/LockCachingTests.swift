import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Cached shared tree locks and their revocation (LockOrder.swift, Rule 4a), across real processes: a process
/// keeps the SH tree locks of the directories above its last access; whoever needs one of them EX (a delete, move
/// or replace of the directory) gets it all the same, and what a stopped process can block is what the docs say.
///
/// The helper children run with a 10-minute linger where the test is about revocation, so only the revocation
/// can free their cached locks within the test; the deleting side has a lock timeout, so a lock that is never
/// given back fails the test with `lockTimedOut` instead of hanging it.
///
/// Mutants this suite catches (each broken on purpose once, seen failing by assertion, then restored):
/// - a cached lock used without checking the generation (`LockTable.acquire` trusting any cached entry):
///   `aCachedLockIsNotTrustedOnceTheGenerationChanged`;
/// - the revocation ignored (the sweeper drops only lingered-out locks, not those of an older generation):
///   `anIdleProcessWithCachedLocksDoesNotBlockADeleteOfTheDirectory`, `aStoppedProcessBlocksTreeWritesOnlyWhileItsLocksAreCached`;
/// - a cached lock kept after revocation (`LockTable.release` caching without `mayCache`):
///   `anAccessInFlightStillExcludesADeleteOfItsDirectory`;
/// - the sweeper dropping locks an access is using (`entry.osMode != nil` instead of `entry.isCached`): the
///   delete runs inside the child's access, `anAccessInFlightStillExcludesADeleteOfItsDirectory`;
/// - the sweeper exiting when the locks it would keep are in use, not cached (no `cacheableInUse` in
///   `LockTable.sweep`): a thread started for every few writes, `backToBackWritesKeepOneSweeper`.
@Suite(.runSlot(.minutes(3))) struct LockCachingTests {
  let group = "group.com.example.tests"
  static let longLinger: UInt64 = 600_000

  /// Deletes `Documents` with a coordinated `.forDeleting` write, bounded by `lockTimeout`; returns when its
  /// accessor began (monotonic ns), or the error.
  static func deleteDocuments(
    _ container: GroupContainer, lockTimeout: Duration
  ) async -> Result<UInt64, FileCoordinatorError>? {
    await expectCompletes("a coordinated delete of Documents") { () -> Result<UInt64, FileCoordinatorError> in
      let coordinator = FileCoordinator()
      coordinator.lockTimeout = lockTimeout
      do {
        let began = try coordinator.coordinate(writingItemAt: container.documentsURL, options: .forDeleting) {
          url -> UInt64 in
          let began = monotonicNow()
          try FileManager.default.removeItem(at: url)
          return began
        }
        return .success(began)
      } catch let error as FileCoordinatorError {
        return .failure(error)
      }
    }
  }

  /// Sends SIGSTOP and waits until every thread of `pid` is stopped: the group stop spreads thread by thread, and
  /// a sweeper woken by the revocation before it stops would give the locks back.
  static func stop(_ pid: Int32) async {
    kill(pid, SIGSTOP)
    let deadline = Date().addingTimeInterval(Wait.condition)
    while Date() < deadline {
      let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
      let stopped = tasks.allSatisfy { task in
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")")
        else { return false }
        return stat[stat.index(close, offsetBy: 2)] == "T"
      }
      if !tasks.isEmpty && stopped { return }
      try? await Task.sleep(for: .seconds(0.002))
    }
    Issue.record("process \(pid) did not stop")
  }

  /// The directories a helper line says it keeps cached ("… cached=.,Documents").
  static func cached(_ line: String?) -> [String]? {
    guard let field = line?.split(separator: " ").last, field.hasPrefix("cached=") else { return nil }
    return field.dropFirst(7).split(separator: ",").map(String.init)
  }

  /// Writes one after another keep their tree locks cached between them, and one sweeper watches them: it must not
  /// exit when it finds them in use by the next write (it did: in release builds a thread was started for every
  /// 2.4 writes on tmpfs). Each write here holds its locks for 4 ms, so whenever the sweeper looks (at least every
  /// linger, 100 ms), it almost surely finds them in use: for 1.2 s of writes, one sweeper, not one per look.
  @Test func backToBackWritesKeepOneSweeper() throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let space = try container.coordinationSpace()
    let url = container.documentsURL.appendingPathComponent("w.txt")
    let coordinator = FileCoordinator()
    let before = space.locks.sweepersStarted.load(ordering: .relaxed)
    let start = Date()
    var index = 0
    while Date().timeIntervalSince(start) < 1.2 {
      try coordinator.coordinate(writingItemAt: url) { url in
        try container.write(Data("\(index)".utf8), to: url)
        Thread.sleep(forTimeInterval: 0.004)
      }
      index += 1
    }
    let started = space.locks.sweepersStarted.load(ordering: .relaxed) - before
    #expect(started >= 1, "the writes cached no lock: this test proves nothing")
    #expect(started <= 2, "\(started) sweeper threads for \(index) writes")
  }

  @Test func anIdleProcessWithCachedLocksDoesNotBlockADeleteOfTheDirectory() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let idle = try Child(.cacheIdle(item: "Documents/a.txt", lingerMS: Self.longLinger), root: root.path, group: group)
    defer { idle.kill() }
    let accessed = await idle.line { $0.hasPrefix("accessed") }
    // The root's and Documents' tree locks: otherwise this test proves nothing.
    #expect(Self.cached(accessed) == [".", "Documents"], "the child should keep two tree locks cached")
    let outcome = await Self.deleteDocuments(container, lockTimeout: .seconds(20))
    guard case .success? = outcome else {
      Issue.record("the delete should get its lock from an idle process: \(String(describing: outcome))")
      return
    }
    #expect(!FileManager.default.fileExists(atPath: container.documentsURL.path))
    // Documents' lock dropped by the revocation (the child's linger is ten minutes); the root's, which the delete
    // takes shared, stays.
    #expect(await idle.line() { $0 == "cached=." } != nil)
  }

  @Test func anAccessInFlightStillExcludesADeleteOfItsDirectory() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let space = try container.coordinationSpace()
    let go = root.path + "/go"
    let holder = try Child(
      .cacheHold(item: "Documents/b.txt", lingerMS: Self.longLinger, goFile: go), root: root.path, group: group)
    defer { holder.kill() }
    guard await holder.line({ $0 == "locked" }) != nil else { return }
    let before = space.counters.load(LockRevocation.wakeCounter)
    let delete = Mutex<Result<UInt64, FileCoordinatorError>??>(nil)
    Task {
      let outcome = await Self.deleteDocuments(container, lockTimeout: .seconds(20))
      delete.withLock { $0 = outcome }
    }
    // The delete found the lock taken and revoked (the wake word moved): it now waits for the access.
    #expect(await eventually { space.counters.load(LockRevocation.wakeCounter) != before }, "the delete never revoked")
    #expect(delete.withLock { $0 == nil }, "the delete ran while an access below Documents was in flight")
    #expect(FileManager.default.createFile(atPath: go, contents: nil))
    let released = await holder.line() { $0.hasPrefix("released") }
    // Released during the revocation: Documents' lock may not stay cached (the child's linger is ten minutes).
    #expect(Self.cached(released)?.contains("Documents") == false, "kept during a revocation: \(released ?? "-")")
    let waitUntil = Date().addingTimeInterval(Wait.condition)
    while delete.withLock({ $0 }) == nil && Date() < waitUntil { try? await Task.sleep(for: .seconds(0.005)) }
    guard case .success(let began)?? = delete.withLock({ $0 }) else {
      Issue.record("the delete should run once the access ended: \(String(describing: delete.withLock { $0 }))")
      return
    }
    let releasedAt = released?.split(separator: " ").dropFirst().first.flatMap { UInt64($0) } ?? .max
    #expect(began > releasedAt, "the delete's accessor began before the access below Documents ended")
  }

  @Test func aHolderKilledWithSIGKILLBlocksNoOne() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let idle = try Child(.cacheIdle(item: "Documents/c.txt", lingerMS: Self.longLinger), root: root.path, group: group)
    let accessed = await idle.line { $0.hasPrefix("accessed") }
    #expect(Self.cached(accessed) == [".", "Documents"])
    idle.kill(SIGKILL)
    let outcome = await Self.deleteDocuments(container, lockTimeout: .seconds(20))
    guard case .success? = outcome else {
      Issue.record("a dead process's cached locks must block no one: \(String(describing: outcome))")
      return
    }
  }

  /// What CoordinationSemantics documents: a process stopped (SIGSTOP) while it keeps cached locks — within the
  /// linger after its last access — blocks delete/move/replace of the directories above that access until it
  /// runs again (with a lock timeout: fails naming it); stopped after the linger, it blocks nothing.
  @Test func aStoppedProcessBlocksTreeWritesOnlyWhileItsLocksAreCached() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    // Stopped with its locks cached: the delete times out, naming it; resumed, it gives them back.
    let cached = try Child(
      .cacheIdle(item: "Documents/d.txt", lingerMS: Self.longLinger), root: root.path, group: group)
    defer { cached.kill() }
    #expect(Self.cached(await cached.line { $0.hasPrefix("accessed") }) == [".", "Documents"])
    await Self.stop(cached.pid)
    let blocked = await Self.deleteDocuments(container, lockTimeout: .milliseconds(500))
    if case .failure(let error)? = blocked, error.code == .lockTimedOut {
      #expect(error.processID == cached.pid, "the error should name the stopped process")
    } else {
      let stderr: String = cached.errors.text
      let outcome = String(describing: blocked)
      let said = "it said \(cached.output), \(stderr)"
      Issue.record("a stopped process with cached locks should block the delete: \(outcome); \(said)")
    }
    kill(cached.pid, SIGCONT)
    #expect(await cached.line() { $0 == "cached=." } != nil, "resumed, it should drop Documents' lock")
    guard case .success? = await Self.deleteDocuments(container, lockTimeout: .seconds(20)) else {
      Issue.record("the delete should succeed once the process ran again")
      return
    }
    // Stopped after the linger (the default 100 ms) dropped its locks: it blocks nothing.
    try FileManager.default.createDirectory(at: container.documentsURL, withIntermediateDirectories: true)
    let lingered = try Child(.cacheIdle(item: "Documents/e.txt", lingerMS: 100), root: root.path, group: group)
    defer { lingered.kill() }
    guard await lingered.line({ $0 == "dropped" }) != nil else { return }
    await Self.stop(lingered.pid)
    defer { kill(lingered.pid, SIGCONT) }
    let outcome = await Self.deleteDocuments(container, lockTimeout: .seconds(20))
    guard case .success? = outcome else {
      Issue.record("a process stopped after its linger must block nothing: \(String(describing: outcome))")
      return
    }
  }

  /// In one process (real flocks): a cached lock is used again only while the generation it was taken at is
  /// current. The generations of both cached locks' buckets are bumped without waking the sweeper (it sleeps out
  /// its linger), so only the access's own check stands between a stale lock and its reuse.
  @Test func aCachedLockIsNotTrustedOnceTheGenerationChanged() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let space = try container.coordinationSpace()
    let url = container.documentsURL.appendingPathComponent("f.txt")
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: url) { _ in }
    let hits = space.locks.cacheHits
    try coordinator.coordinate(writingItemAt: url) { _ in }
    #expect(space.locks.cacheHits == hits + 2, "the second access should reuse both cached tree locks")
    try? await Task.sleep(for: .seconds(0.01))  // let the sweeper go to sleep on the generation it saw
    for path in [ContainerPath.root, try ContainerPath("Documents")] {
      let bucket = LockRevocation.bucket(of: LockOrder.Key(path: path, kind: .tree))
      space.counters.atomic(LockRevocation.generationBase + bucket).wrappingIncrement(ordering: .sequentiallyConsistent)
    }
    try coordinator.coordinate(writingItemAt: url) { _ in }
    #expect(space.locks.cacheHits == hits + 2, "a cached lock was trusted after the generation changed")
  }

  /// Every process, of every version, must name the same generation word for a lock: the bucket is FNV-1a-32 over
  /// each component's UTF-8 bytes followed by "/", modulo the word count. Pinned against that definition.
  @Test func aLocksBucketIsFNVOverItsComponentsEachFollowedByASlash() throws {
    for text in ["", "Documents", "Documents/p.txt", "Library/Caches/é ü/x"] {
      let path = text.isEmpty ? ContainerPath.root : try ContainerPath(text)
      var bytes: [UInt8] = []
      for component in path.components { bytes += Array(component.utf8) + [UInt8(0x2F)] }
      let expected = Int(StableHash.fnv1a32(bytes) % UInt32(LockRevocation.buckets))
      #expect(LockRevocation.bucket(of: LockOrder.Key(path: path, kind: .tree)) == expected, "\(text)")
    }
  }
}
