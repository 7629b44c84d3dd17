import Foundation
import SystemLayer
import TestSupport
import Testing

/// A point read does bounded work on its caller's thread (#32 item 4). Two places where it did not, each with a test
/// across real processes that holds a window open with a pause point:
/// - a rewind (a new generation) made every process reload: the new snapshot, and the tail moved to the journal's
///   start replayed on the read's thread. A process that had read past where the moved tail began goes on from the
///   same records, now earlier in the journal, and reads nothing (`followMovedTail`);
/// - a lazy tail (a long journal a new process left unread) was applied on the read's thread after 16 scans. It is
///   applied in the background, and reads scan until it is installed.
///
/// Mutants this suite catches (each made once by hand):
/// - `followMovedTail` always false: the reader loads the snapshot again ("loads" goes up);
/// - `followMovedTail` shifting by 8 bytes too few: the reader's records do not decode at the new offsets, and it
///   reads the suite again;
/// - the tail applied on the read's thread at the 16th scan (`applyTail` in `lookUp`): "scans 16", not 25.
///
/// A reader following a growing writer applies its records into a table of changes that used to grow by doubling
/// on the read's thread (a read stalled 0.9–1.4 s while a writer added 900,000 keys): the table is sealed when full
/// and a new one started (SuiteValues.swift), sealed tiers merged in the background.
@Suite(.runSlot(.minutes(4))) struct BoundedReadTests {
  /// A reader current in generation G; a writer's background compaction, past the rewind threshold, pauses just
  /// before it moves the journal's tail (`defaults.rewind.starting`, with the suite's lock) while the reader reads up
  /// to the end; the move then makes generation G + 1, the writer adds keys after it. The reader sees every key
  /// and has read no snapshot since.
  @Test func aReaderCurrentAcrossARewindGoesOnWithoutReadingTheSuiteAgain() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.rewind.starting"
    let reader = try Child(
      .defaultsScript(
        suite: "m",
        steps: [
          .fill("k", count: 10, bytes: 0), .sync, .say("loaded"), .wait("read"), .count("x"), .loads, .wait("go"),
          .count("x"), .count("y"), .count("k"), .loads,
        ]),
      root: root.path, group: id)
    #expect(await reader.line { $0 == "loaded" } != nil, "stderr: \(reader.errors.text)")
    // 3,000 sets of 4 KB: past the 8 MiB rewind threshold, so a background compaction moves the tail. 20,000 small
    // z's keep writing after them: a compaction that began early and built slowly (load 10) moves no tail (what came
    // during its build is longer than what it holds), and one that finishes after the last write starts no other —
    // the writer then never rewound. One started past the threshold while the z's go on does; they are too few to
    // pass it again.
    let writer = try Child(
      .defaultsScript(
        suite: "m",
        steps: [
          .fill("x", count: 3000, bytes: 4000), .fill("y", count: 10, bytes: 0), .fill("z", count: 20_000, bytes: 0),
          .settle,
        ]),
      root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.rewind.starting", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the writer never rewound")
    // The writer holds the lock and waits: the reader reads every committed record of generation G.
    #expect(FileManager.default.createFile(atPath: root.path + "/read", contents: nil))
    let loadsBefore = await reader.line { $0.hasPrefix("loads ") }
    #expect(loadsBefore != nil, "stderr: \(reader.errors.text)")
    try FileManager.default.removeItem(atPath: point)
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.exit() == 0, "stderr: \(reader.errors.text)")
    #expect(
      Array(reader.output.suffix(4)) == ["count 3000", "count 10", "count 10", loadsBefore ?? "?"],
      "\(reader.output.suffix(6)) stderr: \(reader.errors.text)")
    withExtendedLifetime(root) {}
  }

  /// A new process finds a long journal past the snapshot (its writer killed as its first compaction installed) and
  /// reads 25 keys: past 16 scans the tail is applied in the background — held there by a pause point — while the
  /// reads go on scanning and answer right; once it is installed, reads scan no more.
  @Test func aLazyTailIsAppliedInTheBackgroundWhileReadsGoOn() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let seed = try Child(.defaultsScript(suite: "t", steps: [.set("base", 1), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0, "\(seed.errors.text)")
    // About 1.8 MB of records past the snapshot: the writer dies as its first background compaction installs.
    let writer = try Child(
      .defaultsScript(suite: "t", steps: [.fill("k", count: 60_000, bytes: 0)]), root: root.path, group: id,
      environment: ["GROUPCONTAINER_FAULT_POINT": "defaults.snapshot.writing"])
    _ = await writer.exit()
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.read.tailApplying"
    // Keys the writer wrote before its compaction started (at 1 MiB of records, over 30,000 keys).
    let first = (0..<25).map { DefaultsStep.read("k\($0 * 500)") }
    let then = (25..<35).map { DefaultsStep.read("k\($0 * 500)") }
    let reader = try Child(
      .defaultsScript(
        suite: "t",
        steps: first + [.tailScans, .say("read"), .wait("go"), .settle] + then + [.tailScans, .count("k")]),
      root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.read.tailApplying", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await reader.line { $0 == "read" } != nil, "stderr: \(reader.errors.text)")
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the tail's application never started")
    try FileManager.default.removeItem(atPath: point)
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.exit() == 0, "stderr: \(reader.errors.text)")
    let out = reader.output
    let expected =
      (0..<25).map { "read k\($0 * 500) \($0 * 500)" } + ["scans 25", "read", "settled"]
      + (25..<35).map { "read k\($0 * 500) \($0 * 500)" } + ["scans 25"]
    #expect(Array(out.prefix(expected.count)) == expected, "\(out)")
    // The whole state once applied: what a new process counts.
    let counted = out.last { $0.hasPrefix("count ") }
    let fresh = try Child(.defaultsScript(suite: "t", steps: [.count("k")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(counted != nil && fresh.output.last == counted, "\(String(describing: counted)) \(fresh.output)")
    withExtendedLifetime(root) {}
  }

  /// A reader that fell behind — a writer appended over 100 KB of records while it did not read — hands its
  /// catch-up to the background (held there by a pause point) and reads on, scanning: a key the records changed reads
  /// the tail's value, one they removed reads nil, one they did not touch reads what the reader held; a change made
  /// after the hand-over reads over the tail. Once the tail is applied, reads scan no more, and every key counts.
  @Test func aReaderThatFellBehindHandsItsCatchUpToTheBackground() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.read.tailApplying"
    let reader = try Child(
      .defaultsScript(
        suite: "h",
        steps: [
          .fill("k", count: 100, bytes: 0), .read("k5"), .loads, .say("ready"), .wait("go"),
          .read("k5"), .read("k7"), .read("k6"), .read("x10"), .read("x3999"), .read("k5"), .tailScans, .handOvers,
          .say("scanned"), .wait("more"),
          .read("k5"), .read("k6"), .read("k8"), .tailScans, .say("newer"), .wait("apply"), .settle,
          .read("k5"), .read("k6"), .read("k7"), .read("k8"), .read("x10"), .tailScans, .count("x"), .count("k"),
          .loads, .handOvers,
        ]),
      root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.read.tailApplying", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await reader.line { $0 == "ready" } != nil, "stderr: \(reader.errors.text)")
    let writer = try Child(
      .defaultsScript(suite: "h", steps: [.set("k5", 555), .remove("k7"), .fill("x", count: 4000, bytes: 0)]),
      root: root.path, group: id)
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.line { $0 == "scanned" } != nil, "stderr: \(reader.errors.text)")
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the tail's application never started")
    let newer = try Child(
      .defaultsScript(suite: "h", steps: [.set("k5", 5555), .set("k6", 666)]), root: root.path, group: id)
    #expect(await newer.exit() == 0, "stderr: \(newer.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/more", contents: nil))
    #expect(await reader.line { $0 == "newer" } != nil, "stderr: \(reader.errors.text)")
    try FileManager.default.removeItem(atPath: point)
    #expect(FileManager.default.createFile(atPath: root.path + "/apply", contents: nil))
    #expect(await reader.exit() == 0, "stderr: \(reader.errors.text)")
    let out = Array(reader.output.drop { !$0.hasPrefix("loads ") })
    let loads = out.first ?? "?"
    let expected = [
      loads, "ready",
      "read k5 555", "read k7 nil", "read k6 6", "read x10 10", "read x3999 3999", "read k5 555", "scans 5",
      "handed over 1", "scanned",
      "read k5 5555", "read k6 666", "read k8 8", "scans 6", "newer", "settled",
      "read k5 5555", "read k6 666", "read k7 nil", "read k8 8", "read x10 10", "scans 6", "count 4000", "count 99",
      loads, "handed over 1",
    ]
    #expect(out == expected, "\(zip(out, expected).filter { $0 != $1 }.prefix(3)) \(out.suffix(4))")
    withExtendedLifetime(root) {}
  }

  /// A reader whose tables of changes hold 64 entries (`GROUPCONTAINER_DEFAULTS_TIER_CAPACITY`) reads random keys
  /// while a writer sets 12,000 keys to their number and then to data, then removes one: hundreds of seals and
  /// merges (also when it catches up in one go: the tiers are sealed as records are applied). Every value read is one the writer wrote, and never older than one read before (what the reader sees
  /// is a prefix of the writer's sets); once the writer is done, every key reads its data and the removed key nil.
  @Test func aReaderFollowingAGrowingWriterReadsEveryValueAcrossSealedTiers() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let n = 12_000
    var random = SplitMix64(seed: 32)
    let sampled = (0..<400).map { _ in 8 + Int(random.next() % UInt64(n - 8)) }  // x7 is removed at the end
    let rounds = stride(from: 0, to: sampled.count, by: 10).flatMap { start in
      sampled[start..<(start + 10)].map { DefaultsStep.read("x\($0)") } + [.count("x")]
    }
    var steps: [DefaultsStep] = [.set("seed", 1), .say("ready"), .wait("go")]
    steps += rounds.prefix(rounds.count / 2)
    steps += [.wait("half")] + rounds.suffix(rounds.count - rounds.count / 2) + [.wait("done")]
    steps += sampled.prefix(100).map { .read("x\($0)") } + [.read("x7"), .count("x"), .settle]
    let reader = try Child(
      .defaultsScript(suite: "f", steps: steps), root: root.path, group: id,
      environment: ["GROUPCONTAINER_DEFAULTS_TIER_CAPACITY": "64"])
    #expect(await reader.line { $0 == "ready" } != nil, "stderr: \(reader.errors.text)")
    let writer = try Child(
      .defaultsScript(
        suite: "f", steps: [.fill("x", count: n, bytes: 0), .fill("x", count: n, bytes: 8), .remove("x7"), .settle]),
      root: root.path, group: id)
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    // Half the reads during the first fill (or before it), half during the second.
    #expect(await writer.line { $0.hasPrefix("filled x") } != nil, "stderr: \(writer.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/half", contents: nil))
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/done", contents: nil))
    #expect(await reader.exit() == 0, "stderr: \(reader.errors.text)")
    let out = reader.output.drop { $0 != "ready" }.dropFirst()
    let reads = out.filter { $0.hasPrefix("read ") }
    #expect(reads.count == sampled.count + 101, "\(out.suffix(5))")
    // The writer's sets in order: P of them seen. A read bounds P; the bounds must go on overlapping.
    var seen = 0
    var counted = 0
    var bad: [String] = []
    for line in out.prefix(out.count - 103) {
      let parts = line.split(separator: " ")
      if parts.first == "count" {
        let count = Int(parts[1]) ?? -1
        // Only the last set (x7's removal) takes a key away.
        if (count < counted && count != n - 1) || count > n { bad.append("\(line) after \(counted)") }
        counted = max(counted, count)
        continue
      }
      guard parts.count == 3, parts[0] == "read", let i = Int(parts[1].dropFirst()) else { continue }
      let (lower, upper): (Int, Int)
      switch parts[2] {
      case "nil": (lower, upper) = (0, i)
      case "\(i)": (lower, upper) = (i + 1, n + i)
      case "-999": (lower, upper) = (n + i + 1, 2 * n)
      default: (lower, upper) = (.max, -1)
      }
      if upper < seen { bad.append("\(line) after \(seen) sets seen") }
      seen = max(seen, lower)
    }
    #expect(bad.isEmpty, "\(bad.prefix(5))")
    let last = Array(out.suffix(103))
    let expected =
      sampled.prefix(100).map { "read x\($0) -999" } + ["read x7 nil", "count \(n - 1)", "settled"]
    #expect(Array(last.suffix(103)) == expected, "\(zip(last.suffix(103), expected).filter { $0 != $1 }.prefix(3))")
    withExtendedLifetime(root) {}
  }
}
