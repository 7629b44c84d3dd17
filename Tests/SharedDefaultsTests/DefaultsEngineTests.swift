import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import SharedDefaults
import TestSupport
import Testing

/// The storage engine's promise that no acknowledged write is lost, at the points where #9 found it broken:
/// a compactor killed between two stores, outside edits of the plist racing writers, a journal truncated or
/// deleted before a new process opens the suite, suites larger than the old reading limits. Kill points are
/// hit exactly with `FaultPoint` (`GROUPCONTAINER_FAULT_POINT`), not by chance.
///
/// Mutants this suite catches:
/// - compaction storing the committed length 0 before bumping the generation (0.1.0's order; the fault point
///   between the two): `aCompactorKilledAtAnyPointLosesNoAcknowledgedWrite(generationBumped)` — the long-lived
///   process saw (generation, 0) again and read `base 1` alone without the lock (its `synchronize()` repairs it,
///   so the read before it is what fails);
/// - the lock-free reader not loading the generation again after reading the journal (no seqlock check):
///   `aReaderPausedWhileAnotherEmptiesAndOverwritesTheJournalNeverTrustsThoseBytes` ("unreadable 1");
/// - an outside edit adopted as the whole state (0.1.0) instead of its difference from the snapshot:
///   `outsideReadModifyWritesWhileFourProcessesWriteLoseNothing` (stress reports lost keys, the counter drops);
/// - `reload` throwing on a damaged journal before applying the snapshot, and `compact` accepting a state that
///   was never loaded: `aDamagedJournalNeverCostsTheSynchronizedSnapshot` (both arguments: the suite came back
///   empty);
/// - the reading limits of 0.1.0 (1,000,000 values, 64 MiB): `suitesOverTheOldLimitsAreReadBackWhole`;
/// - the image's values stored once per key (no dedup, or none when a compaction copies entries):
///   `identicalValuesAreStoredOnceThroughEveryCompaction`;
/// - every compaction emptying the journal (a new generation, every process reloads):
///   `anotherProcesssCompactionCostsReadersNoReload` ("loads 2");
/// - `snapshotAt` moved before the snapshot is written: `aCompactorKilledAtAnyPointLosesNoAcknowledgedWrite(
///   defaults.snapshot.writing)` (a, b, c lost for new processes);
/// - `snapshotStart` not checking the generation: `theSnapshotPointOfAnOlderGenerationIsNotUsed`;
/// - `reloadIsCheaper` always false: `aProcessFarBehindReadsTheSnapshotInstead` ("loads 1");
/// - `writeExport` giving up a replaced export that does not parse yet (no `applyReplacedEditLater`):
///   `anEditWrittenIntoAnExportBeingReplacedIsApplied` (the tool's key is lost);
/// - `synchronize()` not waiting for `replacedEdits`: `anEditWrittenIntoAnExportBeingReplacedSurvivesTheCompactorsExit`;
/// - a background compaction installed without checking the snapshot and the generation it was built from:
///   `aBackgroundCompactionOvertakenByAnotherIsDropped`;
/// - no second name for a replaced export: `anEditWrittenIntoAnExportBeingReplacedSurvivesTheCompactorsDeath` (the
///   tool's key lost); the in-process retry applying an edit whose second name another path had already applied:
///   `anEditWrittenIntoAnExportBeingReplacedSurvivesTheCompactorsExit` (applied twice, the second time against
///   rotated bases: `b` removed);
/// - the next lock holder not finishing a background rewind's move:
///   `aRewindInTheBackgroundKilledAtAnyPointLosesNoAcknowledgedWrite(defaults.rewind.committed)`.
@Suite(.runSlot(.minutes(8))) struct DefaultsEngineTests {
  /// The lines of `child`'s output after the last `synced` (what its final `dump` printed).
  func lastDump(_ child: Child) -> [String] {
    let lines = child.output
    let start = (lines.lastIndex(of: "synced") ?? -1) + 1
    return Array(lines[start...]).filter { !$0.hasPrefix("ack ") }
  }

  /// Each kill point of both kinds of compaction: the one that empties the journal (`defaults.compact.*`, a new
  /// generation) and the one that keeps it (`defaults.snapshot.*`, what `synchronize()` and most compactions do).
  @Test(arguments: [
    "defaults.compact.snapshotWritten", "defaults.compact.generationBumped", "defaults.compact.exportWritten",
    "defaults.snapshot.writing", "defaults.snapshot.written", "defaults.snapshot.recorded",
  ])
  func aCompactorKilledAtAnyPointLosesNoAcknowledgedWrite(point: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    // A long-lived process: it loads the suite and compacts it, so it last saw (generation G, length 0). It reads
    // first without the lock (the header alone tells it what changed), then synchronizes and reads again.
    let long = try Child(
      .defaultsScript(
        suite: "w", steps: [.set("base", 1), .rewind, .say("loaded"), .wait("go"), .dump, .sync, .dump]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "loaded" } != nil)
    // Another writes a, b and c (acknowledged), then dies inside its compaction.
    let compaction: DefaultsStep = point.hasPrefix("defaults.compact.") ? .rewind : .sync
    let dying = try Child(
      .defaultsScript(suite: "w", steps: [.set("a", 1), .set("b", 2), .set("c", 3), compaction, .say("survived")]),
      root: root.path, group: id,
      environment: ["GROUPCONTAINER_FAULT_POINT": point])
    #expect(await dying.exit() != 0)
    #expect(dying.output == ["ack a", "ack b", "ack c"], "stderr: \(dying.errors.text)")
    // A new process reads everything at once (from the files as the dead one left them).
    let expected = ["a 1", "b 2", "base 1", "c 3", "end"]
    let early = try Child(.defaultsScript(suite: "w", steps: [.dump]), root: root.path, group: id)
    #expect(await early.exit() == 0)
    #expect(early.output == expected, "stderr: \(early.errors.text)")
    // The long-lived process synchronizes (takes the dead process's lock over) and reads everything.
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await long.exit() == 0)
    let loaded = (long.output.firstIndex(of: "loaded") ?? 0) + 1
    #expect(Array(long.output[loaded...].prefix(expected.count)) == expected, "read without the lock")
    #expect(lastDump(long) == expected, "stderr: \(long.errors.text)")
    // So does a new process, and the export holds it too.
    let fresh = try Child(.defaultsScript(suite: "w", steps: [.dump]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == expected)
    let plist = try PropertyListValue(
      bytes: Array(Data(contentsOf: container.preferencesURL.appendingPathComponent("w.plist"))))
    #expect(plist.dictionaryValue?.keys.sorted() == ["a", "b", "base", "c"])
    withExtendedLifetime(root) {}
  }

  /// A seqlock reader: a long-lived process loads (generation G, committed C) from the header and pauses before it
  /// reads the journal (`defaults.read.headerLoaded`); meanwhile another process empties the journal (G + 1) and
  /// writes an 8 KB record over its start. The reader's bytes are then the middle of that record: only loading the
  /// generation again tells it, and it reads again from the snapshot, never decoding them as records.
  @Test func aReaderPausedWhileAnotherEmptiesAndOverwritesTheJournalNeverTrustsThoseBytes() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let seed = try Child(
      .defaultsScript(suite: "seq", steps: [.set("a", 1), .set("b", 2), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.read.headerLoaded"
    let reader = try Child(
      .defaultsScript(suite: "seq", steps: [.dump, .wait("next"), .dump, .unreadable]), root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.read.headerLoaded", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await reader.line { $0 == "end" } != nil)
    let appender = try Child(.defaultsScript(suite: "seq", steps: [.set("k", 1)]), root: root.path, group: id)
    #expect(await appender.exit() == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/next", contents: nil))
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the reader never paused")
    let rewinder = try Child(
      .defaultsScript(suite: "seq", steps: [.rewind, .fill("big", count: 1, bytes: 8192)]), root: root.path, group: id)
    #expect(await rewinder.exit() == 0)
    try FileManager.default.removeItem(atPath: point)
    #expect(await reader.exit() == 0)
    #expect(
      Array(reader.output.suffix(6)) == ["a 1", "b 2", "big0 8192", "k 1", "end", "unreadable 0"],
      "stderr: \(reader.errors.text)")
  }

  /// A rewind in the background (`moveTail`: the records appended while the image was built move to the start of
  /// the journal, in a new generation) killed at each point: while the bytes move, after the committed length is
  /// set back, after the generation is bumped. A process that last saw the old generation near its start (length
  /// 0 after its own rewind) and new processes read every acknowledged write; the next lock holder finishes the
  /// move. 3,000 sets of 4 KB: past the 8 MiB rewind threshold, so a background compaction empties the journal.
  /// Mutant: the next lock holder not finishing a move (`finishMove` in `withLock` left out) — at `committed` the
  /// long-lived process applied the moved records as if they followed its own, and lost the others.
  ///
  /// Whether a background rewind comes at all depends on the race between the fill and the background build (a
  /// rewind needs the build to end with the journal past the threshold and the tail no longer than what it holds):
  /// on a busy machine a run sometimes ended its 3,000 sets without one ("survived", nothing lost). Such a run is
  /// no finding; the scenario is set up again, up to 4 times, and one of them must reach the point.
  @Test(arguments: ["defaults.rewind.moving", "defaults.rewind.committed", "defaults.rewind.bumped"])
  func aRewindInTheBackgroundKilledAtAnyPointLosesNoAcknowledgedWrite(point: String) async throws {
    var root: TestRoot
    var id: String
    var long: Child
    var dying: Child
    var attempts = 0
    repeat {
      attempts += 1
      root = try TestRoot()
      id = try root.container().identifier
      long = try Child(
        .defaultsScript(suite: "w", steps: [.set("base", 1), .rewind, .say("loaded"), .wait("go"), .sync, .dump]),
        root: root.path, group: id)
      #expect(await long.line { $0 == "loaded" } != nil)
      dying = try Child(
        .defaultsScript(suite: "w", steps: [.fillAcked("k", count: 3000, bytes: 4000), .settle, .say("survived")]),
        root: root.path, group: id, environment: ["GROUPCONTAINER_FAULT_POINT": point])
      guard await dying.exit() == 0, dying.output.last == "survived", attempts < 4 else { break }
      long.kill()
    } while true
    #expect(dying.process.terminationStatus != 0, "no background rewind in \(attempts) runs")
    let acked = dying.output.filter { $0.hasPrefix("ack ") }.count
    #expect(acked > 2000 && !dying.output.contains("survived"), "\(dying.output.suffix(3))")
    // Every acknowledged key, and nothing but a prefix of the keys set (the journal keeps commit order).
    func check(_ lines: [String], _ who: String) {
      let keys = Set(lines.filter { $0.hasPrefix("k") })
      #expect(keys.count >= acked, "\(who): \(keys.count) keys of \(acked) acknowledged")
      let missing = (0..<keys.count).map { "k\($0) 4000" }.filter { !keys.contains($0) }
      #expect(missing.isEmpty, "\(who): \(missing.count) missing, first \(missing.prefix(3))")
      #expect(lines.contains("base 1") && lines.last == "end", "\(who): \(lines.suffix(2))")
    }
    let early = try Child(.defaultsScript(suite: "w", steps: [.dump]), root: root.path, group: id)
    #expect(await early.exit() == 0)
    check(early.output, "a new process")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await long.exit() == 0)
    check(lastDump(long), "the long-lived process")
    let fresh = try Child(.defaultsScript(suite: "w", steps: [.set("after", 1), .dump]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    check(fresh.output.filter { !$0.hasPrefix("ack ") }, "a writer after")
    withExtendedLifetime(root) {}
  }

  @Test func outsideReadModifyWritesWhileFourProcessesWriteLoseNothing() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: "edited", container: container)
    try defaults.set(0, forKey: "seed")
    try defaults.synchronize()
    let plist = container.preferencesURL.appendingPathComponent("edited.plist").path
    let stress = Task {
      try await groupctl([
        "stress", "defaults", container.identifier, "--root", root.path, "--writers", "4", "--keys", "3000",
        "--increments", "300", "--suite", "edited",
      ])
    }
    // plistlib's read-modify-write, in place, as scripts do: it adds one key and writes back every other value
    // as it read it — stale by then. Each edit is waited for until the export holds it: an in-place write into a
    // file that a compaction is replacing at that instant goes to the replaced file (documented; not this test).
    // A copy read before an export replaced the file under it holds values the suite no longer shows: that edit
    // is kept aside and reported, never applied nor lost (OutsideEditBaseTests); the tool then edits again, as a
    // user told of it would. What fails here is an edit neither applied nor kept aside.
    for i in 0..<5 {
      var applied = false
      for _ in 0..<5 where !applied {
        let keptBefore = defaults.unappliedOutsideEdits.count
        try await runPython(
          """
          import plistlib, sys
          d = plistlib.load(open(sys.argv[1], 'rb'))
          d['edit' + sys.argv[2]] = int(sys.argv[2])
          plistlib.dump(d, open(sys.argv[1], 'wb'), fmt=plistlib.FMT_BINARY)
          """, plist, "\(i)")
        // Python wrote in place; the suite's export replaces the file (a new inode) once it has applied the edit.
        let edited = try FileManager.default.attributesOfItem(atPath: plist)[.systemFileNumber] as? Int
        var keptAside = false
        // Settled: applied (this process reads it) or kept aside. The export shows it after `synchronize()` and 5 s
        // after writes stop (checked at the end), not while four writers go on: under load an export another process
        // pinned before the edit can take minutes to be redone.
        let settled = await eventually {
          keptAside = defaults.unappliedOutsideEdits.count > keptBefore
          return keptAside || defaults.integer(forKey: "edit\(i)") == i
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path).sorted()) ?? []
        let inode = (try? FileManager.default.attributesOfItem(atPath: plist)[.systemFileNumber] as? Int) ?? -1
        #expect(
          settled,
          "edit\(i) was neither applied nor kept aside: this process reads \(String(describing: defaults.object(forKey: "edit\(i)"))), the export's inode is \(inode) (\(edited ?? -1) after the edit), files: \(names)"
        )
        applied = !keptAside && defaults.integer(forKey: "edit\(i)") == i
        if !settled { break }
      }
      #expect(applied, "edit\(i) was not applied; kept aside: \(defaults.unappliedOutsideEdits)")
    }
    let result = try await stress.value
    try? result.err.write(toFile: "/tmp/stress-err.log", atomically: true, encoding: .utf8)
    let last = result.out.split(separator: "\n").last.map(String.init) ?? ""
    #expect(result.status == 0, "\(result.out)\n\(result.err)")
    #expect(last.contains(" lost=0 "), "\(last)")
    #expect(last.contains("counter=1200/1200"), "\(last)")
    for i in 0..<5 { #expect(defaults.integer(forKey: "edit\(i)") == i, "edit\(i)") }
    // The export, after `synchronize()`, shows every edit (a tool reading it now sees them all).
    try defaults.synchronize()
    let exported = try PropertyListValue(bytes: Array(Data(contentsOf: URL(fileURLWithPath: plist)))).dictionaryValue
    for i in 0..<5 { #expect(exported?["edit\(i)"] == .integer(PropertyListInteger(i)), "the export lacks edit\(i)") }
    #expect(defaults.integer(forKey: "seed") == 0 && defaults.object(forKey: "seed") != nil)
  }

  /// A tool writing the export in place (plistlib: truncate, encode, write) while a compaction replaces it: the
  /// compaction finds the replaced file empty, and the tool's bytes land in it afterwards. The compaction reads it
  /// again until it parses and commits the edit (it used to give the edit up). Paused at
  /// `defaults.export.replacing` (`FaultPoint.pause`) so the tool truncates inside that window.
  /// Suite `half` holds a=1; a child runs `set:b=2`, `sync` and then `after`, its compaction paused just before it
  /// replaces the export; meanwhile a tool opens the export, truncating it (plistlib's `open(path, 'wb')`). Returns
  /// the child (running on) and the tool's handle, to write into the replaced file.
  func toolTruncatingTheExportDuringACompaction(
    _ root: TestRoot, then after: [DefaultsStep], environment: [String: String] = [:]
  ) async throws -> (compactor: Child, tool: FileHandle?) {
    let id = try root.container().identifier
    let seed = try Child(.defaultsScript(suite: "half", steps: [.set("a", 1), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0)
    let plist = try root.container().preferencesURL.appendingPathComponent("half.plist").path
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.export.replacing"
    let compactor = try Child(
      .defaultsScript(suite: "half", steps: [.set("b", 2), .sync] + after), root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.export.replacing", "GROUPCONTAINER_PAUSE_DIR": pauses]
        .merging(environment) { $1 })
    #expect(
      await eventually { FileManager.default.fileExists(atPath: point) }, "the compaction never reached the export")
    let tool = FileHandle(forWritingAtPath: plist)
    try tool?.truncate(atOffset: 0)
    try FileManager.default.removeItem(atPath: point)
    return (compactor, tool)
  }

  /// An export pinned before another process applied a tool's edit is never published as current: here the
  /// exporter pauses after pinning; a reader that opens the suite meanwhile applies the tool's edit (and exports
  /// nothing); the export the exporter then publishes must hold the edit. Mutant: the exporter's check of the edits
  /// applied since its pin removed → the export at the name lacks `tool` and counts as current (nobody rewrites it).
  @Test func anExportPinnedBeforeAnAppliedEditIsNotPublishedWithoutIt() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let seed = try Child(.defaultsScript(suite: "pin", steps: [.set("a", 1), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0)
    let plist = try root.container().preferencesURL.appendingPathComponent("pin.plist").path
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.export.pinned"
    let exporter = try Child(
      .defaultsScript(suite: "pin", steps: [.set("b", 2), .sync]), root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.export.pinned", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the export was never pinned")
    // The tool edits the export it read (a 1), adding its key; a reader opening the suite applies it.
    try Data(PropertyListValue.dictionary(["a": 1, "tool": 7]).encoded(as: .binary)).write(
      to: URL(fileURLWithPath: plist + ".tool"))
    #expect(rename(plist + ".tool", plist) == 0)
    let reader = try Child(.defaultsScript(suite: "pin", steps: [.dump]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output.contains("tool 7"), "\(reader.output)")
    try FileManager.default.removeItem(atPath: point)
    #expect(await exporter.exit() == 0)
    let exported = try PropertyListValue(bytes: Array(Data(contentsOf: URL(fileURLWithPath: plist)))).dictionaryValue
    #expect(exported?["tool"] == .integer(7) && exported?["b"] == .integer(2), "\(String(describing: exported))")
    withExtendedLifetime(root) {}
  }

  /// A tool renaming its edit over the export after the exporter judged the name and just before it publishes
  /// (paused at `defaults.export.replacing`): the export takes the name by exchange, so the tool's file is
  /// displaced, not unlinked, and judged. Mutant: a plain rename over the name (as before) → the edit is gone.
  @Test func anEditRenamedOverTheExportAsItIsPublishedIsApplied() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let seed = try Child(.defaultsScript(suite: "swap", steps: [.set("a", 1), .sync]), root: root.path, group: id)
    #expect(await seed.exit() == 0)
    let plist = try root.container().preferencesURL.appendingPathComponent("swap.plist").path
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.export.replacing"
    let exporter = try Child(
      .defaultsScript(suite: "swap", steps: [.set("b", 2), .sync]), root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.export.replacing", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the export never reached its rename")
    try Data(PropertyListValue.dictionary(["a": 1, "tool": 7]).encoded(as: .binary)).write(
      to: URL(fileURLWithPath: plist + ".tool"))
    #expect(rename(plist + ".tool", plist) == 0)
    try FileManager.default.removeItem(atPath: point)
    #expect(await exporter.exit() == 0)
    var dump: [String] = []
    let deadline = ContinuousClock.now + .seconds(Wait.condition)
    while ContinuousClock.now < deadline {
      let reader = try Child(.defaultsScript(suite: "swap", steps: [.dump]), root: root.path, group: id)
      #expect(await reader.exit() == 0)
      dump = reader.output
      if dump.contains("tool 7") { break }
      try await Task.sleep(for: .milliseconds(100))
    }
    #expect(dump == ["a 1", "b 2", "tool 7", "end"], "stderr: \(exporter.errors.text)")
    withExtendedLifetime(root) {}
  }

  @Test func anEditWrittenIntoAnExportBeingReplacedIsApplied() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (compactor, tool) = try await toolTruncatingTheExportDuringACompaction(root, then: [.wait("done")])
    #expect(await compactor.line { $0 == "synced" } != nil)
    // Now it writes what it read, plus its key: into the file the compaction replaced.
    try tool?.write(contentsOf: Data(PropertyListValue.dictionary(["a": 1, "tool": 7]).encoded(as: .binary)))
    try tool?.close()
    // Each look is a new process reading the suite (a reader that exits).
    var dump: [String] = []
    let deadline = ContinuousClock.now + .seconds(Wait.condition)
    while ContinuousClock.now < deadline {
      let reader = try Child(.defaultsScript(suite: "half", steps: [.dump]), root: root.path, group: id)
      #expect(await reader.exit() == 0)
      dump = reader.output
      if dump.contains("tool 7") { break }
      try await Task.sleep(for: .milliseconds(100))
    }
    #expect(dump == ["a 1", "b 2", "tool 7", "end"], "stderr: \(compactor.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/done", contents: nil))
    #expect(await compactor.exit() == 0)
  }

  /// The same, but the compacting process synchronizes and exits right after: the replaced file was reachable only
  /// through its descriptor, so `synchronize()` waits for the edit (`replacedEdits`) before it returns.
  @Test func anEditWrittenIntoAnExportBeingReplacedSurvivesTheCompactorsExit() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (compactor, tool) = try await toolTruncatingTheExportDuringACompaction(root, then: [.say("leaving"), .sync])
    #expect(await compactor.line { $0 == "leaving" } != nil)
    // The compactor is in its last synchronize() now, about to exit; the tool writes.
    try tool?.write(contentsOf: Data(PropertyListValue.dictionary(["a": 1, "tool": 7]).encoded(as: .binary)))
    try tool?.close()
    #expect(await compactor.exit() == 0)
    let reader = try Child(.defaultsScript(suite: "half", steps: [.dump]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["a 1", "b 2", "tool 7", "end"], "stderr: \(compactor.errors.text)")
  }

  /// The same, but the compacting process is killed right after it renamed the new export over the one the tool
  /// is writing: the replaced file keeps a second name (`<suite>.plist.replaced-…`), and the next process that
  /// exports applies the tool's write from it. Mutant: no second name (the tool's key was lost with the file).
  @Test func anEditWrittenIntoAnExportBeingReplacedSurvivesTheCompactorsDeath() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (compactor, tool) = try await toolTruncatingTheExportDuringACompaction(
      root, then: [.say("survived")], environment: ["GROUPCONTAINER_FAULT_POINT": "defaults.compact.exportWritten"])
    #expect(await compactor.exit() != 0)
    #expect(!compactor.output.contains("survived"))
    try tool?.write(contentsOf: Data(PropertyListValue.dictionary(["a": 1, "tool": 7]).encoded(as: .binary)))
    try tool?.close()
    let reader = try Child(.defaultsScript(suite: "half", steps: [.sync, .dump]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["synced", "a 1", "b 2", "tool 7", "end"], "stderr: \(reader.errors.text)")
    // The tool's write was taken from its second name (removed once judged). What may be left are second names of
    // exports the reader replaced itself, untouched (their identity is still the one in their name; they expire).
    let prefs = try root.container().preferencesURL.path
    let written = try FileManager.default.contentsOfDirectory(atPath: prefs).filter { name in
      guard name.contains(".plist.replaced-") else { return false }
      let fields = name.split(separator: "-").suffix(4).compactMap { Int64($0) }
      var st = stat()
      guard fields.count == 4, stat(prefs + "/" + name, &st) == 0 else { return true }
      return Int64(st.st_ino) != fields[0] || Int64(st.st_size) != fields[1]
        || Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec) != fields[2]
    }
    #expect(written.isEmpty, "\(written)")
  }

  /// A child that sets `a0`…`a29999` in `suite` (over 1 MiB of journal: a compaction in the background), then
  /// `settle` (waits for it) and `count:a`; its compaction paused before its install (`FaultPoint.pause`) until the
  /// returned file is removed.
  func compactionPausedBeforeItsInstall(_ root: TestRoot, suite: String) async throws -> (Child, point: String) {
    let id = try root.container().identifier
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.compaction.installing"
    let child = try Child(
      .defaultsScript(suite: suite, steps: [.fill("a", count: 30000, bytes: 0), .settle, .count("a")]), root: root.path,
      group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.compaction.installing", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(
      await eventually { FileManager.default.fileExists(atPath: point) }, "the compaction never reached its install")
    return (child, point)
  }

  /// `synchronize()` builds its image without the lock: while one process's synchronize is paused just before its
  /// install, another process sets and exits; then the synchronize installs and both values are there. Mutant:
  /// the image built with the lock held (as before: a set waited 272 ms behind a synchronize of 400,000 keys) — the
  /// other process never got the lock.
  @Test func aSynchronizeBuildsItsImageWithoutTheLock() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.compaction.installing"
    let syncing = try Child(
      .defaultsScript(suite: "sync", steps: [.set("a", 1), .sync, .dump]), root: root.path, group: id,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.compaction.installing", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(
      await eventually { FileManager.default.fileExists(atPath: point) }, "synchronize() never reached its install")
    let other = try Child(.defaultsScript(suite: "sync", steps: [.set("b", 2)]), root: root.path, group: id)
    #expect(await other.exit() == 0, "a set waited for the synchronize's build")
    try FileManager.default.removeItem(atPath: point)
    #expect(await syncing.exit() == 0)
    #expect(syncing.output.suffix(3) == ["a 1", "b 2", "end"], "\(syncing.output)")
  }

  /// A compactor stopped with its claim (here paused before its install; Ctrl-Z or a debugger do the same) holds
  /// the others' compactions back for `SuiteCompactor.claimDuration` (10 s) only: then a writer's set claims and
  /// compacts, and the stopped one, resumed, finds its image overtaken and drops it. Mutants: a claim that never
  /// expires (the second writer installed no compaction: the journal would grow until the last-resort rewind); a
  /// claim ignored (the first writer compacted).
  ///
  /// The first writer takes claims to hold for an hour (the test hook `GROUPCONTAINER_DEFAULTS_CLAIM_SECONDS`):
  /// with the real 10 s, its 2 MB took longer on a busy machine, the claim expired under it and it compacted. The
  /// second one, started 10 s after the claim was taken, judges by the real duration.
  @Test func aStoppedCompactorsClaimExpires() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (stopped, point) = try await compactionPausedBeforeItsInstall(root, suite: "claim")
    let claimed = ContinuousClock.now  // the claim was taken before its compaction paused
    // Another writer: 2 MB of journal while the claim holds (no compaction).
    let held = try Child(
      .defaultsScript(suite: "claim", steps: [.fill("b", count: 50000, bytes: 0), .compactions]), root: root.path,
      group: id, environment: ["GROUPCONTAINER_DEFAULTS_CLAIM_SECONDS": "3600"])
    #expect(await held.exit() == 0, "stderr: \(held.errors.text)")
    #expect(held.output.last == "compactions 0", "a compaction ran while the claim held: \(held.output)")
    // The rule's duration passes (later only makes it surer), then a writer adds more.
    try? await Task.sleep(until: claimed + .seconds(10.5), clock: .continuous)
    let writer = try Child(
      .defaultsScript(suite: "claim", steps: [.fill("c", count: 150000, bytes: 0), .settle, .compactions]),
      root: root.path, group: id)
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    #expect(writer.output.last != "compactions 0", "no compaction after the claim expired: \(writer.output.suffix(3))")
    try FileManager.default.removeItem(atPath: point)
    #expect(await stopped.exit() == 0)
    let reader = try Child(
      .defaultsScript(suite: "claim", steps: [.count("a"), .count("b"), .count("c")]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["count 30000", "count 50000", "count 150000"], "stderr: \(reader.errors.text)")
  }

  /// A compaction built in the background is installed only over the snapshot it was built from, in its
  /// generation: here another process writes `x` and empties the journal (a new snapshot, a new generation) while
  /// the first one's image — built before `x` — waits to be installed. Installed anyway (the mutant without the
  /// check), it replaced the newer snapshot and `x` was gone for every new process.
  @Test func aBackgroundCompactionOvertakenByAnotherIsDropped() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (slow, point) = try await compactionPausedBeforeItsInstall(root, suite: "bg")
    let other = try Child(.defaultsScript(suite: "bg", steps: [.set("x", 1), .rewind]), root: root.path, group: id)
    #expect(await other.exit() == 0, "stderr: \(other.errors.text)")
    try FileManager.default.removeItem(atPath: point)
    #expect(await slow.exit() == 0)
    #expect(slow.output.suffix(2) == ["settled", "count 30000"], "\(slow.output)")
    let reader = try Child(.defaultsScript(suite: "bg", steps: [.count("x"), .count("a")]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["count 1", "count 30000"], "stderr: \(reader.errors.text)")
  }

  @Test(arguments: ["truncate", "delete"])
  func aDamagedJournalNeverCostsTheSynchronizedSnapshot(damage: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let writer = try Child(
      .defaultsScript(suite: "j", steps: [.fill("s", count: 100, bytes: 0), .sync, .fill("t", count: 50, bytes: 0)]),
      root: root.path, group: id)
    #expect(await writer.exit() == 0)
    let journal = container.preferencesURL.appendingPathComponent("j.journal").path
    if damage == "truncate" {
      #expect(truncate(journal, 0) == 0)
    } else {
      try FileManager.default.removeItem(atPath: journal)
    }
    // A new process opens the suite: the synchronized keys are all there (the journal's may be gone with it).
    let reader = try Child(
      .defaultsScript(suite: "j", steps: [.count("s"), .set("after", 1), .count("after")]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["count 100", "ack after", "count 1"], "stderr: \(reader.errors.text)")
    // And it stays so for the next one.
    let next = try Child(
      .defaultsScript(suite: "j", steps: [.count("s"), .count("after")]), root: root.path, group: id)
    #expect(await next.exit() == 0)
    #expect(next.output == ["count 100", "count 1"])
    withExtendedLifetime(root) {}
  }

  /// The issue's two cases: 600,000 keys of 16 bytes (1.2 million values) and 20,000 of 4 KB (82 MB).
  ///
  /// Written in commits of 10,000 keys, then synchronized by another process that wrote nothing: in one process
  /// (a commit per key, then `.sync`) the writer took 46 s of CPU in a debug build, 150 s at load 10 — past the
  /// 300 s exit limit at load 25 — a third of it an idle compaction (5 s after the last set, while the
  /// synchronize went on) that wrote the 600,000-key export a second time. Now 14 s and 16 s in two processes.
  /// Limits for hangs, sized for a busy machine: the syncer took 241 s (of the default 300 s exit limit) at load
  /// 15–19, and the 600,000-key case 303 s of its suite's 8-minute slot at load 12–14.
  @Test(.runSlot(.minutes(20)), arguments: [(600_000, 16), (20_000, 4096)])
  func suitesOverTheOldLimitsAreReadBackWhole(keys: Int, bytes: Int) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let limit = 3 * Wait.exit
    let writer = try Child(
      .defaultsScript(suite: "big", steps: [.fillInBatches("k", count: keys, bytes: bytes, batch: 10_000)]),
      root: root.path, group: id)
    #expect(await writer.exit(timeout: limit) == 0, "stderr: \(writer.errors.text)")
    // The compaction of the whole suite, refused over the limits (0.1.0's: the mutant): it must succeed.
    let syncer = try Child(.defaultsScript(suite: "big", steps: [.sync]), root: root.path, group: id)
    #expect(await syncer.exit(timeout: limit) == 0, "stderr: \(syncer.errors.text)")
    let reader = try Child(.defaultsScript(suite: "big", steps: [.count("k")]), root: root.path, group: id)
    #expect(await reader.exit(timeout: limit) == 0)
    #expect(reader.output == ["count \(keys)"], "stderr: \(reader.errors.text)")
    let files = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(!files.contains { $0.contains("corrupt") }, "\(files)")
    withExtendedLifetime(root) {}
  }

  /// Many keys sharing one value make a small image (the value is stored once), and every compaction keeps it so:
  /// a compaction copies the image's entries as they are (a shared value stays shared, nothing is decoded or
  /// encoded again) and stores a new value once however many keys it is set for. So a compaction costs what its
  /// bytes are, and sets of identical values cost no more than sets of distinct ones (the old binary-plist
  /// snapshot took 40 MB of encoding for a 100 KB file). 2,000 keys of one 4 KB value, then 600 sets more (2.4 MB
  /// of journal: a compaction): the snapshot stays under 1 MiB.
  @Test func identicalValuesAreStoredOnceThroughEveryCompaction() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let seed = try Child(
      .defaultsScript(suite: "same", steps: [.fillSame("k", count: 2000, bytes: 4096), .sync]), root: root.path,
      group: id)
    #expect(await seed.exit() == 0, "stderr: \(seed.errors.text)")
    let snapshot = container.preferencesURL.appendingPathComponent("same.snapshot").path
    let before = try #require(try? FileManager.default.attributesOfItem(atPath: snapshot)[.systemFileNumber] as? UInt64)
    let size = try #require(try? FileManager.default.attributesOfItem(atPath: snapshot)[.size] as? Int)
    #expect(size < 1 << 20, "the value is not stored once: a \(size)-byte snapshot")
    let writer = try Child(
      .defaultsScript(suite: "same", steps: [.fillSame("k", count: 600, bytes: 4096), .settle, .count("k")]),
      root: root.path, group: id)
    #expect(await writer.exit() == 0)
    #expect(writer.output == ["filled k 600", "settled", "count 2000"], "stderr: \(writer.errors.text)")
    let after = try FileManager.default.attributesOfItem(atPath: snapshot)
    #expect(after[.systemFileNumber] as? UInt64 != before, "600 sets of 4 KB did not compact")
    let sizeAfter = try #require(after[.size] as? Int)
    #expect(sizeAfter < 1 << 20, "a compaction stored the shared value once per key: a \(sizeAfter)-byte snapshot")
  }

  /// Most compactions keep the journal: the other processes go on reading it where they were and never read the
  /// suite again because of them (16 writers each re-parsed the snapshot after every compaction: 0.23× the
  /// throughput of 4). A reader that loaded the suite, another process's 40,000 sets (1.5 MB of journal: a
  /// compaction), and the reader's count: the reader has still read one snapshot, and sees every key.
  ///
  /// The reader writes nothing (`seedSuite` writes the suite first): a process that wrote compacts it once idle
  /// for `DefaultsStore.idleCompaction` (5 s), which on a busy machine fell while the writer went on, and its
  /// catch-up then reloaded the writer's snapshot.
  @Test func anotherProcesssCompactionCostsReadersNoReload() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    try await seedSuite("r", keys: 1000, root: root)
    let reader = try Child(
      .defaultsScript(suite: "r", steps: [.count("k"), .loads, .wait("go"), .count("x"), .loads]),
      root: root.path, group: id)
    #expect(await reader.line { $0.hasPrefix("loads ") } == "loads 1")
    let snapshot = container.preferencesURL.appendingPathComponent("r.snapshot").path
    let before = try FileManager.default.attributesOfItem(atPath: snapshot)[.systemFileNumber] as? UInt64
    let writer = try Child(
      .defaultsScript(suite: "r", steps: [.fill("x", count: 40000, bytes: 0), .settle]), root: root.path, group: id)
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    let after = try FileManager.default.attributesOfItem(atPath: snapshot)[.systemFileNumber] as? UInt64
    #expect(after != before, "the writer did not compact")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.exit() == 0)
    #expect(reader.output.suffix(2) == ["count 40000", "loads 1"], "\(reader.output)")
    // A new process reads the snapshot and the journal past it.
    let fresh = try Child(.defaultsScript(suite: "r", steps: [.count("k"), .count("x")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 1000", "count 40000"])
  }

  /// A process far behind (the journal past it over 4 times the snapshot) reads the snapshot instead: 50,000
  /// sets of 10 keys by another process (2 MB of journal, a 200-byte suite), then the reader's count — its second
  /// snapshot read — has every key.
  ///
  /// The reader writes nothing, as in `anotherProcesssCompactionCostsReadersNoReload`: once idle for 5 s, a
  /// process that wrote caught up and compacted in the background while the writer went on (a busy machine),
  /// and was then no longer far behind ("loads 1").
  @Test func aProcessFarBehindReadsTheSnapshotInstead() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    try await seedSuite("far", keys: 10, root: root)
    let reader = try Child(
      .defaultsScript(suite: "far", steps: [.count("k"), .loads, .wait("go"), .count("w0-k"), .count("k"), .loads]),
      root: root.path, group: id)
    #expect(await reader.line { $0.hasPrefix("loads ") } == "loads 1")
    #expect(try writeKeysInAnotherProcess(10, rounds: 5000, suite: "far", root: root) == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.exit() == 0)
    #expect(reader.output.suffix(3) == ["count 10", "count 10", "loads 2"], "\(reader.output)")
  }

  /// Writes `keys` integers `k0`… into `suite` and synchronizes it, in a process that then exits.
  func seedSuite(_ suite: String, keys: Int, root: TestRoot) async throws {
    let seed = try Child(
      .defaultsScript(suite: suite, steps: [.fill("k", count: keys, bytes: 0), .sync]), root: root.path,
      group: root.container().identifier)
    #expect(await seed.exit() == 0, "stderr: \(seed.errors.text)")
  }

  /// `groupctl stress defaults-writer`, run to its end: keys `w0-k0`… of `suite`, `rounds` times. Its exit status.
  func writeKeysInAnotherProcess(_ keys: Int, rounds: Int, suite: String, root: TestRoot) throws -> Int32? {
    try runTool(
      productsDirectory.appendingPathComponent("groupctl").path,
      [
        "stress", "defaults-writer", root.container().identifier, "--index", "0", "--keys", "\(keys)", "--rounds",
        "\(rounds)", "--increments", "0", "--suite", suite, "--root", root.path,
      ])
  }

  /// A reader of a growing suite does not keep every change it applied: once current, it takes the newer snapshot
  /// and the journal past it instead (`rebase`; the same state). 150,000 new keys by another process, read in one
  /// catch-up: the reader then holds only what the last compaction left in the journal. The rebase runs in the
  /// background (a read never does that O(journal) work: a reader stalled 1.15 s doing it), which `.settle` waits
  /// for. Mutant: no rebase (it held all 150,001 on an idle machine; on a busy one the writer's compactions may
  /// leave the reader to reload a newer snapshot instead, which holds as little, and the mutant passes).
  ///
  /// The reader writes nothing (`seedSuite` writes the suite first), as in
  /// `anotherProcesssCompactionCostsReadersNoReload`: a reader that wrote compacts once idle for 5 s, which on a
  /// busy machine fell while the writer went on and changed what the reader holds.
  @Test func aReaderOfAGrowingSuiteHoldsOnlyWhatIsPastTheSnapshot() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    try await seedSuite("grow", keys: 1, root: root)
    let reader = try Child(
      .defaultsScript(suite: "grow", steps: [.count("k"), .say("ready"), .wait("go"), .count("w0-k"), .settle, .held]),
      root: root.path, group: id)
    #expect(await reader.line { $0 == "ready" } != nil)
    #expect(try writeKeysInAnotherProcess(150_000, rounds: 1, suite: "grow", root: root) == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await reader.exit() == 0)
    #expect(reader.output.contains("count 150000"), "\(reader.output)")
    let held = reader.output.last.flatMap { Int($0.dropFirst("held ".count)) } ?? .max
    #expect(held < 100_000, "the reader holds \(held) changes over its image")
  }

  /// Where a kept journal's snapshot stands belongs to its generation: after a compaction that kept the journal
  /// (`sync`) and one that emptied it (`rewind`), the new generation's records from offset 0 are read by a new
  /// process, though the old point lies within them.
  @Test func theSnapshotPointOfAnOlderGenerationIsNotUsed() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let writer = try Child(
      .defaultsScript(
        suite: "g", steps: [.fill("a", count: 100, bytes: 0), .sync, .rewind, .fill("b", count: 300, bytes: 0)]),
      root: root.path, group: id)
    #expect(await writer.exit() == 0, "stderr: \(writer.errors.text)")
    let fresh = try Child(.defaultsScript(suite: "g", steps: [.count("a"), .count("b")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 100", "count 300"])
  }

  /// A plist put in place before the suite was first used is its starting state; a suite written by 0.1.0
  /// (header "GCDEFLT2", the plist as its snapshot) is migrated with its values.
  @Test(arguments: ["seeded", "legacy"])
  func aPlistFromBeforeBecomesTheState(kind: String) throws {
    let root = try TestRoot()
    let container = try root.container()
    let prefs = container.preferencesURL
    try FileManager.default.createDirectory(at: prefs, withIntermediateDirectories: true)
    let values: [String: PropertyListValue] = ["x": .integer(7), "name": .string("widget")]
    try Data(PropertyListValue.dictionary(values).encoded(as: .binary)).write(
      to: prefs.appendingPathComponent("\(kind).plist"))
    if kind == "legacy" {
      var header = [UInt8](repeating: 0, count: 4096)
      for (slot, value) in [(0, UInt64(0x3254_4c46_4544_4347)), (1, UInt64(3))] {
        for i in 0..<8 { header[slot * 8 + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) }
      }
      try Data(header).write(to: prefs.appendingPathComponent("legacy.lock"))
    }
    let defaults = try SharedDefaults(suiteName: kind, container: container)
    #expect(defaults.propertyListRepresentation() == values)
    try defaults.set(8, forKey: "x")
    try defaults.synchronize()
    let plist = try PropertyListValue(bytes: Array(Data(contentsOf: prefs.appendingPathComponent("\(kind).plist"))))
    #expect(plist.dictionaryValue?["x"] == .integer(8))
    #expect(FileManager.default.fileExists(atPath: prefs.appendingPathComponent("\(kind).snapshot").path))
  }
}

/// The internal snapshot damaged: a new process recovers from the export (the same bytes, when the header says
/// it is current) plus the journal, and moves the damaged file aside.
@Suite(.runSlot(.minutes(3))) struct DefaultsSnapshotDamageTests {
  @Test(arguments: ["garbage", "fifo", "directory"])
  func aDamagedSnapshotIsRecoveredFromTheExport(kind: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let writer = try Child(
      .defaultsScript(suite: "d", steps: [.fill("s", count: 20, bytes: 0), .sync, .set("late", 5)]), root: root.path,
      group: id)
    #expect(await writer.exit() == 0)
    let snapshot = container.preferencesURL.appendingPathComponent("d.snapshot").path
    try FileManager.default.removeItem(atPath: snapshot)
    switch kind {
    case "garbage": try Data("not a property list".utf8).write(to: URL(fileURLWithPath: snapshot))
    case "fifo": #expect(mkfifo(snapshot, 0o600) == 0)
    default: try FileManager.default.createDirectory(atPath: snapshot, withIntermediateDirectories: false)
    }
    let reader = try Child(
      .defaultsScript(suite: "d", steps: [.count("s"), .count("late")]), root: root.path, group: id)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["count 20", "count 1"], "stderr: \(reader.errors.text)")
    let files = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(files.contains { $0.hasPrefix("d.snapshot.corrupt-") }, "\(files)")
    withExtendedLifetime(root) {}
  }
}

