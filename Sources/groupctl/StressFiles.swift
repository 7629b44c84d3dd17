import ArgumentParser
import Foundation
import GroupContainer
import Synchronization
import SystemLayer

/// The shared document of `stress files`: the total and each writer's own count (keys are writer indexes).
struct StressDocument: Codable, Equatable {
  var counter: Int
  var writers: [String: Int]

  /// A fresh parse of the whole document; nil when it is partial or not of this shape (a torn read).
  static func parse(_ data: Data) -> StressDocument? { try? UntrustedJSON.decode(StressDocument.self, from: data) }

  func encoded() -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return (try? encoder.encode(self)) ?? Data()
  }
}

/// Appends lines to a log file of the run (one writer per file). Each line is one `write` with `O_APPEND`, made
/// after the operation it records returned: a process killed at any point leaves whole lines of acknowledged
/// operations and at most one partial last line, which `lines()` drops.
struct StressLog {
  let path: String

  func append(_ line: String) {
    guard let fd = try? SystemFD.open(path, [.writeOnly, .create, .append]) else { return }
    try? fd.writeAll(Array((line + "\n").utf8))
  }

  /// The highest count in `ack <count> [<start-ns> <end-ns>]` lines: what a files writer acknowledged.
  static func acknowledged(_ lines: [Substring]) -> Int {
    lines.compactMap { $0.hasPrefix("ack ") ? Int($0.dropFirst(4).prefix { $0 != " " }) : nil }.max() ?? 0
  }

  /// The complete lines (a writer killed mid-append may leave a partial last line, which is not counted).
  func lines() -> [Substring] {
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    let text = String(decoding: data, as: UTF8.self)
    var lines = text.split(separator: "\n", omittingEmptySubsequences: true)
    if !text.hasSuffix("\n"), !lines.isEmpty { lines.removeLast() }
    return lines
  }
}

