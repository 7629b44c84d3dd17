import Foundation
import PropertyList
import TestSupport
import Testing

/// Another tool's edit of `<suite>.plist`, read at one moment and written back later, across real processes (the
/// built `groupctl` and gc-test-helper `.defaultsScript`; this process never opens the suite, so it never judges
/// an edit itself): a committed value is never rolled back by a stale copy, an edit is never lost silently
/// (applied as the tool's change when that is certain, else kept aside as `<suite>.plist.unapplied-…` and
/// reported), and a process started after the edit reads it.
///
/// Mutants this suite catches (each run by hand, see the report of issue #32):
/// - the old double application (an edit judged in `writeExportAlone`'s first step judged again from the replaced
///   file, against the newer export's image): `aStaleEditNeverRollsBackACommittedValue` (1, 2 and 10 exports)
///   and the history test fail with `counter` rolled back;
/// - `ExportMirror.judge` ignoring the history (every difference applied): the same tests fail;
/// - `judgePendingEdit` not called when a process opens the suite: `aProcessStartedAfterTheEditReadsIt` fails;
/// - an untouched replaced export dropped after `keptExportGrace` whoever still has it open:
///   `anEditWrittenLongAfterTheExportWasReplacedIsApplied` fails;
/// - an unparsable file at the name quarantined at once whatever it looks like:
///   `aHalfWrittenEditIsRetriedNotQuarantined` fails;
/// - the second name of a replaced export kept whatever its write lease says: `anExportNobodyHadOpenLeavesNoSecondName`;
/// - a kept-aside file's own pairs learned by the history: `aRetryAfterAKeptAsideEditApplies`;
/// - no pending judgement (`exportState` calling a file judged once its identity is recorded):
///   `aJudgementCutShortByAKillIsCarriedOut(defaults.edit.learned)` loses the edit;
/// - the replaced export accounted for from its name after the exporter looked at it, not from the descriptor it keeps:
///   `aWriteBegunAsTheExportIsPublishedIsApplied` loses the edit;
/// - an interrupted apply always applied again (`settleJudging` not looking at the journal):
///   `aJudgementCutShortByAKillIsCarriedOut(defaults.edit.committed)` rolls back the value written after it.
@Suite(.runSlot(.minutes(12))) struct OutsideEditBaseTests {
  let group = "group.com.example.outside"
  let suite = "s"

  enum Way: String, CaseIterable, Sendable {
    /// plistlib's `open(path, 'wb')`: truncate the file at the name, then write into it.
    case inPlace
    /// `cp tool.plist <suite>.plist`: the same inode, truncated and written by cp.
    case copyOver
    /// `mv tool.plist <suite>.plist`: a new inode renamed over the name.
    case renameOver
  }

  func prefs(_ root: TestRoot) -> String { root.path + "/" + group + "/Library/Preferences" }
  func plist(_ root: TestRoot) -> String { prefs(root) + "/\(suite).plist" }

  /// `groupctl defaults <verb> <group> <rest…> --suite s --root <root>`; expected to succeed.
  @discardableResult
  func defaults(
    _ verb: String, _ rest: [String] = [], root: TestRoot, sourceLocation: SourceLocation = #_sourceLocation
  ) async throws -> (out: String, err: String) {
    let run = try await groupctl(["defaults", verb, group] + rest + ["--suite", suite, "--root", root.path])
    #expect(run.status == 0, "\(verb) \(rest): \(run)", sourceLocation: sourceLocation)
    return (run.out, run.err)
  }

  /// The suite as a new process reads it (`defaults read --json`), and what it printed on stderr.
  func read(_ root: TestRoot) async throws -> (values: [String: Any], notice: String) {
    let (out, err) = try await defaults("read", ["--json"], root: root)
    let object = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any]
    return (object ?? [:], err)
  }

  /// What a tool read: the export's dictionary.
  func toolReads(_ root: TestRoot) throws -> [String: PropertyListValue] {
    try PropertyListValue(bytes: Array(Data(contentsOf: URL(fileURLWithPath: plist(root))))).dictionaryValue ?? [:]
  }

  /// The tool writes `values` back, the way it writes.
  func toolWrites(_ values: [String: PropertyListValue], _ way: Way, root: TestRoot) async throws {
    let bytes = Data(try PropertyListValue.dictionary(values).encoded(as: .binary))
    switch way {
    case .inPlace:
      let handle = try #require(FileHandle(forWritingAtPath: plist(root)))
      try handle.truncate(atOffset: 0)
      try handle.write(contentsOf: bytes)
      try handle.close()
    case .copyOver:
      let source = root.path + "/tool.plist"
      try bytes.write(to: URL(fileURLWithPath: source))
      let copy = try #require(try ToolRun("cp", [source, plist(root)]))
      #expect(await copy.exit() == 0)
    case .renameOver:
      let source = root.path + "/tool.plist"
      try bytes.write(to: URL(fileURLWithPath: source))
      #expect(rename(source, plist(root)) == 0)
    }
  }

  func files(_ root: TestRoot) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: prefs(root))) ?? [] }

  /// The dictionaries kept aside as unapplied edits.
  func unapplied(_ root: TestRoot) throws -> [[String: PropertyListValue]] {
    try files(root).filter { $0.hasPrefix("\(suite).plist.unapplied-") }.sorted().map {
      try PropertyListValue(bytes: Array(Data(contentsOf: URL(fileURLWithPath: prefs(root) + "/" + $0))))
        .dictionaryValue ?? [:]
    }
  }

  /// A tool reads the export (counter 100), `exports` exports follow (counter 200, 201, …, each synchronized by a
  /// process that exits), then the tool writes its copy plus `outside = 1` back. With no export in between the
  /// tool's change is applied; with any, its copy holds a counter the export showed before: kept aside, reported,
  /// and the committed counter stays.
  @Test(arguments: [0, 1, 2, 10], Way.allCases)
  func aStaleEditNeverRollsBackACommittedValue(exports: Int, way: Way) async throws {
    let root = try TestRoot()
    try await defaults("write", ["counter", "-int", "100"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    #expect(copy["counter"] == .integer(100))
    copy["outside"] = .integer(1)
    for e in 0..<exports {
      try await defaults("write", ["counter", "-int", "\(200 + e)"], root: root)
      try await defaults("sync", root: root)
    }
    try await toolWrites(copy, way, root: root)
    try await defaults("sync", root: root)
    let (values, notice) = try await read(root)
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    if exports == 0 {
      #expect(values["counter"] as? Int == 100 && values["outside"] as? Int == 1, "\(values)")
      #expect(try unapplied(root).isEmpty && !notice.contains("note: "), "\(notice)")
    } else {
      #expect(values["counter"] as? Int == 200 + exports - 1, "rolled back: \(values)")
      #expect(values["outside"] == nil, "\(values)")
      #expect(try unapplied(root) == [copy], "\(files(root))")
      #expect(notice.contains("kept aside"), "\(notice)")
    }
    withExtendedLifetime(root) {}
  }

  /// The same with the exporting process alive all along (it also sees the tool's write through inotify and may
  /// judge it first): one judgement, the same outcome.
  @Test(arguments: Way.allCases) func aStaleEditWhileTheExporterLives(way: Way) async throws {
    let root = try TestRoot()
    let exporter = try Child(
      .defaultsScript(
        suite: suite,
        steps: [
          .set("counter", 100), .sync, .say("first"), .wait("read"), .set("counter", 200), .sync, .say("second"),
          .wait("written"), .settle, .dump,
        ]),
      root: root.path, group: group)
    #expect(await exporter.line { $0 == "first" } != nil)
    var copy = try toolReads(root)
    copy["outside"] = .integer(1)
    #expect(FileManager.default.createFile(atPath: root.path + "/read", contents: nil))
    #expect(await exporter.line { $0 == "second" } != nil)
    try await toolWrites(copy, way, root: root)
    let (values, _) = try await read(root)  // a new process: judges it at once, if the exporter did not yet
    #expect(values["counter"] as? Int == 200 && values["outside"] == nil, "\(values)")
    #expect(FileManager.default.createFile(atPath: root.path + "/written", contents: nil))
    #expect(await exporter.exit() == 0)
    #expect(exporter.output.suffix(2) == ["counter 200", "end"], "\(exporter.output)")
    #expect(try unapplied(root) == [copy], "\(files(root))")
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    withExtendedLifetime(root) {}
  }

  /// A process judging a tool's edit is killed at each point of its judgement: after the history learned the
  /// edit's pairs (the commit not made), and after the commit (its decision not yet cleared). Either way the edit is
  /// applied once: the next process reads it, nothing is kept aside — and a value written after an apply that was
  /// committed is not rolled back by applying it again.
  @Test(arguments: ["defaults.edit.learned", "defaults.edit.committed"])
  func aJudgementCutShortByAKillIsCarriedOut(point: String) async throws {
    let root = try TestRoot()
    try await defaults("write", ["a", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["b"] = .integer(2)
    try await toolWrites(copy, .renameOver, root: root)
    // Opening the suite judges the edit (before the first read), and dies at `point`.
    let dying = try Child(
      .defaultsScript(suite: suite, steps: [.read("b"), .say("survived")]), root: root.path, group: group,
      environment: ["GROUPCONTAINER_FAULT_POINT": point])
    #expect(await dying.exit() != 0 && !dying.output.contains("survived"), "\(dying.output) \(dying.errors.text)")
    let b = try await defaults("read", ["b"], root: root)
    #expect(b.out == "2\n", "\(b)")
    // A value written after the edit was applied stays: the interrupted apply is not made again over it.
    try await defaults("write", ["b", "-int", "3"], root: root)
    try await defaults("sync", root: root)
    let (values, notice) = try await read(root)
    #expect(values["a"] as? Int == 1 && values["b"] as? Int == 3, "\(values) \(notice)")
    #expect(try unapplied(root).isEmpty, "\(files(root))")
    #expect(try toolReads(root)["b"] == .integer(3))
    withExtendedLifetime(root) {}
  }

  /// A process keeping a stale edit aside is killed after its copy is written and before its decision is cleared:
  /// the next process carries the judgement out again and rewrites that copy (named for the tool's file) — one copy,
  /// the committed value stays. Mutant: the copy named for the moment and process (as before) → two copies.
  @Test func aKeepingAsideCutShortByAKillKeepsOneCopy() async throws {
    let root = try TestRoot()
    try await defaults("write", ["counter", "-int", "100"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["outside"] = .integer(1)
    try await defaults("write", ["counter", "-int", "200"], root: root)
    try await defaults("sync", root: root)
    try await toolWrites(copy, .renameOver, root: root)
    let dying = try Child(
      .defaultsScript(suite: suite, steps: [.read("counter"), .say("survived")]), root: root.path, group: group,
      environment: ["GROUPCONTAINER_FAULT_POINT": "defaults.edit.keptAside"])
    #expect(await dying.exit() != 0 && !dying.output.contains("survived"), "\(dying.output) \(dying.errors.text)")
    #expect(try unapplied(root) == [copy], "\(files(root))")
    try await defaults("sync", root: root)
    let (values, notice) = try await read(root)
    #expect(values["counter"] as? Int == 200 && values["outside"] == nil, "rolled back: \(values)")
    #expect(try unapplied(root) == [copy], "\(files(root))")
    #expect(notice.contains("kept aside"), "\(notice)")
    withExtendedLifetime(root) {}
  }

  /// An edit of the current export, with nobody running: the next process that opens the suite reads it (before,
  /// it did not until some process exported again).
  @Test(arguments: Way.allCases) func aProcessStartedAfterTheEditReadsIt(way: Way) async throws {
    let root = try TestRoot()
    try await defaults("write", ["a", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["b"] = .integer(2)
    copy["a"] = nil
    try await toolWrites(copy, way, root: root)
    let b = try await defaults("read", ["b"], root: root)
    #expect(b.out == "2\n")
    let (values, notice) = try await read(root)
    // (stderr may hold other processes' log lines: only the notice matters)
    #expect(values.count == 1 && values["b"] as? Int == 2 && !notice.contains("note: "), "\(values) \(notice)")
    withExtendedLifetime(root) {}
  }

  /// The tool opens the export for writing, a process replaces the export, and the tool writes seconds later —
  /// into the replaced file, which it still has open. The replaced file keeps its second name while anyone has it
  /// open, however long (it was dropped 2 s after the replacement); the next export applies the edit.
  @Test func anEditWrittenLongAfterTheExportWasReplacedIsApplied() async throws {
    let root = try TestRoot()
    try await defaults("write", ["a", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["tool"] = .integer(7)
    let handle = try #require(FileHandle(forWritingAtPath: plist(root)))
    try await defaults("write", ["b", "-int", "2"], root: root)
    try await defaults("sync", root: root)  // replaces the (empty) export the tool holds
    try await Task.sleep(for: .seconds(3))  // past the old 2 s grace
    try await defaults("write", ["c", "-int", "3"], root: root)
    try await defaults("sync", root: root)  // looks at the kept file: untouched, but still open
    #expect(files(root).contains { $0.hasPrefix("\(suite).plist.replaced-") }, "\(files(root))")
    try handle.truncate(atOffset: 0)
    try handle.write(contentsOf: Data(try PropertyListValue.dictionary(copy).encoded(as: .binary)))
    try handle.close()
    try await defaults("sync", root: root)
    let (values, notice) = try await read(root)
    #expect(values["a"] as? Int == 1 && values["b"] as? Int == 2 && values["c"] as? Int == 3, "\(values)")
    #expect(values["tool"] as? Int == 7, "\(values) \(notice) \(files(root))")
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    withExtendedLifetime(root) {}
  }

  /// A tool's write that begins after the exporter looked at the export and before it replaces it (paused at
  /// `defaults.export.publishing`): in place (plistlib's truncating open now, its write once the export is replaced
  /// — it lands in the replaced file, which keeps a second name), or renamed over the name. The next process
  /// applies it. Mutant (the code before): what the replaced file is accounted for as read from the name again →
  /// the truncated or renamed file counted as nobody's, kept no second name, and the edit went into a file with no
  /// name (an in-place edit lost under load in CI).
  @Test(arguments: [Way.inPlace, .renameOver])
  func aWriteBegunAsTheExportIsPublishedIsApplied(way: Way) async throws {
    let root = try TestRoot()
    try await defaults("write", ["a", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["tool"] = .integer(7)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let point = pauses + "/defaults.export.publishing"
    let exporter = try Child(
      .defaultsScript(suite: suite, steps: [.set("b", 2), .sync]), root: root.path, group: group,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "defaults.export.publishing", "GROUPCONTAINER_PAUSE_DIR": pauses])
    #expect(await eventually { FileManager.default.fileExists(atPath: point) }, "the export was never published")
    let handle = way == .inPlace ? FileHandle(forWritingAtPath: plist(root)) : nil
    if way == .inPlace { try handle?.truncate(atOffset: 0) } else { try await toolWrites(copy, way, root: root) }
    try FileManager.default.removeItem(atPath: point)
    #expect(await exporter.exit() == 0, "\(exporter.errors.text)")
    try handle?.write(contentsOf: Data(try PropertyListValue.dictionary(copy).encoded(as: .binary)))
    try handle?.close()
    let (values, notice) = try await read(root)
    #expect(values["a"] as? Int == 1 && values["b"] as? Int == 2, "\(values)")
    #expect(values["tool"] as? Int == 7, "\(values) \(notice) \(files(root))")
    #expect(try unapplied(root).isEmpty && !files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    withExtendedLifetime(root) {}
  }

  /// A process that synchronizes and exits at once leaves no `.replaced-*` files (each the size of the suite) when no
  /// tool had the replaced export open: the write lease held across the rename shows none did (the test above keeps
  /// one open, and its second name stays). Mutant: the second name kept whatever the lease says, as before → after
  /// the second export the pair is still there (until a process opens the suite 2 s later).
  @Test func anExportNobodyHadOpenLeavesNoSecondName() async throws {
    let root = try TestRoot()
    for i in 0..<3 {
      try await defaults("write", ["k", "-int", "\(i)"], root: root)
      try await defaults("sync", root: root)
      #expect(!files(root).contains { $0.contains(".replaced-") }, "after export \(i): \(files(root))")
    }
    #expect(try await read(root).values["k"] as? Int == 2)
    withExtendedLifetime(root) {}
  }

  /// A tool between its truncate and its write: the empty file at the name may be half-written, so it is read
  /// again, never moved aside as corrupt — by a process that opens the suite then, and by a `synchronize()`
  /// (which replaces it: the tool's write lands in the replaced file and is applied from there).
  @Test(arguments: [false, true]) func aHalfWrittenEditIsRetriedNotQuarantined(synchronized: Bool) async throws {
    let root = try TestRoot()
    try await defaults("write", ["a", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["tool"] = .integer(7)
    let handle = try #require(FileHandle(forWritingAtPath: plist(root)))
    try handle.truncate(atOffset: 0)
    let early = try await read(root)
    #expect(early.values["a"] as? Int == 1, "\(early)")
    if synchronized { try await defaults("sync", root: root) }
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    try handle.write(contentsOf: Data(try PropertyListValue.dictionary(copy).encoded(as: .binary)))
    try handle.close()
    if synchronized { try await defaults("sync", root: root) }
    let (values, _) = try await read(root)
    #expect(values["a"] as? Int == 1 && values["tool"] as? Int == 7, "\(values) \(files(root))")
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    withExtendedLifetime(root) {}
  }

  /// The tool's retry after an edit was kept aside applies: it read the export afresh, and the value it adds was
  /// only ever in its own kept-aside file, never the suite's. Mutant: the kept-aside file's own pairs learned by the
  /// history (as before) → the retry is kept aside too, and every retry after it (seen under load: five in a row).
  @Test(arguments: Way.allCases) func aRetryAfterAKeptAsideEditApplies(way: Way) async throws {
    let root = try TestRoot()
    try await defaults("write", ["counter", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var stale = try toolReads(root)
    stale["x"] = .string("y")
    try await defaults("write", ["counter", "-int", "2"], root: root)
    try await defaults("sync", root: root)
    try await toolWrites(stale, way, root: root)
    try await defaults("sync", root: root)  // judged (kept aside: counter 1 was shown before) and exported again
    #expect(try unapplied(root) == [stale], "\(files(root))")
    var fresh = try toolReads(root)
    #expect(fresh["counter"] == .integer(2) && fresh["x"] == nil, "\(fresh)")
    fresh["x"] = .string("y")
    try await toolWrites(fresh, way, root: root)
    try await defaults("sync", root: root)
    let (values, _) = try await read(root)
    #expect(values["x"] as? String == "y" && values["counter"] as? Int == 2, "\(values) \(files(root))")
    #expect(try unapplied(root).count == 1, "\(files(root))")
    withExtendedLifetime(root) {}
  }

  /// A kept-aside edit is reported: `groupctl defaults read` prints a one-line notice, `groupctl doctor` a warning.
  @Test func aKeptAsideEditIsReported() async throws {
    let root = try TestRoot()
    try await defaults("write", ["counter", "-int", "1"], root: root)
    try await defaults("sync", root: root)
    var copy = try toolReads(root)
    copy["x"] = .string("y")
    try await defaults("write", ["counter", "-int", "2"], root: root)
    try await defaults("sync", root: root)
    try await toolWrites(copy, .renameOver, root: root)
    let (values, notice) = try await read(root)
    #expect(values["counter"] as? Int == 2 && values["x"] == nil)
    // (stderr also has the error the judging process logged)
    let notes = notice.split(separator: "\n").filter { $0.hasPrefix("note: ") }
    #expect(notes.count == 1 && notes[0].contains("\(suite).plist.unapplied-"), "\(notice)")
    let doctor = try await groupctl(["doctor", group, "--root", root.path])
    let line = doctor.out.split(separator: "\n").first { $0.contains("outside edits") } ?? ""
    #expect(line.hasPrefix("warn") && line.contains("\(suite).plist.unapplied-"), "\(doctor.out)")
    withExtendedLifetime(root) {}
  }

  /// Under load, with a history: three writer processes increment `counter` with `update()` and log every
  /// acknowledged result, while one tool (python3 plistlib) edits the plist by all three ways in turn, each edit
  /// adding its own key (`tool<i> = i`) to whatever it read 0.3 s before — stale counters included — and a shell
  /// loop synchronizes (exports) every 0.2 s. Fails on any writer's
  /// counter going back, any `update()` result handed out twice, and any tool edit neither applied nor kept aside.
  @Test func aToolEditingUnderLoadNeverRollsBackAndLosesNothing() async throws {
    let root = try TestRoot()
    try await defaults("write", ["counter", "-int", "0"], root: root)
    try await defaults("sync", root: root)
    let writers = try (0..<3).map { w in
      try Child(
        [
          "stress", "defaults-writer", group, "--index", "\(w)", "--keys", "0", "--increments", "1500",
          "--testing-update-delay-us", "1000", "--print-updates", "--suite", suite, "--root", root.path,
        ], executable: "groupctl")
    }
    let edits = 15
    let tool = try #require(
      try ToolRun(
        "python3",
        [
          "-c",
          """
          import os, plistlib, shutil, sys, time
          path, scratch, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
          for i in range(n):
              for attempt in range(200):
                  try:
                      with open(path, 'rb') as f: d = plistlib.load(f)
                      break
                  except Exception:
                      time.sleep(0.01)
              time.sleep(0.3)  # holding its copy while the app exports: often stale when written
              d['tool%d' % i] = i
              way = i % 3
              if way == 0:
                  with open(path, 'wb') as f: plistlib.dump(d, f, fmt=plistlib.FMT_BINARY)
              else:
                  with open(scratch, 'wb') as f: plistlib.dump(d, f, fmt=plistlib.FMT_XML)
                  if way == 1: shutil.copyfile(scratch, path)
                  else: os.replace(scratch, path)
              print('edit', i, way, flush=True)
              time.sleep(0.25)
          """,
          plist(root), root.path + "/scratch.plist", "\(edits)",
        ]))
    // An app that synchronizes now and then: each export makes the copy the tool holds stale.
    let ctl = productsDirectory.appendingPathComponent("groupctl").path
    let exporter = try #require(
      try ToolRun(
        "sh",
        [
          "-c", "for i in $(seq 25); do \"$0\" defaults sync \(group) --suite \(suite) --root \"$1\"; sleep 0.2; done",
          ctl, root.path,
        ]))
    #expect(await tool.exit() == 0, "\(tool.errors)")
    #expect(await exporter.exit() == 0, "\(exporter.errors)")
    for writer in writers { #expect(await writer.exit() == 0, "\(writer.errors.text)") }
    // Whatever is still pending (an in-place write into a replaced export) is judged by the next export.
    try await defaults("sync", root: root)
    let (values, _) = try await read(root)

    var seen = Set<Int>()
    for (w, writer) in writers.enumerated() {
      let results = writer.output.filter { $0.hasPrefix("update ") }.compactMap { Int($0.dropFirst(7)) }
      #expect(results.count == 1500, "writer \(w): \(results.count) results")
      let back = zip(results, results.dropFirst()).filter { $0.1 <= $0.0 }
      #expect(back.isEmpty, "writer \(w): counter went back: \(back.prefix(3))")
      let twice = results.filter { !seen.insert($0).inserted }
      #expect(twice.isEmpty, "writer \(w): results handed out twice: \(twice.prefix(5))")
    }
    #expect(values["counter"] as? Int == 4500, "\(values["counter"] ?? "none")")
    let kept = try unapplied(root)
    for i in 0..<edits {
      let applied = values["tool\(i)"] as? Int == i
      let keptAside = kept.contains { $0["tool\(i)"] == .integer(PropertyListInteger(i)) }
      #expect(applied || keptAside, "tool edit \(i) neither applied nor kept aside: \(files(root))")
    }
    #expect(!files(root).contains { $0.contains(".corrupt-") }, "\(files(root))")
    withExtendedLifetime(root) {}
  }
}