/// A read never waits for another process: a process that holds the suite's lock and stops there (Ctrl-Z, a
/// breakpoint; here: inside an `update` that never returns) does not hold up readers, new or running.
///
/// Mutants this suite catches: reads catching up under the lock whenever something changed (0.1.0): both
/// readers hang behind the holder (`readersGoOnWhileAnotherProcessHoldsTheLock`); a writer taking `state` before
/// the suite's lock (0.1.0's order): a reader of the same process waits behind its own writer thread
/// (`aReaderDoesNotWaitBehindAWriterOfItsOwnProcess`).
@Suite(.runSlot(.minutes(3))) struct DefaultsReadsNeverWaitTests {
  @Test func readersGoOnWhileAnotherProcessHoldsTheLock() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    // A running reader, current at first.
    let running = try Child(
      .defaultsScript(
        suite: "held", steps: [.fill("k", count: 10, bytes: 0), .count("k"), .wait("go"), .count("k"), .count("late")]),
      root: root.path, group: id)
    #expect(await running.line { $0 == "count 10" } != nil)
    // Another process commits more, and compacts (a new generation for the running reader to reload).
    let writer = try Child(
      .defaultsScript(suite: "held", steps: [.fill("k", count: 30, bytes: 0), .sync, .set("late", 1)]), root: root.path,
      group: id)
    #expect(await writer.exit() == 0)
    // A third takes the lock and stays there.
    let holder = try Child(.defaultsHold(suite: "held"), root: root.path, group: id)
    defer { holder.kill() }
    #expect(await holder.line { $0 == "holding" } != nil)
    // The running reader catches up, and a new process reads the whole suite.
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await running.exit() == 0)
    #expect(running.output == ["filled k 10", "count 10", "count 30", "count 1"], "\(running.errors.text)")
    let fresh = try Child(
      .defaultsScript(suite: "held", steps: [.count("k"), .count("late")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 30", "count 1"])
    withExtendedLifetime(root) {}
  }

  @Test func aReaderDoesNotWaitBehindAWriterOfItsOwnProcess() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let process = try Child(
      .defaultsScript(
        suite: "own",
        steps: [.fill("k", count: 5, bytes: 0), .wait("go"), .backgroundSet("x", 1), .count("k"), .say("done")]),
      root: root.path, group: id)
    #expect(await process.line { $0 == "filled k 5" } != nil)
    let holder = try Child(.defaultsHold(suite: "own"), root: root.path, group: id)
    defer { holder.kill() }
    #expect(await holder.line { $0 == "holding" } != nil)
    // One thread of the process now waits for the lock to set x; another reads.
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await process.exit() == 0)
    #expect(process.output == ["filled k 5", "count 5", "done"])
    withExtendedLifetime(root) {}
  }
}