struct StressFiles: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "files",
    abstract: "N writer processes do coordinated read-modify-write increments of one JSON document; M present it.",
    discussion: """
      Each writer runs FileCoordinator().coordinate(writingItemAt:options: .forReplacing), parses the document, \
      increments `counter` and sets its own entry to its acknowledged count + 1, writes it back with \
      container.write, and appends "ack <count>" to its log, --ops times (a restarted writer goes on from its \
      log). Presenter processes log every callback. \
      Then an independent check re-parses the document and prints as its last line \
      ops=<counted>/<expected> lost=<n> torn=<n> callbacks=<seen>/<expected> writes_per_s=<x> \
      (lost: acknowledged ops missing from the document, plus any difference between the counter and the sum of \
      the writers' counts; torn: reads by writers, presenters or the check that saw a partial or unparsable \
      document; callbacks: relinquishToWriter + didChange pairs the presenters heard, in order, against one pair \
      per write per presenter). With --kill-random, random writers are SIGKILLed mid-run and restarted (their \
      last increment either happened or not). Exit status 0 only when nothing was lost or torn and every writer \
      finished.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "Writer processes.") var writers = 4
  @Option(help: "Increments per writer.") var ops = 1000
  @Option(help: "Presenter processes.") var presenters = 0
  @Option(help: "Container-relative path of the shared document.") var document = "Documents/stress-files.json"
  @Flag(help: "SIGKILL random writers mid-run and restart them.") var killRandom = false
  @Option(help: "How many kills --kill-random makes.") var kills = 10
  @Option(help: "Seed of --kill-random's choices (default: random).") var seed: UInt64?
  @Option(help: "Keep the writers' and presenters' logs in this directory (default: a temp directory, removed).")
  var logs: String?

  func run() throws {
    let group = try container.open()
    let url = try group.url(forRelativePath: document)
    try Self.reset(url, in: group)
    // The run's logs live outside the container: they are the witnesses, not the subject.
    let logs =
      self.logs.map { URL(fileURLWithPath: $0) }
      ?? FileManager.default.temporaryDirectory.appendingPathComponent("groupctl-stress-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
    defer { if self.logs == nil { try? FileManager.default.removeItem(at: logs) } }
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    func worker(_ arguments: [String]) throws -> Process {
      let child = Process()
      child.executableURL = executable
      child.arguments =
        arguments + [container.groupID, "--document", document] + (container.root.map { ["--root", $0] } ?? [])
      child.standardOutput = FileHandle.nullDevice  // our stdout carries only the summary
      try child.run()
      return child
    }

    // Presenters first, and wait until each is registered: a write before that would not be theirs to hear.
    let presenterLogs = (0..<presenters).map {
      StressLog(path: logs.appendingPathComponent("presenter-\($0).log").path)
    }
    var presenterProcesses: [Process] = []
    defer { for p in presenterProcesses where p.isRunning { _ = Signals.send(SIGKILL, to: p.processIdentifier) } }
    for log in presenterLogs {
      presenterProcesses.append(try worker(["stress", "files-presenter", "--log", log.path]))
    }
    let readyBy = Date().addingTimeInterval(30)
    while !presenterLogs.allSatisfy({ $0.lines().contains("ready") }) {
      if Date() > readyBy || presenterProcesses.contains(where: { !$0.isRunning }) {
        throw CommandFailure("a presenter process did not start (its log: \(logs.path))")
      }
      Thread.sleep(forTimeInterval: 0.01)
    }

    let writerLogs = (0..<writers).map { StressLog(path: logs.appendingPathComponent("writer-\($0).log").path) }
    func startWriter(_ w: Int) throws -> Process {
      try worker(["stress", "files-writer", "--index", "\(w)", "--ops", "\(ops)", "--log", writerLogs[w].path])
    }
    let start = Date()
    var running = try (0..<writers).map(startWriter)
    var killed = 0
    if killRandom && writers > 0 {
      var random = SplitMix64(seed: seed ?? UInt64.random(in: 1...UInt64.max))
      while killed < kills && running.contains(where: \.isRunning) {
        Thread.sleep(forTimeInterval: Double.random(in: 0.02...0.15, using: &random))
        let w = Int.random(in: 0..<writers, using: &random)
        guard running[w].isRunning else { continue }
        _ = Signals.send(SIGKILL, to: running[w].processIdentifier)
        running[w].waitUntilExit()
        killed += 1
        running[w] = try startWriter(w)  // it goes on from its log
      }
    }
    var failed = 0
    for (w, child) in running.enumerated() {
      child.waitUntilExit()
      guard child.terminationStatus != 0 else { continue }
      failed += 1
      let how = child.terminationReason == .uncaughtSignal ? "signal" : "status"
      Output.line("writer \(w) ended with \(how) \(child.terminationStatus) (pid \(child.processIdentifier))")
    }
    let elapsed = Date().timeIntervalSince(start)

    let (counted, lost, tornInDocument) = try Self.check(url, in: group, writerLogs: writerLogs)
    var torn = tornInDocument

    // Finishes reach presenters after the writers return: wait until every pair arrived, or nothing new came.
    var pairs = presenterLogs.map { PresenterTally($0.lines()) }
    var quietSince = Date()
    while pairs.contains(where: { $0.pairs < counted }) && Date().timeIntervalSince(quietSince) < 2 {
      Thread.sleep(forTimeInterval: 0.05)
      let now = presenterLogs.map { PresenterTally($0.lines()) }
      if now.map(\.lines) != pairs.map(\.lines) { quietSince = Date() }
      pairs = now
    }
    torn += pairs.map(\.torn).reduce(0, +)
    let seen = pairs.map(\.pairs).reduce(0, +)

    let expected = writers * ops
    let rate = Double(counted) / max(elapsed, 1e-9)
    if failed > 0 { Output.line("\(failed) writer process(es) failed") }
    if killRandom { Output.line("killed \(killed) writer(s)") }
    for (p, tally) in pairs.enumerated() where tally.overlapped > 0 {
      Output.line("presenter \(p): \(tally.overlapped) relinquish(es) before the previous write's didChange")
    }
    Output.line(
      "ops=\(counted)/\(expected) lost=\(lost) torn=\(torn) callbacks=\(seen)/\(counted * presenters) "
        + "writes_per_s=\(Int(rate))")
    if lost != 0 || torn != 0 || failed > 0 || counted != expected { throw ExitCode(1) }
  }
}

extension StressFiles {
  /// The independent check: a fresh parse of the document as it is on disk against the writers' logs. Returns the
  /// document's counter, the acknowledged ops missing from it (plus any difference between the counter and the sum
  /// of the writers' counts), and the torn reads (the document's, and those the writers logged).
  static func check(_ url: URL, in group: GroupContainer, writerLogs: [StressLog]) throws -> (
    counted: Int, lost: Int, torn: Int
  ) {
    var torn = 0
    let final = try FileCoordinator().coordinate(readingItemAt: url) { url in
      StressDocument.parse(try group.contents(of: url))
    }
    if final == nil { torn += 1 }
    let counted = final?.counter ?? 0
    var lost = abs(counted - (final?.writers.values.reduce(0, +) ?? 0))
    for (w, log) in writerLogs.enumerated() {
      let lines = log.lines()
      torn += lines.filter { $0.hasPrefix("torn") }.count
      lost += max(0, StressLog.acknowledged(lines) - (final?.writers["\(w)"] ?? 0))
    }
    return (counted, lost, torn)
  }

  /// Makes the shared document empty (a coordinated replace).
  static func reset(_ url: URL, in group: GroupContainer) throws {
    try FileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
      try group.write(StressDocument(counter: 0, writers: [:]).encoded(), to: url)
    }
  }
}

/// What one presenter's log says: relinquishToWriter → didChange pairs in order (each didChange matched with an
/// earlier unmatched relinquish), how often a relinquish came before the previous write's didChange, torn reads.
///
/// The overlap is by design here: a writer asks presenters to relinquish before it takes its lock (it waits for
/// their acks, then for the lock), and the previous writer's finish leaves from that writer's outbox after its
/// unlock, so with several writers a presenter can hear B's relinquish before A's didChange.
struct PresenterTally {
  var pairs = 0, overlapped = 0, torn = 0, lines = 0

  init(_ log: [Substring]) {
    lines = log.count
    var pending = 0
    for line in log {
      switch line {
      case "relinquishToWriter":
        if pending > 0 { overlapped += 1 }
        pending += 1
      case "didChange":
        if pending > 0 {
          pairs += 1
          pending -= 1
        }
      case _ where line.hasPrefix("torn"): torn += 1
      default: break
      }
    }
  }
}

struct StressFilesWriter: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "files-writer", abstract: "One writer of `stress files` (started by it).", shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option var document: String
  @Option var index: Int
  @Option var ops: Int
  @Option var log: String
  /// For `stress storm`: stop before the next op once this file exists.
  @Option(help: .hidden) var stopFile: String?
  /// For `stress storm`'s hang check: `ack <count> <start-ns> <end-ns>` (monotonic clock) around each op.
  @Flag(help: .hidden) var timed = false

  func run() throws {
    let group = try container.open()
    let url = try group.url(forRelativePath: document)
    let log = StressLog(path: log)
    let coordinator = FileCoordinator()
    let me = "\(index)"
    // The writer's own count comes from its log, never from the document: an increment another writer clobbered
    // must show as lost, not be silently redone.
    var acknowledged = StressLog.acknowledged(log.lines())
    // Only a restarted writer can find one more op of its own than its log has (a fresh one finds none).
    var firstAccess = true
    let parent = CurrentProcess.parentID
    while acknowledged < ops {
      guard CurrentProcess.parentID == parent else { throw ExitCode(4) }  // a writer must not outlive its run
      if let stopFile, FileManager.default.fileExists(atPath: stopFile) { return }
      let start = MonotonicClock.nanoseconds()
      enum Step { case wrote, adopted, torn }
      let step = try coordinator.coordinate(writingItemAt: url, options: .forReplacing) { url -> Step in
        guard var doc = StressDocument.parse(try group.contents(of: url)) else { return .torn }
        let inDocument = doc.writers[me] ?? 0
        // After a SIGKILL the last increment either happened or not: if it did, it is ours to acknowledge.
        if firstAccess && inDocument == acknowledged + 1 { return .adopted }
        if inDocument != acknowledged {
          log.append("mismatch: the document has \(inDocument) of this writer's ops, it acknowledged \(acknowledged)")
        }
        doc.counter += 1
        doc.writers[me] = acknowledged + 1
        try group.write(doc.encoded(), to: url)
        return .wrote
      }
      if step == .torn {
        log.append("torn read of \(document)")
        throw ExitCode(3)  // never write back over a document we could not read
      }
      firstAccess = false
      acknowledged += 1
      log.append("ack \(acknowledged)" + (timed ? " \(start) \(MonotonicClock.nanoseconds())" : ""))
    }
  }
}

struct StressFilesPresenter: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "files-presenter", abstract: "One presenter of `stress files` (started by it).",
    shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option var document: String
  @Option var log: String
  /// For `stress storm`: exit once this file exists.
  @Option(help: .hidden) var stopFile: String?

  func run() throws {
    let group = try container.open()
    let presenter = StressPresenter(url: try group.url(forRelativePath: document), log: StressLog(path: log))
    try FileCoordinator.addFilePresenter(presenter)
    presenter.log.append("ready")
    // Until the stress run kills it, or it dies: a presenter must not outlive its run.
    let parent = CurrentProcess.parentID
    while CurrentProcess.parentID == parent {
      if let stopFile, FileManager.default.fileExists(atPath: stopFile) { return }
      Thread.sleep(forTimeInterval: 0.2)
    }
  }
}

/// Logs the callbacks `stress files` counts; after each didChange it reads the document (uncoordinated, as any
/// observer may) and logs a torn read if it does not parse.
final class StressPresenter: FilePresenter, Sendable {
  let presentedItemURL: URL?
  let log: StressLog
  let presentedItemOperationQueue: OperationQueue = {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 1
    return queue
  }()

  init(url: URL, log: StressLog) {
    presentedItemURL = url
    self.log = log
  }

  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    log.append("relinquishToWriter")
    writer(nil)
  }

  func presentedItemDidChange() {
    guard ChangeOrigin.current?.isCoordinated ?? false else {
      log.append("uncoordinated")
      return
    }
    log.append("didChange")
    if let url = presentedItemURL, let data = FileManager.default.contents(atPath: url.path),
      StressDocument.parse(data) == nil
    {
      log.append("torn read by a presenter (\(data.count) bytes)")
    }
  }
}
