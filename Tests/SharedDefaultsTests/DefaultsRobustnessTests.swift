import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// The suite's lock and journal live in shared mappings: what happens when their owners die or their files are
/// damaged under them.
@Suite(.runSlot(.minutes(3))) struct DefaultsRobustnessTests {
  let group = "group.com.example.tests"

  @Test func aProcessKilledHoldingTheLockNeverBlocksOthers() async throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(suiteName: "held", container: try root.container(group))
    try defaults.set(1, forKey: "before")
    let holder = try Child(.defaultsHold(suite: "held"), root: root.path, group: group)
    await holder.line { $0 == "holding" }
    let write = BlockingWrite { try defaults.set(2, forKey: "after") }
    // While the holder lives, the write cannot go through. (No read here: it would wait for the pending write.)
    try? await Task.sleep(for: .seconds(0.3))
    #expect(!write.finished)
    holder.kill(SIGKILL)
    guard try write.wait() else { return }
    #expect(defaults.integer(forKey: "after") == 2)
    #expect(defaults.integer(forKey: "before") == 1)
  }

  /// The lock word names its owner by pid, which means nothing in another pid namespace: a process registered in
  /// the container (its liveness flock held) is trusted to be alive whatever `/proc` says here.
  @Test func anOwnerAliveByItsLivenessLockIsWaitedForEvenIfProcDoesNotKnowIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "ns", container: container)
    try defaults.set(1, forKey: "a")
    // A process "from another namespace": pid 4,000,000 (above any pid_max here), start time 77, registered alive.
    let (pid, start): (UInt32, UInt32) = (4_000_000, 77)
    let liveness = container.url.appendingPathComponent(".coordination/processes/\(pid).\(start).lock").path
    let held = try SystemFD.open(liveness, [.readWrite, .create], mode: 0o600)
    try held.lock(.shared)
    try setLockWord(UInt64(start) << 32 | UInt64(pid), suite: "ns", in: container)
    let write = BlockingWrite { try defaults.set(2, forKey: "b") }
    try? await Task.sleep(for: .seconds(0.3))
    #expect(!write.finished, "the lock was taken from an owner whose liveness lock is held")
    held.close()  // the owner "dies"
    guard try write.wait() else { return }
    #expect(defaults.integer(forKey: "b") == 2)
  }

  @Test func garbageInTheLockWordIsTakenOver() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "garbage", container: container)
    try defaults.set(1, forKey: "a")
    // An outside write makes the lock word name a process that does not exist.
    try setLockWord(0x7856_3412_3FFF_FFFE, suite: "garbage", in: container)
    let took = await expectCompletes("a write behind a lock word naming no process") {
      try defaults.set(2, forKey: "b")
      return true
    }
    guard took == true else { return }  // still blocked: touching the suite again would block this test too
    #expect(defaults.integer(forKey: "a") == 1 && defaults.integer(forKey: "b") == 2)
  }

  @Test func truncatingTheJournalUnderAnOpenSuiteLosesNothingAndNeverCrashes() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "cut", container: container)
    for i in 0..<200 { try defaults.set(i, forKey: "k\(i)") }
    let journal = container.preferencesURL.appendingPathComponent("cut.journal").path
    #expect(truncate(journal, 0) == 0)
    // The next write touches pages the file no longer has: a SIGBUS without the guard.
    try defaults.set(200, forKey: "k200")
    #expect((0...200).allSatisfy { defaults.integer(forKey: "k\($0)") == $0 })
    // Another instance (own mappings, as another process has) and the snapshot agree.
    let other = try await readInAnotherProcess(root.path, suite: "cut")
    #expect((0...200).filter { (other["k\($0)"] as? NSNumber)?.intValue != $0 } == [])
    try defaults.synchronize()
    let plist = try Array(Data(contentsOf: container.preferencesURL.appendingPathComponent("cut.plist")))
    #expect(try PropertyListValue(bytes: plist).dictionaryValue?.count == 201)
    let names = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(names.contains { $0.hasPrefix("cut.journal.corrupt-") }, "\(names)")
  }

  @Test func truncatingTheLockFileUnderAnOpenSuiteRecoversTheLastGoodState() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "cutlock", container: container)
    for i in 0..<50 { try defaults.set(i, forKey: "k\(i)") }
    #expect(truncate(container.preferencesURL.appendingPathComponent("cutlock.lock").path, 0) == 0)
    try defaults.set(50, forKey: "k50")
    #expect((0...50).allSatisfy { defaults.integer(forKey: "k\($0)") == $0 })
    let other = try await readInAnotherProcess(root.path, suite: "cutlock")
    #expect((0...50).filter { (other["k\($0)"] as? NSNumber)?.intValue != $0 } == [])
  }

  @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
  func aFullDiskIsAClearErrorAndLosesNothing() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "1m", name: "small") else { return }
    defer { withExtendedLifetime(mounted) {} }  // unmounted when released: not before the test ends
    let disk = mounted.path
    let container = try GroupContainer(identifier: group, root: URL(fileURLWithPath: disk))
    let defaults = try SharedDefaults(suiteName: "full", container: container)
    let value = Data(repeating: 9, count: 50_000)
    var stored = 0
    var failure: (any Error)?
    while failure == nil && stored < 100 {
      do {
        try defaults.set(value, forKey: "k\(stored)")
        stored += 1
      } catch {
        failure = error
      }
    }
    let message = "\(failure.map { "\($0)" } ?? "no error")"
    #expect(message.contains("No space left on device"), "\(message)")
    #expect(message.contains(disk), "the error names the file: \(message)")
    #expect(stored > 0)
    #expect((0..<stored).allSatisfy { defaults.data(forKey: "k\($0)") == value })
    // Another process's view is intact too.
    let other = try Child(.defaultsKeys(suite: "full"), root: disk, group: group)
    #expect(await other.exit() == 0)
    #expect(Set(other.output) == Set((0..<stored).map { "k\($0) \(value.count)" } + ["end"]), "\(other.output)")
  }

  /// A container on a read-only file system is read — the snapshot and the journal past it — by a process that
  /// opens it now (its files opened read-only and mapped privately, the lock-free path only), and a write is a
  /// clear error. Mutant: the store opening its header read-write only (every read failed with EROFS, as 0.2 did).
  @Test(.enabled(if: geteuid() == 0, "mounting a tmpfs needs root"))
  func aReadOnlyContainerIsReadAndWritesAreAClearError() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "16m", name: "ro") else { return }
    defer { withExtendedLifetime(mounted) {} }
    let disk = mounted.path
    // Written by processes that have exited (a file open for writing would keep the remount from happening).
    for step in [["write", group, "a", "1"], ["sync", group], ["write", group, "b", "2"]] {
      let done = try await groupctl(["defaults"] + step + ["--suite", "s", "--root", disk])
      #expect(done.status == 0, "\(done)")
    }
    #expect(try runTool("/bin/mount", ["-o", "remount,ro", disk]) == 0)
    for (key, value) in [("a", "1"), ("b", "2")] {
      let read = try await groupctl(["defaults", "read", group, key, "--suite", "s", "--root", disk])
      #expect(read.status == 0 && read.out == value + "\n", "\(read)")
    }
    let write = try await groupctl(["defaults", "write", group, "c", "3", "--suite", "s", "--root", disk])
    #expect(write.status == 1 && write.err.contains("Read-only file system"), "\(write)")
  }

  /// A length or offset word of the header that no process of the suite stores (2^64 − 16, written by anyone who can
  /// write the container) is damage a fresh process survives: it reads the suite or fails with an error, and a write
  /// goes on. Found looking for the container's parsers no fuzz harness reached (issue #36): `Int(_:)` on the
  /// committed length trapped in every process that opened the suite. Mutant: `SuiteHeader.length` as `Int(load(_:))`.
  @Test func aLengthWordNoProcessStoredIsDamageNotATrap() async throws {
    typealias Slot = SuiteHeader.Slot
    for slot in [
      Slot.committed, Slot.journalCapacity, Slot.snapshotSize, Slot.compactionInput, Slot.rewindFrom, Slot.rewindTo,
      Slot.exportSize, Slot.judgedSize,
    ] {
      let root = try TestRoot()
      let container = try root.container(group)
      do {
        let defaults = try SharedDefaults(suiteName: "words", container: container)
        try defaults.set(1, forKey: "a")
      }
      let header = try FileHandle(forUpdating: container.preferencesURL.appendingPathComponent("words.lock"))
      try header.seek(toOffset: UInt64(8 * slot))
      try header.write(contentsOf: withUnsafeBytes(of: UInt64(0xFFFF_FFFF_FFFF_FFF0).littleEndian) { Data($0) })
      try header.close()
      for step in [["read", group, "a"], ["write", group, "b", "2"], ["read", group, "b"]] {
        let run = try await groupctl(["defaults"] + step + ["--suite", "words", "--root", root.path])
        #expect(run.status == 0 || run.status == 1, "word \(slot), \(step): \(run)")
      }
    }
  }

  /// Writes word 8 of the suite's header, its lock word, as an outside program would.
  private func setLockWord(_ value: UInt64, suite: String, in container: GroupContainer) throws {
    let lockFile = try FileHandle(forUpdating: container.preferencesURL.appendingPathComponent("\(suite).lock"))
    try lockFile.seek(toOffset: 64)
    try lockFile.write(contentsOf: withUnsafeBytes(of: value.littleEndian) { Data($0) })
    try lockFile.close()
  }

  /// `groupctl defaults read --json`: the suite as a fresh process sees it.
  private func readInAnotherProcess(_ root: String, suite: String) async throws -> [String: Any] {
    let child = try Child(
      ["defaults", "read", group, "--suite", suite, "--json", "--root", root], executable: "groupctl")
    #expect(await child.exit() == 0, "\(child.errors.text)")
    let json = Data(child.output.joined(separator: "\n").utf8)
    return try JSONSerialization.jsonObject(with: json) as? [String: Any] ?? [:]
  }
}