/// A nearly full disk: the journal grows by doubling, and when the doubling does not fit, by what the set needs.
///
/// Mutant this suite catches: no fallback (0.1.0): sets failed with ENOSPC once the next doubling did not fit,
/// with up to half the free space unused (`setsUseTheLastFreeSpace`).
@Suite(.runSlot(.minutes(3))) struct DefaultsNearlyFullDiskTests {
  @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
  func setsUseTheLastFreeSpace() throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "4m", name: "nearlyfull") else { return }
    defer { withExtendedLifetime(mounted) {} }
    let container = try GroupContainer(identifier: "group.com.example.tests", root: URL(fileURLWithPath: mounted.path))
    let defaults = try SharedDefaults(suiteName: "tight", container: container)
    try defaults.set(0, forKey: "first")
    // Leave about 900 KB free: the journal's doubling from 512 KB to 1 MB does not fit, what each set needs does.
    func freeBytes() throws -> Int {
      (try FileManager.default.attributesOfFileSystem(forPath: mounted.path)[.systemFreeSize] as? NSNumber)?.intValue
        ?? 0
    }
    let free = try freeBytes()
    try Data(repeating: 1, count: max(0, free - 900_000)).write(to: URL(fileURLWithPath: mounted.path + "/filler"))
    let left = try freeBytes()
    let value = Data(repeating: 7, count: 10_000)
    var stored = 0
    while stored < 200 {
      do { try defaults.set(value, forKey: "k\(stored)") } catch { break }
      stored += 1
    }
    // Everything but a few pages of the free space was used, and every stored value is there.
    #expect(stored * value.count >= left - 150_000, "stored \(stored) values of 10 KB with \(left) bytes free")
    #expect((0..<stored).allSatisfy { defaults.data(forKey: "k\($0)") == value })
  }

  /// The disk fills while compactions run in the background: the images they build do not fit (each fails, is
  /// logged, leaves no temp file), sets go on into the journal's allocated space and then fail with ENOSPC — and
  /// every set that returned is there, here and in another process; once space is freed, compaction and
  /// `synchronize()` work again.
  @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
  func compactionsThatDoNotFitLoseNothing() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "32m", name: "fills") else { return }
    defer { withExtendedLifetime(mounted) {} }
    let identifier = "group.com.example.tests"
    let container = try GroupContainer(identifier: identifier, root: URL(fileURLWithPath: mounted.path))
    let defaults = try SharedDefaults(suiteName: "fills", container: container)
    func value(_ i: Int) -> Data {
      Data(repeating: UInt8(i % 251), count: 10_000) + withUnsafeBytes(of: i) { Data($0) }
    }
    for i in 0..<250 { try defaults.set(value(i), forKey: "k\(i)") }
    defaults.waitForBackgroundWork()
    // Leave 600 KB: less than an image of the suite (2.5 MB), more than the journal still has allocated.
    let free =
      (try FileManager.default.attributesOfFileSystem(forPath: mounted.path)[.systemFreeSize] as? NSNumber)?.intValue
      ?? 0
    let filler = mounted.path + "/filler"
    try Data(repeating: 1, count: max(0, free - 600_000)).write(to: URL(fileURLWithPath: filler))
    var stored = 250
    var failure: (any Error)?
    while failure == nil && stored < 1_000 {
      do {
        try defaults.set(value(stored), forKey: "k\(stored)")
        stored += 1
      } catch {
        failure = error
      }
    }
    defaults.waitForBackgroundWork()
    #expect("\(failure.map { "\($0)" } ?? "no error")".contains("No space left on device"))
    #expect(stored > 300, "only \(stored) sets fitted")
    #expect((0..<stored).allSatisfy { defaults.data(forKey: "k\($0)") == value($0) })
    let preferences = container.preferencesURL.path
    #expect(try FileManager.default.contentsOfDirectory(atPath: preferences).filter { $0.hasPrefix(".gc-tmp-") } == [])
    let other = try Child(.defaultsKeys(suite: "fills"), root: mounted.path, group: identifier)
    #expect(await other.exit() == 0)
    #expect(other.output.count == stored + 1, "another process read \(other.output.count - 1) of \(stored) keys")
    // Space again: sets, a compaction and synchronize() work, and nothing is missing.
    try FileManager.default.removeItem(atPath: filler)
    for i in stored..<(stored + 120) { try defaults.set(value(i), forKey: "k\(i)") }
    try defaults.synchronize()
    let after = try Child(.defaultsKeys(suite: "fills"), root: mounted.path, group: identifier)
    #expect(await after.exit() == 0)
    #expect(after.output.count == stored + 121)
  }
}

