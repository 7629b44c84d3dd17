import Foundation
import Glibc
import PropertyList
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import SharedDefaults

@Suite(.runSlot(.minutes(3))) struct DefaultsMultiProcessTests {
  let group = "group.com.example.tests"

  @Test func sixteenWritersLoseNothingAndTheCounterIsExact() async throws {
    let root = try TestRoot()
    let stress = try Child(
      ["stress", "defaults", group, "--writers", "16", "--keys", "1000", "--increments", "1000", "--root", root.path],
      executable: "groupctl")
    #expect(await stress.exit() == 0, "\(stress.output) \(stress.errors.text)")
    let summary = stress.output.last ?? ""
    #expect(summary.hasPrefix("keys=16000/16000 lost=0 counter=16000/16000 writes_per_s="), "\(summary)")
  }

  /// A process that observes one key scans the other keys' records without applying them
  /// (`catchUpForObservers`), and still hears every change of its key, in order, with the right old values —
  /// also across a compaction that empties the journal, and when its key's record sits among thousands of
  /// others. Mutant: the scan never matching the observed key (the watcher heard 1 change of 3).
  @Test func anObserverOfOneKeyHearsItAmongThousandsOfOthers() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let watch = try Child(
      ["defaults", "watch", group, "watched", "--suite", "w", "--root", root.path], executable: "groupctl")
    await watch.line { $0.contains("\"ready\"") }
    let writer = try Child(
      .defaultsScript(
        suite: "w",
        steps: [
          .set("watched", 1), .fill("o", count: 30000, bytes: 0), .set("watched", 2), .rewind,
          .fill("p", count: 3000, bytes: 0), .set("watched", 3),
        ]),
      root: root.path, group: group)
    #expect(await writer.exit() == 0, "\(writer.errors.text)")
    _ = await eventually { watch.output.filter { $0.contains("\"key\"") }.count >= 3 }
    let heard = watch.output.filter { $0.contains("\"key\"") }
    await watch.stop(SIGTERM)
    #expect(heard.count == 3, "\(heard)")
    #expect(heard.first?.contains("\"old\":null,\"new\":1,") == true, "\(heard)")
    for (i, line) in heard.enumerated() where i > 0 {
      #expect(line.contains("\"old\":\(i),\"new\":\(i + 1)"), "\(heard)")
    }
    withExtendedLifetime(container) {}
  }

  /// A write appended while others wrote since this process last caught up is not applied to its memory at once
  /// (`ownWritesUnapplied`): the next read applies it with the others' records, in commit order. Each of 20,000 or
  /// more sets is read back at once while another process writes, and that process's last values are read after.
  /// Mutant: the lazy branch moving `length` past the record without applying it (13,031 of 20,000 reads stale).
  ///
  /// The sets start once the other process writes, and go on past 20,000 while it still does until the path ran: on
  /// a loaded machine the other started late and this loop ended before its first write ("the path never ran").
  @Test func aWriterBehindOthersReadsItsOwnWritesBackAtOnce() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let other = try Child(
      [
        "stress", "defaults-writer", id, "--index", "0", "--keys", "100", "--rounds", "3000", "--increments", "0",
        "--suite", "mixed", "--root", root.path,
      ], executable: "groupctl")
    let defaults = try SharedDefaults(suiteName: "mixed", container: container)
    #expect(await eventually { defaults.object(forKey: "w0-k0") != nil }, "the other process never wrote")
    let lazyBefore = DefaultsStore.ownWritesLeftForTheNextRead.value
    var (sets, stale) = (0, 0)
    while sets < 20_000 || (DefaultsStore.ownWritesLeftForTheNextRead.value == lazyBefore && other.process.isRunning) {
      sets += 1
      try defaults.set(sets, forKey: "mine")
      if defaults.integer(forKey: "mine") != sets { stale += 1 }
    }
    #expect(await other.exit() == 0)
    #expect(stale == 0, "\(stale) of \(sets) reads stale")
    #expect(DefaultsStore.ownWritesLeftForTheNextRead.value > lazyBefore, "the path never ran")
    #expect((0..<100).allSatisfy { defaults.integer(forKey: "w0-k\($0)") == $0 })
    #expect(defaults.integer(forKey: "mine") == sets)
  }

  /// An observer stopped while its key changed and a rewind emptied the journal learns the change from the new
  /// snapshot (`followRewindForObservers`: its key's value there against the one it held), not from records it
  /// never scanned. Mutant: the changes found there not delivered (heard 1 of 2).
  @Test func anObserverHearsAChangeThatOnlyTheRewoundSnapshotHolds() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let watch = try Child(
      ["defaults", "watch", group, "watched", "--suite", "r", "--root", root.path], executable: "groupctl")
    await watch.line { $0.contains("\"ready\"") }
    func heard(_ count: Int) async -> [String] {
      _ = await eventually { watch.output.filter { $0.contains("\"key\"") }.count >= count }
      let lines = watch.output.filter { $0.contains("\"key\"") }
      return lines
    }
    let first = try Child(.defaultsScript(suite: "r", steps: [.set("watched", 1)]), root: root.path, group: group)
    #expect(await first.exit() == 0)
    await #expect(heard(1).count == 1)
    Glibc.kill(watch.pid, SIGSTOP)
    let second = try Child(
      .defaultsScript(
        suite: "r",
        steps: [.set("watched", 2), .fill("o", count: 100, bytes: 0), .rewind, .fill("p", count: 10, bytes: 0)]),
      root: root.path, group: group)
    let status = await second.exit()
    Glibc.kill(watch.pid, SIGCONT)
    #expect(status == 0, "\(second.errors.text)")
    let lines = await heard(2)
    await watch.stop(SIGTERM)
    #expect(lines.count == 2, "\(lines)")
    #expect(lines.last?.contains("\"old\":1,\"new\":2") == true, "\(lines)")
    withExtendedLifetime(container) {}
  }

  @Test func everyAcknowledgedWriteSurvivesSIGKILLAtRandomPoints() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    var rng = SplitMix64(seed: 42)
    var acknowledged = -1
    for round in 0..<12 {
      // 40 KB values: a compaction every ~26 writes, so kills also land inside compactions. At most 1,200 keys
      // (48 MB, under the plist reader's 64 MiB): on a loaded machine the kill may come late.
      let writer = try Child(
        .defaultsSet(suite: "killed", count: 1200, valueBytes: 40000), root: root.path, group: group)
      await writer.line { $0.hasPrefix("ack") }
      try? await Task.sleep(for: .microseconds(2_000 + rng.next() % 60_000))
      writer.kill(SIGKILL)
      let acks = writer.output.compactMap { $0.hasPrefix("ack ") ? Int($0.dropFirst(4)) : nil }
      acknowledged = max(acknowledged, acks.max() ?? -1)
      // A fresh look at the files: every acked key is there with its value, and the snapshot parses.
      let defaults = try SharedDefaults(suiteName: "killed", container: container)
      for i in (acks.max() ?? 0) - 5...(acks.max() ?? 0) where i >= 0 {
        #expect(
          defaults.data(forKey: "k\(i)") == Data(repeating: UInt8(i % 256), count: 40_000), "round \(round) key k\(i)")
      }
      try defaults.synchronize()
      let bytes = try Array(Data(contentsOf: container.preferencesURL.appendingPathComponent("killed.plist")))
      let snapshot = try PropertyListValue(bytes: bytes).dictionaryValue ?? [:]
      #expect((0...(acks.max() ?? 0)).allSatisfy { snapshot["k\($0)"] != nil }, "round \(round)")
    }
    #expect(acknowledged > 0)
    // Nothing was ever set aside as corrupt: kills leave only torn bytes past the commit point.
    let leftovers = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(!leftovers.contains { $0.contains("corrupt") }, "\(leftovers)")
  }

  @Test func aChangeInOneProcessReachesAnObserverInAnother() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "observed", container: container)
    try defaults.set(1, forKey: "countdown")
    let observer = try Child(.defaultsObserve(suite: "observed"), root: root.path, group: group)
    await observer.line { $0.hasPrefix("ready") }
    try defaults.set(2, forKey: "countdown")
    try defaults.update("countdown") { .integer(PropertyListInteger(($0?.intValue ?? 0) * 10)) }
    await observer.line { $0 == "change countdown 1 2 \(getpid())" }
    await observer.line { $0 == "change countdown 2 20 \(getpid())" }
    observer.kill()
  }

  @Test func outsideEditsOfThePlistReachObserversAsDiffs() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let defaults = try SharedDefaults(suiteName: "outside", container: container)
    try defaults.set(1, forKey: "kept")
    try defaults.set(2, forKey: "changed")
    try defaults.set(3, forKey: "removed")
    try defaults.synchronize()
    let stream = defaults.changes()
    let path = container.preferencesURL.appendingPathComponent("outside.plist").path
    try await runPython(
      """
      import plistlib, sys
      d = plistlib.load(open(sys.argv[1], 'rb'))
      d['changed'] = 20; del d['removed']; d['added'] = 'py'
      plistlib.dump(d, open(sys.argv[1], 'wb'), fmt=plistlib.FMT_XML)
      """, path)
    var seen: [String: DefaultsChange] = [:]
    for await change in stream {
      seen[change.key] = change
      if seen.count == 3 { break }
    }
    #expect(seen["changed"]?.newValue == .integer(20) && seen["changed"]?.oldValue == .integer(2))
    #expect(seen["removed"]?.newValue == nil && seen["added"]?.newValue == .string("py"))
    #expect(seen.values.allSatisfy { $0.originProcessID == nil })
    #expect(defaults.integer(forKey: "kept") == 1 && defaults.string(forKey: "added") == "py")
    // The export is then written again from the new state (without the lock, right after): a binary plist.
    #expect(
      await eventually {
        (try? FileHandle(forReadingFrom: URL(fileURLWithPath: path)).read(upToCount: 8)) == Data("bplist00".utf8)
      })
  }

}

