import Foundation
import TestSupport
import Testing

/// A writer killed before it compacted leaves a long journal past the snapshot (#32 item 2: each new process then
/// paid 1.2–3.5 s and 190 MB for one read of a million-key suite). A new process answers point reads by scanning
/// that tail for the key alone, and applies it whole before anything else (a write, `synchronize()`, the whole
/// dictionary) — across real processes, the writer killed by `GROUPCONTAINER_FAULT_POINT` as its first compaction
/// installs.
///
/// Mutants this suite catches (each made once by hand):
/// - no lazy tail (`lazyTailBytes` = `Int.max`): "scans 0";
/// - a first load's bar back at 1 MiB (`lazyTailBytes` = `1 << 20`): the short tail's "scans 0";
/// - the image asked before the tail: `k7` reads the image's -1, `gone` reads 1;
/// - `exclusively` and `catchUpExclusively` not applying the tail: the reader's compaction (a rewind) writes a
///   snapshot without the tail's keys, and a new process counts fewer.
@Suite(.runSlot(.minutes(6))) struct LazyTailTests {
  @Test func aNewProcessReadsALongUncompactedJournalLazilyAndWritesWhole() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    // The image: k7 = -1, gone = 1, kept = 5.
    let seed = try Child(
      .defaultsScript(suite: "t", steps: [.set("k7", -1), .set("gone", 1), .set("kept", 5), .sync]), root: root.path,
      group: id)
    #expect(await seed.exit() == 0, "\(seed.errors.text)")
    // `gone` removed, then 60,000 keys (about 1.8 MB of records); the writer dies as its first background
    // compaction (started past 1 MiB) installs, or exits first: either way the journal past the snapshot is long.
    let writer = try Child(
      .defaultsScript(suite: "t", steps: [.remove("gone"), .fill("k", count: 60_000, bytes: 0)]), root: root.path,
      group: id, environment: ["GROUPCONTAINER_FAULT_POINT": "defaults.snapshot.writing"])
    _ = await writer.exit()
    // Point reads: from the tail (newest), else the image; a few scans, no replay.
    let reader = try Child(
      .defaultsScript(
        suite: "t",
        steps: [
          .read("k7"), .read("k100"), .read("gone"), .read("kept"), .read("nope"), .read("k7"), .tailScans,
          .set("x", 1), .read("k8"), .rewind, .count("k"),
        ]),
      root: root.path, group: id)
    #expect(await reader.exit() == 0, "\(reader.errors.text)")
    let out = reader.output
    #expect(
      Array(out.prefix(6)) == [
        "read k7 7", "read k100 100", "read gone nil", "read kept 5", "read nope nil", "read k7 7",
      ],
      "\(out.prefix(8))")
    let scans = out.first { $0.hasPrefix("scans ") }.flatMap { Int($0.dropFirst("scans ".count)) } ?? 0
    #expect((1...5).contains(scans), "\(out.prefix(8))")  // the second read of k7 is remembered
    #expect(out.contains("read k8 8"))
    // The reader's write and compaction worked on the whole state: a new process counts the same keys.
    let counted = out.last { $0.hasPrefix("count ") }
    let fresh = try Child(.defaultsScript(suite: "t", steps: [.count("k")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(
      fresh.output.last == counted && counted != nil && counted != "count 1",
      "\(String(describing: counted)) \(fresh.output)")
  }

  /// A writer that exits without `synchronize()` before its first compaction (1 MiB) leaves a short tail past the
  /// snapshot. A new process reading a few keys scans it rather than replaying it into a table of its own (with a
  /// 1 MiB bar, 422 KB left by a 100,000-key writer cost each reader 6.5 MB and 550 ms in a debug build).
  @Test func aShortTailLeftByAWriterThatExitedIsScannedNotReplayed() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let seed = try Child(
      .defaultsScript(suite: "t", steps: [.set("k7", -1), .set("kept", 5), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0, "\(seed.errors.text)")
    // 10,000 keys: about 300 KB of records, past the 64 KiB bar and short of the first compaction.
    let writer = try Child(
      .defaultsScript(suite: "t", steps: [.fill("k", count: 10_000, bytes: 0)]), root: root.path, group: id)
    #expect(await writer.exit() == 0, "\(writer.errors.text)")
    let reader = try Child(
      .defaultsScript(
        suite: "t", steps: [.read("k7"), .read("k9999"), .read("kept"), .read("nope"), .tailScans, .count("k")]),
      root: root.path, group: id)
    #expect(await reader.exit() == 0, "\(reader.errors.text)")
    let out = reader.output
    #expect(Array(out.prefix(4)) == ["read k7 7", "read k9999 9999", "read kept 5", "read nope nil"], "\(out)")
    let scans = out.first { $0.hasPrefix("scans ") }.flatMap { Int($0.dropFirst("scans ".count)) } ?? 0
    #expect((1...4).contains(scans), "\(out)")
    #expect(out.last == "count 10001", "\(out)")  // k0…k9999 and kept
  }
}