/// A suite that no `SharedDefaults` uses any more is released: its mappings (and their SIGBUS guard slots, 4,096
/// for the process), descriptors, watch and registrations.
///
/// Mutant this suite catches: stores kept for the life of the process (0.1.0): the 2,049th suite fails to map
/// (guard slots gone) and descriptors grow by two per suite.
@Suite(.runSlot(.minutes(8))) struct DefaultsManySuitesTests {
  @Test func aProcessOpensThousandsOfSuitesOneAfterAnother() async throws {
    let root = try TestRoot()
    let container = try root.container()
    // This process's descriptors of files beneath this test's root (tests running beside it open their own).
    func descriptors() -> Int {
      let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
      return fds.filter {
        ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").hasPrefix(root.path)
      }.count
    }
    for i in 0..<2_100 {
      let defaults = try SharedDefaults(suiteName: "many\(i)", container: container)
      try defaults.set(i, forKey: "i")
    }
    // Kept stores would hold two descriptors each (4,200). Unused stores are released in the background, which a
    // loaded machine runs late: the bound has to hold once it has caught up.
    #expect(
      await eventually { descriptors() < 200 },
      "\(descriptors()) descriptors of the suites' files after 2,100 suites")
    for i in stride(from: 0, to: 2_100, by: 211) {
      #expect(try SharedDefaults(suiteName: "many\(i)", container: container).integer(forKey: "i") == i)
    }
  }
}

