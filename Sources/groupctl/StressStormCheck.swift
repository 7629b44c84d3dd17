import ArgumentParser
import BackgroundDownloads
import Crypto
import FileCoordination
import Foundation
import GroupContainer
import GroupContainerCore
import SystemLayer

/// The checker of `stress storm`, run in a fresh process once every worker is gone: reads the workers' histories
/// (StressStormHistory.swift) and the container, and prints what it found, the summary last.
struct StressStormCheck: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "storm-check", abstract: "The history checker of `stress storm` (started by it).",
    shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option var logs: String
  @Option var document: String
  @Option var hangSlack: Double
  @Option(help: "The served files (downloads were made).") var manifest: String?
  @Option(help: "Seconds the unfinished downloads may take to complete after the storm.") var downloadWait: Double = 120

  /// The counts of the summary and the first problems found, printed before it.
  struct Findings {
    var ops = 0, lost = 0, torn = 0, hung = 0
    /// Acknowledged operations by module, for a line before the summary.
    var kinds: [(String, Int)] = []
    var problems: [String] = []
    private var omitted = 0

    mutating func problem(_ text: String) {
      if problems.count < 40 { problems.append(text) } else { omitted += 1 }
    }
    func print() {
      for line in problems { Output.line(line) }
      if omitted > 0 { Output.line("(\(omitted) more problems)") }
    }
  }

  func run() throws {
    // Opening the container in a new process reaps the dead workers and sweeps the temp files they left.
    let group = try container.open()
    let logs = URL(fileURLWithPath: self.logs)
    var found = Findings()
    let chaos = StressLog(path: logs.appendingPathComponent("chaos.log").path).lines()
    var stopIntervals: [(UInt64, UInt64)] = []
    for line in chaos where line.hasPrefix("stop ") {
      let parts = line.split(separator: " ")
      if parts.count == 4, let from = UInt64(parts[2]), let to = UInt64(parts[3]) { stopIntervals.append((from, to)) }
    }
    for line in chaos where line.hasPrefix("hung ") || line.hasPrefix("exit ") {
      found.problem(String(line))
      if line.hasPrefix("hung ") { found.hung += 1 }
    }

    func counted(_ kind: String, _ check: (inout Findings) throws -> Void) rethrows {
      let before = found.ops
      try check(&found)
      found.kinds.append((kind, found.ops - before))
    }
    // Every log parsed once (ten minutes of storm are millions of lines).
    let history = StormLine.read(logs)
    func lines(_ prefix: String) -> [StormLine] {
      history.filter { $0.key.hasPrefix(prefix) }.sorted { $0.key < $1.key }.flatMap(\.value)
    }
    if let manifest {
      try counted("downloads") { try checkDownloads(group, manifest: manifest, lines("download-"), &$0) }
    }
    try counted("defaults") { try checkDefaults(group, lines("defaults-"), &$0) }
    try counted("cache") { try checkCache(group, lines("cache-"), logs: logs, &$0) }
    try counted("files") { try checkFiles(group, logs: logs, &$0) }
    try counted("activities") { try checkActivity(group, lines("activity-"), &$0) }
    try counted("inbox") { try checkInbox(group, lines("inbox-"), &$0) }
    checkTemporaries(group, &found)

    let bounds = StormBounds(stops: stopIntervals, slack: UInt64(hangSlack * 1e9))
    // A download's completion is bounded by --download-wait (above), not by this.
    for line in history.values.joined() where line.verb != "done" && bounds.isHung(line) {
      found.hung += 1
      found.problem(
        "hung: \(line.verb) \(line.fields.joined(separator: " ")) took \((line.end - line.start) / 1_000_000) ms")
    }
    found.print()
    Output.line("acknowledged: " + found.kinds.map { "\($0.0)=\($0.1)" }.joined(separator: " "))
    let kills = chaos.filter { $0.hasPrefix("kill ") }.count
    Output.line(
      "ops=\(found.ops) kills=\(kills) stops=\(stopIntervals.count) lost=\(found.lost) torn=\(found.torn) "
        + "hung=\(found.hung)")
    if found.lost + found.torn + found.hung > 0 || found.ops == 0 { throw ExitCode(1) }
  }

  /// Every acknowledged set holds (or the one set its writer was killed in), in the engine and in the export;
  /// the counter never went back and no update() result came twice; the rising key never went back.
  private func checkDefaults(_ group: GroupContainer, _ lines: [StormLine], _ found: inout Findings) throws {
    guard !lines.isEmpty else { return }
    let defaults = try SharedDefaults(suiteName: StressStormWorker.suite, container: group)
    var last: [Substring: (token: Substring, number: Int)] = [:]  // key → its last acknowledged set
    var lastNumber: [String: Int] = [:]  // "<slot>.<generation>" → its last acknowledged set's number
    var updates: Set<Int> = []
    var highest: [Substring: Int] = [:]  // rising key → the highest value acknowledged
    for line in lines {
      switch line.verb {
      case "set" where line.fields.count == 2:
        found.ops += 1
        let token = line.fields[1]
        let parts = token.split(separator: ".")
        guard parts.count == 3, let number = Int(parts[2]) else { continue }
        let writer = String(token.dropLast(parts[2].count + 1))
        if number > (last[line.fields[0]]?.number ?? -1) { last[line.fields[0]] = (token, number) }
        lastNumber[writer] = max(lastNumber[writer] ?? 0, number)
      case "update" where line.fields.count == 1:
        found.ops += 1
        guard let value = Int(line.fields[0]) else { continue }
        if !updates.insert(value).inserted {
          found.lost += 1
          found.problem("defaults: update() returned \(value) twice (an increment was lost)")
        }
      case "rollback":
        found.lost += 1
        found.problem("defaults: \(line.fields.joined(separator: " "))")
      case "mono" where line.fields.count == 2:
        found.ops += 1
        if let value = Int(line.fields[1]) { highest[line.fields[0]] = max(highest[line.fields[0]] ?? 0, value) }
      default: break
      }
    }
    let export = try StressDefaults.export(of: defaults, in: group)
    for (key, set) in last {
      let values = [("suite", defaults.string(forKey: String(key))), ("export", export[String(key)]?.stringValue)]
      for (source, value) in values where value != String(set.token) {
        // Its writer may have been killed in the set after its last logged one (key s<writer>.<n % 500>, token
        // <writer>.<n>): that value may have landed.
        let parts = (value ?? "").split(separator: ".")
        if parts.count == 3, let number = Int(parts[2]), number == (lastNumber["\(parts[0]).\(parts[1])"] ?? -2) + 1,
          key == "s\(parts[0]).\(parts[1]).\(number % 500)"
        {
          continue
        }
        found.lost += 1
        found.problem("defaults (\(source)): \(key) is \(value ?? "missing"), acknowledged \(set.token)")
      }
    }
    let counter = defaults.integer(forKey: StressStormWorker.counterKey)
    if let maximum = updates.max(), counter < maximum {
      found.lost += 1
      found.problem("defaults: the counter is \(counter), an update() returned \(maximum) (rolled back)")
    }
    for (key, value) in highest where defaults.integer(forKey: String(key)) < value {
      found.lost += 1
      found.problem("defaults: \(key) is \(defaults.integer(forKey: String(key))), \(value) was acknowledged")
    }
  }

  /// The storm's activity: no update(using:) result came twice, and its count is at least the highest acknowledged.
  private func checkActivity(_ group: GroupContainer, _ lines: [StormLine], _ found: inout Findings) throws {
    let lines = lines.filter { $0.verb == "activity" && $0.fields.count == 1 }
    guard !lines.isEmpty else { return }
    var counts: Set<Int> = []
    for line in lines {
      found.ops += 1
      guard let count = Int(line.fields[0]) else { continue }
      if !counts.insert(count).inserted {
        found.lost += 1
        found.problem("activities: update(using:) returned \(count) twice (an increment was lost)")
      }
    }
    let now = try Activity<StormAttributes>.activities(in: group).first?.content.state.count ?? -1
    if let highest = counts.max(), now < highest {
      found.lost += 1
      found.problem("activities: the count is \(now), an update(using:) returned \(highest) (rolled back)")
    }
  }

  /// Every acknowledged hand-over's copy is in the Inbox under the name `send` returned, whole, with its token; no
  /// copy there is torn, and no receiver was given a torn one.
  private func checkInbox(_ group: GroupContainer, _ lines: [StormLine], _ found: inout Findings) throws {
    guard !lines.isEmpty else { return }
    let inbox = try group.url(forRelativePath: "Documents/Inbox")
    for line in lines where line.fields.count == 2 {
      let (name, token) = (String(line.fields[0]), String(line.fields[1]))
      switch line.verb {
      case "handed":
        found.ops += 1
        guard let bytes = FileManager.default.contents(atPath: inbox.appendingPathComponent(name).path) else {
          found.lost += 1
          found.problem("inbox: the acknowledged hand-over of \(token) is not at Documents/Inbox/\(name)")
          continue
        }
        switch StormInboxFile.token(in: [UInt8](bytes)) {
        case token: break
        case nil:
          found.torn += 1
          found.problem("inbox: Documents/Inbox/\(name), the hand-over of \(token), is torn")
        case let other?:  // the copy went, and a later hand-over took its name
          found.lost += 1
          found.problem("inbox: Documents/Inbox/\(name), the hand-over of \(token), holds \(other)")
        }
      case "opened" where token == "torn":
        found.torn += 1
        found.problem("inbox: a receiver was given Documents/Inbox/\(name) torn")
      default: break
      }
    }
    for name in (try? FileManager.default.contentsOfDirectory(atPath: inbox.path)) ?? [] {
      let bytes = FileManager.default.contents(atPath: inbox.appendingPathComponent(name).path).map { [UInt8]($0) }
      if StormInboxFile.token(in: bytes ?? []) == nil {
        found.torn += 1
        found.problem("inbox: Documents/Inbox/\(name) is torn")
      }
    }
  }

  /// Every read (the workers', then this process's) returned an image stored for its key, whole, and never one
  /// that a store of the key had replaced before the read began.
  private func checkCache(_ group: GroupContainer, _ lines: [StormLine], logs: URL, _ found: inout Findings) throws {
    guard !lines.isEmpty else { return }
    var tried: [Substring: Substring] = [:]  // token → key
    var acknowledged: [Substring: (start: UInt64, end: UInt64)] = [:]  // token → its store's call
    var stores: [Substring: [(start: UInt64, end: UInt64)]] = [:]  // key → acknowledged stores
    for line in lines where line.fields.count == 2 {
      if line.verb == "try" { tried[line.fields[1]] = line.fields[0] }
      if line.verb == "store" {
        found.ops += 1
        acknowledged[line.fields[1]] = (line.start, line.end)
        stores[line.fields[0], default: []].append((line.start, line.end))
      }
    }
    // Per key, by start: the earliest end among the stores starting at or after each one.
    var earliestEnd: [Substring: [UInt64]] = [:]
    for (key, list) in stores {
      let sorted = list.sorted { $0.start < $1.start }
      stores[key] = sorted
      var ends = sorted.map(\.end)
      for i in ends.indices.reversed().dropFirst() { ends[i] = min(ends[i], ends[i + 1]) }
      earliestEnd[key] = ends
    }
    func check(_ key: Substring, _ token: Substring, readAt: UInt64, by reader: String) {
      if token == "miss" { return }
      guard token != "torn", tried[token] == key else {
        found.torn += 1
        found.problem("cache: \(reader) read \(key) as \(token): not an image stored for it")
        return
      }
      // Stale: a store of the key began after this one's store had returned, and returned before the read began.
      guard let stored = acknowledged[token], let list = stores[key], let ends = earliestEnd[key] else { return }
      var low = 0
      var high = list.count
      while low < high {
        let middle = (low + high) / 2
        if list[middle].start > stored.end { high = middle } else { low = middle + 1 }
      }
      if low < list.count && ends[low] < readAt {
        found.lost += 1
        found.problem("cache: \(reader) read \(key) as \(token), which a later finished store had replaced")
      }
    }
    for line in lines where line.verb == "read" && line.fields.count == 2 {
      found.ops += 1
      check(line.fields[0], line.fields[1], readAt: line.start, by: "a reader")
    }
    // Nobody edits the entries in place here: an entry a worker's cache found damaged (and removed, and logged)
    // was published torn.
    for name in (try? FileManager.default.contentsOfDirectory(atPath: logs.path)) ?? []
    where name.hasPrefix("cache-") && name.hasSuffix(".stderr") {
      let text = (try? String(contentsOf: logs.appendingPathComponent(name), encoding: .utf8)) ?? ""
      for line in text.split(separator: "\n") where line.contains("removing the image cache entry") {
        found.torn += 1
        found.problem("cache: \(name.dropLast(7)) found a damaged entry: \(line.drop { $0 != "'" })")
      }
    }
    // A fresh process: its trim sweeps the temp files of killed storers; its reads come from disk.
    let cache = try SharedImageCache(name: StressStormWorker.cacheName, container: group)
    _ = try cache.trim()
    let now = MonotonicClock.nanoseconds()
    for k in 0..<StressStormWorker.cacheKeys {
      let key = "img\(k)"
      let token = try cache.image(forKey: key).map { StormImage.token(in: $0.data, key: key) ?? "torn" } ?? "miss"
      check(Substring(key), Substring(token), readAt: now, by: "the checker")
    }
  }

  /// The coordinated document (`stress files`' own check) and the presenters' reads.
  private func checkFiles(_ group: GroupContainer, logs: URL, _ found: inout Findings) throws {
    let writers = (0..<100).map { StressLog(path: logs.appendingPathComponent("files-writer-\($0).log").path) }
      .prefix(while: { FileManager.default.fileExists(atPath: $0.path) })
    guard !writers.isEmpty else { return }
    let (_, lost, torn) = try StressFiles.check(
      try group.url(forRelativePath: document), in: group, writerLogs: Array(writers))
    found.ops += writers.map { StressLog.acknowledged($0.lines()) }.reduce(0, +)
    found.lost += lost
    found.torn += torn
    if lost + torn > 0 { found.problem("files: \(lost) acknowledged increments lost, \(torn) torn reads") }
    for name in (try? FileManager.default.contentsOfDirectory(atPath: logs.path)) ?? []
    where name.hasPrefix("files-presenter-") {
      let tally = PresenterTally(StressLog(path: logs.appendingPathComponent(name).path).lines())
      found.torn += tally.torn
      if tally.torn > 0 { found.problem("files: \(name) saw \(tally.torn) torn documents") }
    }
  }

  /// Waits for every task of the storm's sessions to complete (starting the agent when none runs), then: every
  /// acknowledged start is a task; a task that should succeed did, and its file has the served file's SHA-256; a
  /// task that should fail left no file.
  private func checkDownloads(
    _ group: GroupContainer, manifest: String, _ lines: [StormLine], _ found: inout Findings
  ) throws {
    let served = Dictionary(try StressStorm.servedFiles(manifest), uniquingKeysWith: { a, _ in a })
    let store = try DownloadStore(container: group)
    found.ops += lines.filter { $0.verb == "start" || $0.verb == "done" }.count
    let by = MonotonicClock.nanoseconds() + UInt64(downloadWait * 1e9)
    var tasks: [DownloadTask] = []
    while true {
      tasks = try DownloadSession.allTasks(in: group).filter { $0.sessionIdentifier.hasPrefix("storm-d") }
      guard tasks.contains(where: { $0.state != .completed }), MonotonicClock.nanoseconds() < by else { break }
      try? AgentLauncher.ensureRunning(store: store, executable: nil, idleTimeout: .seconds(5))
      Thread.sleep(forTimeInterval: 0.2)
    }
    let byID = Dictionary(tasks.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
    for line in lines where line.verb == "start" && line.fields.count == 3 && byID[String(line.fields[0])] == nil {
      found.lost += 1
      found.problem("downloads: the acknowledged task \(line.fields[0]) is gone")
    }
    for line in lines where line.verb == "done" && line.fields.count == 2 && line.fields[1] == "succeeded" {
      if byID[String(line.fields[0])]?.succeeded != true {
        found.lost += 1
        found.problem("downloads: \(line.fields[0]) was seen succeeded, and is not now")
      }
    }
    for task in tasks {
      guard task.state == .completed else {
        found.hung += 1
        found.problem(
          "downloads: \(task.id) (\(task.originalURL)) not completed \(Int(downloadWait)) s after the storm")
        continue
      }
      let file = task.originalURL.lastPathComponent
      let query = task.originalURL.query.map { "?" + $0 } ?? ""
      let shouldSucceed = StressStorm.downloadFaults.first { $0.query == query }?.succeeds ?? true
      let published = FileManager.default.contents(atPath: task.destinationURL.path)
      if task.succeeded {
        let sha = published.map { SHA256.hash(data: $0).map { String(format: "%02x", $0) }.joined() }
        if sha != served[file] {
          found.torn += 1
          found.problem("downloads: \(task.destination) (\(published?.count ?? -1) bytes) is not \(file)")
        }
        if !shouldSucceed {
          found.torn += 1
          found.problem("downloads: \(task.id) (\(task.originalURL)) succeeded")
        }
      } else {
        if published != nil {
          found.torn += 1
          found.problem("downloads: the failed \(task.id) left \(task.destination)")
        }
        if shouldSucceed {
          found.lost += 1
          found.problem(
            "downloads: \(task.id) (\(task.originalURL)) failed: \(task.error?.description ?? "?") "
              + "(HTTP \(task.httpStatus.map(String.init) ?? "-"))")
        }
      }
    }
  }

  /// No temp file of an atomic replace outside `.coordination/`: this process's open swept those of dead writers
  /// (and the cache's trim its own), and every writer is dead by now. No file moved aside as damaged either
  /// (`*.corrupt-<time>-<pid>`: a suite's snapshot or journal that did not pass its checks).
  private func checkTemporaries(_ group: GroupContainer, _ found: inout Findings) {
    let root = group.url.path
    guard let walk = FileManager.default.enumerator(atPath: root) else { return }
    while let path = walk.nextObject() as? String {
      if path == CoordinationPaths.directory {
        walk.skipDescendants()
        continue
      }
      let name = (path as NSString).lastPathComponent
      if name.hasPrefix(AtomicReplace.temporaryPrefix) {
        found.torn += 1
        found.problem("temp file left: \(path)")
      } else if name.contains(".corrupt-") {
        found.torn += 1
        found.problem("a file the library found damaged and moved aside: \(path)")
      }
    }
  }
}