/// Runs a Python 3 script (`python3 -c`) with `arguments`; expects it to succeed.
func runPython(_ script: String, _ arguments: String...) async throws {
  let run = try await runToEnd("/usr/bin/env", ["python3", "-c", script] + arguments)
  #expect(run.status == 0, "\(run.errors)")
}

@Suite(.runSlot(.minutes(3))) struct DefaultsCorruptionTests {
  /// Sets up suite `suite` with a known state plus an untouched neighbour suite, then lets `damage` hit the files.
  func recover(
    _ suite: String, awaitQuarantine: Bool = true, damage: (_ plist: URL, _ journal: URL) async throws -> Void
  ) async throws -> (SharedDefaults, SharedDefaults, [String], TestRoot) {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: suite, container: container)
    let neighbour = try SharedDefaults(suiteName: "neighbour", container: container)
    try neighbour.set("safe", forKey: "n")
    try defaults.set(1, forKey: "a")
    try defaults.synchronize()
    try defaults.set(2, forKey: "b")  // in the journal only
    let prefs = container.preferencesURL
    try await damage(prefs.appendingPathComponent("\(suite).plist"), prefs.appendingPathComponent("\(suite).journal"))
    // The watcher's check runs in the background (and gives an unreadable plist `exportRetryDelay`, as it may be
    // half-written): wait for the damaged file to be moved aside.
    var files: [String] = []
    _ = try await eventually {
      _ = defaults.integer(forKey: "a")
      files = try FileManager.default.contentsOfDirectory(atPath: prefs.path)
      return !awaitQuarantine || files.contains(where: { $0.hasPrefix(suite + ".") && $0.contains(".corrupt-") })
    }
    return (defaults, neighbour, files, root)
  }

  @Test(arguments: [
    ("garbage", Data("this is not a plist at all".utf8)),
    ("truncated", Data("bplist00\u{d1}\u{01}".utf8)),
    ("deep", Data(("<?xml version=\"1.0\"?><plist version=\"1.0\">" + String(repeating: "<array>", count: 5000)).utf8)),
    ("array", Data("<plist version=\"1.0\"><array><string>x</string></array></plist>".utf8)),
  ])
  func aCorruptSnapshotIsMovedAsideAndTheLastGoodStateRecovered(name: String, bytes: Data) async throws {
    let (defaults, neighbour, files, root) = try await recover("s-\(name)") { plist, _ in try bytes.write(to: plist) }
    #expect(defaults.integer(forKey: "a") == 1 && defaults.integer(forKey: "b") == 2)
    #expect(files.contains { $0.hasPrefix("s-\(name).plist.corrupt-") }, "\(files)")
    #expect(neighbour.string(forKey: "n") == "safe")
    // The suite works on.
    try defaults.set(3, forKey: "c")
    try defaults.synchronize()
    #expect(defaults.integer(forKey: "c") == 3)
    withExtendedLifetime(root) {}
  }

  @Test func aHugeSnapshotIsRefusedNotLoaded() async throws {
    let (defaults, _, files, root) = try await recover("huge") { plist, _ in
      let handle = try FileHandle(forWritingTo: plist)
      try handle.seek(toOffset: 600 << 20)  // sparse: 600 MB, over the 512 MiB limit
      try handle.write(contentsOf: Data([0]))
      try handle.close()
    }
    #expect(defaults.integer(forKey: "a") == 1)
    #expect(files.contains { $0.hasPrefix("huge.plist.corrupt-") })
    withExtendedLifetime(root) {}
  }

  @Test func aCorruptJournalKeepsItsGoodPrefixAndIsMovedAside() async throws {
    // This process does not look at the journal again (it applied "b" already): nothing to wait for here.
    let (defaults, neighbour, files, root) = try await recover("journal", awaitQuarantine: false) { _, journal in
      // Flip a byte inside the record of "b": its checksum no longer matches. The record starts where the
      // snapshot stands in the journal (header word 18's low half: `synchronize()` kept the journal).
      let header = try Data(contentsOf: journal.deletingPathExtension().appendingPathExtension("lock"))
      let start = header[144..<148].enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * $1.offset) }
      let handle = try FileHandle(forUpdating: journal)
      try handle.seek(toOffset: start + 12)
      try handle.write(contentsOf: Data([0xFF]))
      try handle.close()
      // Make the other processes' view stale, as if a writer had committed it: reopen from scratch.
    }
    // This process already applied "b" before the damage; a fresh process must not crash on it.
    let fresh = try Child(.defaultsObserve(suite: "journal"), root: root.path, group: defaults.container.identifier)
    await fresh.line { $0.hasPrefix("ready") }
    fresh.kill()
    let after = try FileManager.default.contentsOfDirectory(atPath: defaults.container.preferencesURL.path)
    #expect(after.contains { $0.hasPrefix("journal.journal.corrupt-") }, "\(after)")
    #expect(defaults.integer(forKey: "a") == 1)
    #expect(neighbour.string(forKey: "n") == "safe")
    #expect(!files.contains { $0.contains("neighbour") && $0.contains("corrupt") })
  }

  @Test(arguments: ["truncated", "garbage"])
  func aDamagedJournalIsSetAsideInAFreshProcess(kind: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let writer = try Child(
      .defaultsSet(suite: "damaged", count: 3, valueBytes: 10), root: root.path, group: container.identifier)
    #expect(await writer.exit() == 0)
    let journal = container.preferencesURL.appendingPathComponent("damaged.journal")
    let handle = try FileHandle(forUpdating: journal)
    if kind == "truncated" {
      try handle.truncate(atOffset: 20)  // shorter than the committed length
    } else {
      try handle.seek(toOffset: 0)
      try handle.write(contentsOf: Data(repeating: 0xAB, count: 64))
    }
    try handle.close()
    let defaults = try SharedDefaults(suiteName: "damaged", container: container)
    #expect(defaults.propertyListRepresentation().count < 3)  // what was lost is lost, and said so
    try defaults.set(1, forKey: "after")
    #expect(defaults.integer(forKey: "after") == 1)
    let files = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(files.contains { $0.hasPrefix("damaged.journal.corrupt-") }, "\(files)")
  }

  /// A container copied with `cp -a` (a backup restored): every inode is new, so the journal's inode the header
  /// records names no file there, and the first write used to drop the writes since the last compaction ("was
  /// removed … lost"). The journal at the name holds the committed records ending with the one the header names: it
  /// is kept. A journal of another container put there instead (the same keys and values, written by another
  /// process: records of the same lengths, another pid in each) is not: it ends with another record.
  ///
  /// Mutants: `follow` never keeping a copy (`copy`: 1 key of 6); keeping one without comparing its last record
  /// with the header's (`foreign`: 6 keys).
  @Test(arguments: ["copy", "foreign"])
  func aCopiedContainerKeepsItsJournal(kind: String) async throws {
    let identifier = "group.com.example.copied"
    let original = try TestRoot()
    let writer = try Child(
      .defaultsSet(suite: "copied", count: 5, valueBytes: 8), root: original.path, group: identifier)
    #expect(await writer.exit() == 0)
    let restored = try TestRoot()
    #expect(try runTool("/bin/cp", ["-a", original.path + "/" + identifier, restored.path + "/" + identifier]) == 0)
    let other = try TestRoot()
    if kind == "foreign" {
      let writer = try Child(
        .defaultsSet(suite: "copied", count: 5, valueBytes: 8), root: other.path, group: identifier)
      #expect(await writer.exit() == 0)
      let journal = "/\(identifier)/Library/Preferences/copied.journal"
      #expect(try runTool("/bin/cp", ["-a", other.path + journal, restored.path + journal]) == 0)
    }
    // The first write in the copy is the first lock holder: it meets the journal under another inode.
    let defaults = try SharedDefaults(suiteName: "copied", container: try restored.container(identifier))
    try defaults.set(1, forKey: "after")
    let reader = try Child(.defaultsKeys(suite: "copied"), root: restored.path, group: identifier)
    #expect(await reader.exit() == 0)
    if kind == "copy" {
      #expect(reader.output == ["after 1", "k0 8", "k1 8", "k2 8", "k3 8", "k4 8", "end"], "\(reader.errors.text)")
    } else {
      #expect(reader.output == ["after 1", "end"], "\(reader.errors.text)")
    }
    withExtendedLifetime((original, other)) {}
  }

  @Test func mutatedJournalsNeverCrashTheDecoder() throws {
    var rng = SplitMix64(seed: 7)
    let records: [JournalFormat.Record] = [
      .init(
        key: "a", operation: .set(.dictionary(["x": .array([.integer(1), .string("y"), .data([1, 2])])])), pid: 1),
      .init(key: "b", operation: .remove, pid: 2),
      .init(key: "c", operation: .set(.date(PropertyListDate(secondsSinceReferenceDate: 3))), pid: 3),
    ]
    let valid = try records.flatMap { try JournalFormat.encode($0) }
    var decoded: [JournalFormat.Record] = []
    try JournalFormat.decode(valid, base: 0, into: &decoded)
    #expect(decoded == records)
    for _ in 0..<20_000 {
      var bytes = valid
      for _ in 0...Int(rng.next() % 4) {
        let at = Int(rng.next() % UInt64(bytes.count))
        switch rng.next() % 3 {
        case 0: bytes[at] ^= UInt8(truncatingIfNeeded: 1 << (rng.next() % 8))
        case 1: bytes.removeSubrange(at...)
        default: bytes[at] = UInt8(truncatingIfNeeded: rng.next())
        }
        if bytes.isEmpty { break }
      }
      var out: [JournalFormat.Record] = []
      _ = try? JournalFormat.decode(bytes, base: 0, into: &out)
      // Fix up checksums so mutations reach the value decoder, not only the checksum check.
      var patched = bytes
      var offset = 0
      while offset + 8 <= patched.count {
        let length = Int(JournalFormat.read32(patched[...], offset))
        guard length > 0, offset + 8 + length <= patched.count else { break }
        let sum = JournalFormat.checksum(patched[(offset + 8)..<(offset + 8 + length)])
        for i in 0..<4 { patched[offset + 4 + i] = UInt8(truncatingIfNeeded: sum >> (8 * i)) }
        offset += 8 + length
      }
      out = []
      _ = try? JournalFormat.decode(patched, base: 0, into: &out)
    }
  }
}