/// Sets skip catching up (the records they jump over are applied later): two store instances of one suite (each
/// with its own state and mappings, as two processes have) interleave random writes; every read agrees with the
/// commit order and an observer sees each key's values as one unbroken chain, in order, without going back.
@Suite(.runSlot(.minutes(10))) struct DefaultsInterleavingTests {
  @Test func interleavedWritersAgreeWithCommitOrder() async throws {
    let root = try TestRoot()
    let alias = root.path + "/alias"
    try FileManager.default.createSymbolicLink(atPath: alias, withDestinationPath: root.path)
    let group = "group.com.example.tests"
    let stores = [
      try SharedDefaults(suiteName: "mixed", container: try root.container(group)),
      try SharedDefaults(
        suiteName: "mixed", container: try GroupContainer(identifier: group, root: URL(fileURLWithPath: alias))),
    ]
    let seen = Mutex<[String: [Int?]]>([:])
    let observation = stores[0].observe { change in
      seen.withLock { $0[change.key, default: []].append(change.newValue?.intValue) }
    }
    var model: [String: Int] = [:]
    var firstSeen: [String: Int?] = [:]
    var rng = SplitMix64(seed: 7)
    for step in 0..<3_000 {
      let store = stores[Int(rng.next() % 2)]
      let key = "k\(rng.next() % 5)"
      if firstSeen[key] == nil { firstSeen[key] = .some(model[key]) }
      switch rng.next() % 4 {
      case 0:
        try store.removeObject(forKey: key)
        model[key] = nil
      case 1:
        let reader = stores[Int(rng.next() % 2)]
        #expect(reader.value(forKey: key)?.intValue == model[key], "step \(step) \(key)")
      default:
        try store.set(step, forKey: key)
        model[key] = step
      }
    }
    for store in stores {
      for key in model.keys { #expect(store.integer(forKey: key) == model[key]) }
      #expect(Set(store.dictionaryRepresentation().keys) == Set(model.keys))
    }
    // Let the observer's queue drain: its last value per key must be the model's.
    _ = await eventually { !seen.withLock { s in model.keys.contains { s[$0]?.last != model[$0] } } }
    let chains = seen.withLock { $0 }
    for (key, values) in chains {
      #expect(values.last.flatMap { $0 } == model[key], "\(key)")
      // Every value was written at a later step than the one before it (no flapping back).
      let steps = values.compactMap { $0 }
      #expect(steps == steps.sorted(), "\(key): \(values)")
    }
    _ = observation
  }
}

/// A write that may block on the suite's lock, on a thread of its own: blocking a thread of Swift's cooperative
/// pool (two here) could starve the tests running beside it.
final class BlockingWrite: Sendable {
  private let result = Mutex<Result<Void, any Error>?>(nil)
  private let done = DispatchSemaphore(value: 0)

  init(_ body: @escaping @Sendable () throws -> Void) {
    Thread { [self] in
      let outcome = Result { try body() }
      result.withLock { $0 = outcome }
      done.signal()
    }.start()
  }

  var finished: Bool { result.withLock { $0 != nil } }

  /// Waits for the write (a hang detector: 20 s) and rethrows its error. False when it is still blocked: then the
  /// caller must not touch the suite again (it would block on the same lock, past the test's time limit).
  @discardableResult
  func wait() throws -> Bool {
    guard done.wait(timeout: .now() + 20) == .success else {
      Issue.record("the write did not finish within 20 s")
      return false
    }
    try result.withLock { $0 }?.get()
    return true
  }
}