/// The journal removed (`rm`) while processes map it: every process ends up on one journal again (no process keeps
/// writing into the removed file, unseen by the others); a running process that maps the removed one hears of it
/// (inotify) and copies the committed records into a new file, so nothing is lost.
///
/// Mutant this suite catches: no journal check on the watcher's event (0.1.0): the long-lived process went on
/// appending to the removed file and its later write never reached other processes
/// (`aProcessThatStillMapsTheRemovedJournalCarriesItsRecordsOver`). `processesFollowOneJournalAfterItWasRemoved`
/// checks that every process converges on the new journal (the watcher's check and the header's journal inode,
/// checked under the lock, each suffice there).
@Suite(.runSlot(.minutes(3))) struct DefaultsRemovedJournalTests {
  @Test func aProcessThatStillMapsTheRemovedJournalCarriesItsRecordsOver() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let long = try Child(
      .defaultsScript(
        suite: "rm",
        steps: [
          .fill("a", count: 10, bytes: 0), .wait("go1"), .set("late", 1), .wait("go2"), .count("a"), .count("b"),
          .count("late"),
        ]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "filled a 10" } != nil)
    let journal = container.preferencesURL.appendingPathComponent("rm.journal").path
    try FileManager.default.removeItem(atPath: journal)
    // The running process puts a journal back, with its records.
    #expect(await eventually { FileManager.default.fileExists(atPath: journal) })
    #expect(FileManager.default.createFile(atPath: root.path + "/go1", contents: nil))
    #expect(await long.line { $0 == "ack late" } != nil)
    let other = try Child(
      .defaultsScript(suite: "rm", steps: [.fill("b", count: 5, bytes: 0)]), root: root.path, group: id)
    #expect(await other.exit() == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/go2", contents: nil))
    #expect(await long.exit() == 0)
    #expect(Array(long.output.suffix(3)) == ["count 10", "count 5", "count 1"], "\(long.errors.text)")
    let fresh = try Child(
      .defaultsScript(suite: "rm", steps: [.count("a"), .count("b"), .count("late")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 10", "count 5", "count 1"])
    withExtendedLifetime(root) {}
  }

  @Test func processesFollowOneJournalAfterItWasRemoved() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let long = try Child(
      .defaultsScript(
        suite: "rm2",
        steps: [
          .fill("a", count: 10, bytes: 0), .sync, .wait("go1"), .set("late", 1), .wait("go2"), .count("b"),
          .count("c"),
        ]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "synced" } != nil)
    // Removed and made again at once (as a tool that rewrites it would): the running process follows the new file.
    let journal = container.preferencesURL.appendingPathComponent("rm2.journal").path
    try FileManager.default.removeItem(atPath: journal)
    let first = try Child(
      .defaultsScript(suite: "rm2", steps: [.fill("b", count: 5, bytes: 0)]), root: root.path, group: id)
    #expect(await first.exit() == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/go1", contents: nil))
    #expect(await long.line { $0 == "ack late" } != nil)
    let second = try Child(
      .defaultsScript(suite: "rm2", steps: [.fill("c", count: 3, bytes: 0)]), root: root.path, group: id)
    #expect(await second.exit() == 0)
    #expect(FileManager.default.createFile(atPath: root.path + "/go2", contents: nil))
    #expect(await long.exit() == 0)
    #expect(Array(long.output.suffix(2)) == ["count 5", "count 3"], "\(long.errors.text)")
    // The synchronized keys were in the snapshot; what the removed journal held after them is all there too.
    let fresh = try Child(
      .defaultsScript(suite: "rm2", steps: [.count("a"), .count("b"), .count("c"), .count("late")]), root: root.path,
      group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 10", "count 5", "count 3", "count 1"])
    withExtendedLifetime(root) {}
  }
}

/// The suite's files removed with their directory (`rm -rf` of `Library/Preferences` or of the container) while
/// processes map them (DefaultsStore+RemovedFiles.swift): every running process moves onto the files at the names,
/// the removed files' final state is carried over once, and what was written to the new files first wins.
///
/// Mutants this suite catches, each built and seen failing: no move at all (before it, the long process's later
/// write went to the removed journal and the others found no suite) — every test; the carried keys set over the new
/// files' (no `s.values[key] == nil`) — `whatANewcomerWroteFirstWins`; no check of the mark at the lock (`locked`) —
/// `aStoppedProcessMovesAtItsNextWriteAfterAnotherMoved`; a new header filled in over the older snapshot instead of
/// given the final state as its snapshot — `onlyTheLockFileRemovedLeavesTheFinalStateExactly` (and three others);
/// the listener not started again after the move — `anObserverHearsWritesAfterTheMove`.
@Suite(.runSlot(.minutes(3))) struct DefaultsRemovedFilesTests {
  /// The header word `carriedFrom` of the suite's lock file now (0: nothing carried over yet, or no file).
  static func carriedFrom(_ container: GroupContainer, suite: String) -> UInt64 {
    let path = container.preferencesURL.appendingPathComponent("\(suite).lock").path
    guard let data = FileManager.default.contents(atPath: path), data.count >= 40 * 8 else { return 0 }
    return data.withUnsafeBytes { $0.load(fromByteOffset: 39 * 8, as: UInt64.self) }
  }

  @Test(arguments: ["Library/Preferences", ""])
  func aRunningProcessCarriesItsSuiteOverWhenItsDirectoryIsRemoved(removed: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let long = try Child(
      .defaultsScript(
        suite: "gone",
        steps: [
          .fill("a", count: 10, bytes: 0), .wait("go1"), .set("late", 1), .wait("go2"), .count("a"), .count("b"),
          .count("late"),
        ]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "filled a 10" } != nil)
    let target = removed.isEmpty ? container.path : container.path + "/" + removed
    try await removeTree(target)
    // The running process makes the files again and puts its state in them.
    #expect(await eventually { Self.carriedFrom(container, suite: "gone") != 0 }, "\(long.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go1", contents: nil))
    #expect(await long.line { $0 == "ack late" } != nil)
    let other = try Child(
      .defaultsScript(suite: "gone", steps: [.count("a"), .fill("b", count: 5, bytes: 0)]), root: root.path, group: id)
    #expect(await other.exit() == 0)
    #expect(other.output.first == "count 10", "\(other.output) \(other.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go2", contents: nil))
    #expect(await long.exit() == 0)
    #expect(Array(long.output.suffix(3)) == ["count 10", "count 5", "count 1"], "\(long.errors.text)")
    let fresh = try Child(
      .defaultsScript(suite: "gone", steps: [.count("a"), .count("b"), .count("late")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 10", "count 5", "count 1"], "\(fresh.errors.text)")
    withExtendedLifetime(root) {}
  }

  /// Only the lock file removed (`rm <suite>.lock`): the journal and an older snapshot stay at their names. The
  /// running process sets up a new header with a new journal (the old one is the removed header's) and its final
  /// state as the snapshot, exactly: a key removed since that older snapshot stays removed.
  @Test func onlyTheLockFileRemovedLeavesTheFinalStateExactly() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let long = try Child(
      .defaultsScript(
        suite: "lk",
        steps: [
          .fill("a", count: 10, bytes: 0), .sync, .remove("a5"), .say("removed"), .wait("go"),
          .set("late", 1),
        ]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "removed" } != nil)
    try FileManager.default.removeItem(atPath: container.preferencesURL.appendingPathComponent("lk.lock").path)
    #expect(await eventually { Self.carriedFrom(container, suite: "lk") != 0 }, "\(long.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await long.exit() == 0, "\(long.errors.text)")
    let fresh = try Child(
      .defaultsScript(suite: "lk", steps: [.count("a"), .read("a5"), .read("a6"), .read("late")]), root: root.path,
      group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 9", "read a5 nil", "read a6 6", "read late 1"], "\(fresh.errors.text)")
    withExtendedLifetime(root) {}
  }

  /// An observing process goes on hearing other processes' writes after it moved (its listener moves with it).
  @Test func anObserverHearsWritesAfterTheMove() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let watch = try Child(
      ["defaults", "watch", id, "watched", "--suite", "obs", "--root", root.path], executable: "groupctl")
    #expect(await watch.line { $0.contains("\"ready\"") } != nil)
    func heard(_ count: Int) async -> [String] {
      _ = await eventually { watch.output.filter { $0.contains("\"key\"") }.count >= count }
      return watch.output.filter { $0.contains("\"key\"") }
    }
    let first = try Child(.defaultsScript(suite: "obs", steps: [.set("watched", 1)]), root: root.path, group: id)
    #expect(await first.exit() == 0)
    await #expect(heard(1).count == 1)
    try await removeTree(container.path + "/Library/Preferences")
    #expect(await eventually { Self.carriedFrom(container, suite: "obs") != 0 }, "\(watch.errors.text)")
    let second = try Child(.defaultsScript(suite: "obs", steps: [.set("watched", 2)]), root: root.path, group: id)
    #expect(await second.exit() == 0)
    let lines = await heard(2)
    await watch.stop(SIGTERM)
    #expect(lines.count == 2, "\(lines) \(watch.errors.text)")
    #expect(lines.last?.contains("\"old\":1,\"new\":2") == true, "\(lines)")
    withExtendedLifetime(root) {}
  }

  /// A process that opens the suite after the removal, before the old one moved, writes to new files; the old
  /// state fills in only the keys they lack.
  @Test func whatANewcomerWroteFirstWins() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let long = try Child(
      .defaultsScript(suite: "first", steps: [.fill("a", count: 10, bytes: 0), .wait("go")]),
      root: root.path, group: id)
    #expect(await long.line { $0 == "filled a 10" } != nil)
    Glibc.kill(long.pid, SIGSTOP)
    try await removeTree(container.path + "/Library/Preferences")
    let newcomer = try Child(
      .defaultsScript(suite: "first", steps: [.set("a3", 100), .set("new", 7)]), root: root.path, group: id)
    #expect(await newcomer.exit() == 0, "\(newcomer.errors.text)")
    Glibc.kill(long.pid, SIGCONT)
    #expect(await eventually { Self.carriedFrom(container, suite: "first") != 0 }, "\(long.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    #expect(await long.exit() == 0)
    let fresh = try Child(
      .defaultsScript(suite: "first", steps: [.count("a"), .read("a3"), .read("a4"), .read("new")]), root: root.path,
      group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 10", "read a3 100", "read a4 4", "read new 7"], "\(fresh.errors.text)")
    withExtendedLifetime(root) {}
  }

  /// Two processes of the suite; one is stopped through the removal and the other moves. Resumed, the stopped one
  /// writes at once: the mark in the removed header moves it first, so its write reaches the new files (the
  /// carry-over is done and would not bring it).
  @Test func aStoppedProcessMovesAtItsNextWriteAfterAnotherMoved() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let mover = try Child(
      .defaultsScript(suite: "two", steps: [.fill("a", count: 10, bytes: 0), .wait("end")]), root: root.path, group: id)
    #expect(await mover.line { $0 == "filled a 10" } != nil)
    let stopped = try Child(
      .defaultsScript(suite: "two", steps: [.count("a"), .wait("go"), .set("fromStopped", 1), .count("a")]),
      root: root.path, group: id)
    #expect(await stopped.line { $0 == "count 10" } != nil)
    Glibc.kill(stopped.pid, SIGSTOP)
    try await removeTree(container.path + "/Library/Preferences")
    #expect(await eventually { Self.carriedFrom(container, suite: "two") != 0 }, "\(mover.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/go", contents: nil))
    Glibc.kill(stopped.pid, SIGCONT)
    #expect(await stopped.exit() == 0)
    #expect(stopped.output.suffix(2) == ["ack fromStopped", "count 10"], "\(stopped.errors.text)")
    #expect(FileManager.default.createFile(atPath: root.path + "/end", contents: nil))
    #expect(await mover.exit() == 0)
    let fresh = try Child(
      .defaultsScript(suite: "two", steps: [.count("a"), .read("fromStopped")]), root: root.path, group: id)
    #expect(await fresh.exit() == 0)
    #expect(fresh.output == ["count 10", "read fromStopped 1"], "\(fresh.errors.text)")
    withExtendedLifetime(root) {}
  }
}
