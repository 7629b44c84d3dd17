import ArgumentParser
import BackgroundDownloads
import Crypto
import Foundation
import GroupContainer
import LiveActivities
import Synchronization
import SystemLayer

/// `groupctl stress storm`: writers of every kind at once under random SIGKILL and SIGSTOP/SIGCONT, then a
/// history check in a fresh process (issue #36, item 3).
struct StressStorm: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "storm",
    abstract: "Writers of every kind at once, randomly killed and stopped; then a checker verifies their history.",
    discussion: """
      Worker processes of every module run together for --seconds: defaults writers (sets of unique tokens, \
      update() increments of one counter, a key whose value only rises), image cache storers and readers sharing \
      a few keys (a small disk limit, so trims run too), coordinated writers of one document (`stress \
      files-writer`) and a presenter of it, update(using:) of one Live Activity's count, Inbox hand-overs \
      (`send(file:toScheme:)`) to a receiver handling their scheme, and downloads from gc-file-server (found beside groupctl, or \
      --file-server), some through faults (a dropped connection, a 404, a slow or late answer). Meanwhile a \
      random worker or the download agent is SIGKILLed (and restarted) or SIGSTOPped for up to --max-stop-ms, \
      one at a time. Every worker logs each acknowledged operation after the call returned, with a unique token.

      Then `stress storm-check` runs in a fresh process: no acknowledged defaults write lost or rolled back \
      (counters never go back, every update() result unique, the export holds them too; the same for the \
      activity's count), every cache read \
      equals a value stored for that key and never one a finished store had replaced, the coordinated document \
      whole and holding every acknowledged increment, every acknowledged hand-over's copy in the Inbox under the \
      name send returned, whole (and no receiver given a torn one), every completed download has its SHA-256 (a failed one \
      left no file), no temp file outside .coordination/ after a sweep, no call past its documented bound plus \
      --hang-slack (the time a process was stopped not counted). Its last line, the command's last line: \
      ops=<n> kills=<n> stops=<n> lost=<n> torn=<n> hung=<n>. Exit status 0 only when lost, torn and hung are 0.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "How long the storm lasts, in seconds.") var seconds: Double = 60
  @Option(help: "Defaults writer processes.") var defaultsWriters = 3
  @Option(help: "Image cache storer processes.") var cacheStorers = 2
  @Option(help: "Image cache reader processes.") var cacheReaders = 2
  @Option(help: "Coordinated writer processes.") var fileWriters = 2
  @Option(help: "Presenter processes of the coordinated document.") var presenters = 1
  @Option(help: "Download processes (0 without a file server).") var downloaders = 1
  @Option(help: "Processes that update one Live Activity.") var activityWriters = 2
  @Option(help: "Processes that hand files over to the Inbox of a receiver.") var inboxSenders = 1
  @Option(help: "Receiver processes of those hand-overs (the handlers of their scheme).") var inboxReceivers = 1
  @Option(help: "The gc-file-server executable (default: beside groupctl; no downloads when there is none).")
  var fileServer: String?
  @Option(help: "Longest SIGSTOP, in milliseconds.") var maxStopMs = 800
  @Option(help: "Seconds a call may take beyond its documented bound before it counts as hung.")
  var hangSlack: Double = 30
  @Option(help: "Seed of the kills and stops (default: random).") var seed: UInt64?
  @Option(help: "Keep the logs in this directory (default: a temp directory, removed when the check passes).")
  var logs: String?

  static let document = "Documents/storm.json"

  func run() throws {
    let group = try container.open()
    let logs =
      self.logs.map { URL(fileURLWithPath: $0) }
      ?? FileManager.default.temporaryDirectory.appendingPathComponent("groupctl-storm-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
    let stopFile = logs.appendingPathComponent("stop").path
    try? FileManager.default.removeItem(atPath: stopFile)
    try StressFiles.reset(try group.url(forRelativePath: Self.document), in: group)
    let executable = ProcessSpawn.currentExecutable() ?? CommandLine.arguments[0]
    let base = [container.groupID] + (container.root.map { ["--root", $0] } ?? [])

    let server = try downloaders > 0 ? StormFileServer(fileServer ?? sibling("gc-file-server"), logs: logs) : nil
    if downloaders > 0 && server == nil {
      Output.line("downloads: none (no gc-file-server beside groupctl; --file-server names one)")
    }
    defer { server?.stop() }

    var slots: [StormSlot] = []
    // `idle`: how long a worker may go without an acknowledged operation beyond --hang-slack (a call killed
    // before it returned logs nothing: a hang must be seen while it lasts); nil for presenters, which act only
    // when others write.
    func add(
      _ name: String, _ count: Int, idle: Double? = 5, _ arguments: @escaping (Int, Int, String) -> [String]
    ) {
      for index in 0..<count {
        slots.append(
          StormSlot(
            name: "\(name)-\(index)", idle: idle.map { $0 + hangSlack }, arguments: { arguments(index, $0, $1) }))
      }
    }
    let worker = { (kind: String, extra: [String]) in
      { (slot: Int, generation: Int, log: String) in
        ["stress", "storm-worker"] + base + [
          "--kind", kind, "--slot", "\(slot)", "--generation", "\(generation)", "--log", log, "--stop-file", stopFile,
        ] + extra
      }
    }
    add("defaults", defaultsWriters, worker("defaults", []))
    add("cache-store", cacheStorers, worker("cache-store", []))
    add("cache-read", cacheReaders, worker("cache-read", []))
    if activityWriters > 0 {
      _ = try Activity<StormAttributes>.request(
        attributes: StormAttributes(run: UUID().uuidString),
        content: ActivityContent(state: StormAttributes.ContentState(count: 0), staleDate: nil), in: group)
      add("activity", activityWriters, worker("activity", []))
    }
    if inboxSenders > 0 {
      // Started by nobody: a send while every receiver is dead or stopped is not answered, and not acknowledged.
      try group.registerURLScheme(StressStormWorker.inboxScheme, launching: URL(fileURLWithPath: "/bin/false"))
      add("inbox-receiver", max(1, inboxReceivers), idle: nil, worker("inbox-receiver", []))
      add("inbox-send", inboxSenders, worker("inbox-send", []))
    }
    add("files-writer", fileWriters) { slot, _, log in
      ["stress", "files-writer"] + base + [
        "--document", Self.document, "--index", "\(slot)", "--ops", "\(Int.max)", "--log", log, "--stop-file",
        stopFile, "--timed",
      ]
    }
    add("files-presenter", presenters, idle: nil) { _, _, log in
      ["stress", "files-presenter"] + base + ["--document", Self.document, "--log", log, "--stop-file", stopFile]
    }
    if let server {
      // A download worker waits up to 60 s for its task to complete.
      let arguments = worker("download", ["--server", server.url, "--manifest", server.manifest])
      add("download", downloaders, idle: 65, arguments)
    }

    let chaos = StressLog(path: logs.appendingPathComponent("chaos.log").path)
    let live = StormProcesses()
    if let server { live.add(server.process) }
    Interrupts.onInterrupt { live.killAll() }
    // Before any worker starts: a container whose downloads signal is refused (a link planted there) ended the
    // storm here with its workers left running (PlantedKillStormTests).
    let agent = try DownloadStore(container: group)
    do {
      for slot in slots { try slot.start(executable, logs: logs, live: live) }
    } catch {
      live.killAll()
      throw error
    }
    var random = SplitMix64(seed: seed ?? UInt64.random(in: 1...UInt64.max))
    let end = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
    var unexpected = 0
    var stops: [(UInt64, UInt64)] = []
    while MonotonicClock.nanoseconds() < end {
      Thread.sleep(forTimeInterval: Double.random(in: 0.03...0.2, using: &random))
      for slot in slots { if let hung = slot.hangReport(stops: stops) { chaos.append("hung \(hung)") } }
      // A worker that ended by itself is restarted; it is reported (the storm's own kills are not).
      for slot in slots where !slot.isRunning {
        unexpected += 1
        chaos.append("exit \(slot.name) \(slot.exitDescription)")
        try slot.start(executable, logs: logs, live: live)
      }
      let target = Int.random(in: 0...slots.count, using: &random)
      let agentPID = server == nil ? nil : Self.agentPID(agent)
      guard target < slots.count || agentPID != nil else { continue }
      let pid = target < slots.count ? slots[target].pid : agentPID!
      let name = target < slots.count ? slots[target].name : "agent"
      // Signals go only to a worker not reaped yet (its pid is still its own).
      guard target == slots.count || slots[target].isRunning else { continue }
      // A worker that has acknowledged nothing for a while is not killed: a kill would hide its hang.
      let quiet = target < slots.count && slots[target].idle > 2
      if Double.random(in: 0..<1, using: &random) < 0.35 && !quiet {
        _ = Signals.send(SIGKILL, to: pid)
        chaos.append("kill \(name)")
        if target < slots.count {
          slots[target].waitForExit()
          try slots[target].start(executable, logs: logs, live: live)
        }
      } else {
        let from = MonotonicClock.nanoseconds()
        _ = Signals.send(SIGSTOP, to: pid)
        Thread.sleep(forTimeInterval: Double(Int.random(in: 20...max(20, maxStopMs), using: &random)) / 1000)
        _ = Signals.send(SIGCONT, to: pid)
        stops.append((from, MonotonicClock.nanoseconds()))
        chaos.append("stop \(name) \(from) \(stops[stops.count - 1].1)")
      }
    }

    // The end: every worker finishes its operation and exits; one that does not within the bound is hung.
    _ = FileManager.default.createFile(atPath: stopFile, contents: nil)
    let exitBy = MonotonicClock.nanoseconds() + UInt64((hangSlack + 30) * 1e9)
    for slot in slots {
      while slot.isRunning && MonotonicClock.nanoseconds() < exitBy { Thread.sleep(forTimeInterval: 0.02) }
      if slot.isRunning {
        chaos.append("hung \(slot.name) did not exit within \(Int(hangSlack + 30)) s of the stop")
        _ = Signals.send(SIGKILL, to: slot.pid)
        slot.waitForExit()
      } else if let status = slot.unexpectedExit {
        unexpected += 1
        chaos.append("exit \(slot.name) \(status)")
      }
    }

    // The check, in a fresh process: it opens the container anew (the sweep), waits for the downloads and reads
    // everything back. Its output is ours; its last line is the summary.
    let check = try ProcessSpawn.Reaped(
      executable: executable,
      arguments: ["stress", "storm-check"] + base + [
        "--logs", logs.path, "--document", Self.document, "--hang-slack", "\(hangSlack)",
      ] + (server.map { ["--manifest", $0.manifest] } ?? []))
    live.add(check)
    while check.termination == nil { Thread.sleep(forTimeInterval: 0.05) }
    if server != nil, let pid = Self.agentPID(agent) {
      // The agent would exit when idle; a test run must not leave it behind.
      _ = Signals.send(SIGKILL, to: pid)
      while agent.isHeld(DownloadStore.agentLockPath) { Thread.sleep(forTimeInterval: 0.02) }
    }
    let passed = check.termination == .exited(0) && unexpected == 0
    if passed && self.logs == nil { try? FileManager.default.removeItem(at: logs) }
    if !passed {
      Output.error("groupctl: the storm's logs are in \(logs.path)")
      throw ExitCode(1)
    }
  }

  /// The file next to this executable.
  private func sibling(_ name: String) -> String {
    URL(fileURLWithPath: ProcessSpawn.currentExecutable() ?? "").deletingLastPathComponent()
      .appendingPathComponent(name).path
  }

  /// The running download agent's pid: the holder of the agent lock, if that process is the agent.
  static func agentPID(_ store: DownloadStore) -> Int32? {
    guard store.isHeld(DownloadStore.agentLockPath), let pid = store.holderPID(DownloadStore.agentLockPath),
      let exe = try? FileSystem.readLink("/proc/\(pid)/exe"), exe.hasSuffix("/" + AgentLauncher.executableName)
    else { return nil }
    return pid
  }

  /// The faults of the storm's downloads (queries of gc-file-server), taken in turn, and whether the task should
  /// succeed.
  static let downloadFaults: [(query: String, succeeds: Bool)] = [
    ("", true),
    ("?drop=4000&faults=1", true),  // the connection closes once; the agent resumes with a Range
    ("?status=404", false),  // an error status: the task fails and nothing is published
    ("?rate=4000000", true),  // slow: long enough to be killed or stopped mid-transfer
    ("?delay=200", true),
  ]

  static func downloadFault(_ n: Int) -> (query: String, succeeds: Bool) { downloadFaults[n % downloadFaults.count] }

  /// The served files of a manifest: `<name> <sha256>` per line.
  static func servedFiles(_ manifest: String) throws -> [(name: String, sha256: String)] {
    try String(contentsOfFile: manifest, encoding: .utf8).split(separator: "\n").compactMap { line in
      let parts = line.split(separator: " ")
      return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
    }
  }
}

/// One worker of the storm: its command line and, while it runs, its process. A restart is a new generation.
final class StormSlot {
  let name: String
  let arguments: (Int, String) -> [String]
  private(set) var generation = -1
  private var process: ProcessSpawn.Reaped?
  /// Seconds without an acknowledged operation (the time any process was stopped not counted) that make a hang.
  let idleBound: Double?
  private var log = ""
  /// The log's size when last looked at, and when (monotonic) it last grew or the process started.
  private var logSize: UInt64 = 0
  private var activeAt: UInt64 = 0
  private var reported = false
  /// Seconds without an acknowledged operation, as of the last `hangReport`.
  private(set) var idle = 0.0

  init(name: String, idle: Double?, arguments: @escaping (Int, String) -> [String]) {
    self.name = name
    self.idleBound = idle
    self.arguments = arguments
  }

  /// What to report when this generation has gone past its idle bound, once per generation.
  func hangReport(stops: [(UInt64, UInt64)]) -> String? {
    guard let idleBound, !reported, isRunning else { return nil }
    let now = MonotonicClock.nanoseconds()
    let size = UInt64((try? FileSystem.status(log))?.size ?? 0)
    if size != logSize {
      logSize = size
      activeAt = now
      idle = 0
      return nil
    }
    let stopped = stops.reduce(UInt64(0)) { sum, stop in sum + (stop.1 > activeAt ? stop.1 - max(stop.0, activeAt) : 0)
    }
    idle = Double(now - activeAt) / 1e9 - Double(stopped) / 1e9
    guard idle > idleBound else { return nil }
    reported = true
    return "\(name) (pid \(pid)) acknowledged nothing for \(Int(idle)) s"
  }

  var pid: Int32 { process?.pid ?? 0 }
  var isRunning: Bool { process?.termination == nil }

  func start(_ executable: String, logs: URL, live: StormProcesses) throws {
    generation += 1
    log = logs.appendingPathComponent("\(name).log").path
    let null = try SystemFD.open("/dev/null", .writeOnly)
    // The libraries' log (swift-log on stderr) goes beside the history, not into the storm's output.
    let errors = try SystemFD.open(logs.appendingPathComponent("\(name).stderr").path, [.writeOnly, .create, .append])
    let started = try ProcessSpawn.Reaped(
      executable: executable, arguments: arguments(generation, log), output: null, error: errors)
    live.add(started)
    process = started
    activeAt = MonotonicClock.nanoseconds()
    reported = false
    idle = 0
  }

  func waitForExit() {
    while isRunning { Thread.sleep(forTimeInterval: 0.001) }
  }

  /// How it ended, when that was not a clean exit; nil while it runs or after exit status 0.
  var unexpectedExit: String? {
    guard let termination = process?.termination, termination != .exited(0) else { return nil }
    return exitDescription
  }

  var exitDescription: String {
    switch process?.termination {
    case .exited(let status)?: return "status \(status)"
    case .signaled(let signal)?: return "signal \(signal)"
    case nil: return "running"
    }
  }
}

/// The processes the storm started, for an interrupt: each one still running is woken (SIGCONT) and killed. Only
/// those not reaped yet: a reaped one's pid may be another process's by now.
final class StormProcesses: Sendable {
  private let processes = Mutex<[ProcessSpawn.Reaped]>([])
  func add(_ process: ProcessSpawn.Reaped) {
    processes.withLock { list in
      list.removeAll { $0.termination != nil }
      list.append(process)
    }
  }
  func killAll() {
    for process in processes.withLock({ $0 }) where process.termination == nil {
      _ = Signals.send(SIGKILL, to: process.pid)
      _ = Signals.send(SIGCONT, to: process.pid)
    }
  }
}

/// gc-file-server as the storm's download source: serves a few files of random bytes made for the run, listed with
/// their SHA-256 in a manifest; stops when its stdin closes.
final class StormFileServer {
  var url = ""
  let manifest: String
  let process: ProcessSpawn.Reaped
  private var input: DescriptorBox?

  /// nil when there is no executable at `path`.
  init?(_ path: String, logs: URL) throws {
    guard ProcessSpawn.isExecutable(path) else { return nil }
    let served = logs.appendingPathComponent("served")
    try FileManager.default.createDirectory(at: served, withIntermediateDirectories: true)
    var lines: [String] = []
    var random = SystemRandomNumberGenerator()
    for size in [9_000, 64_000, 300_000, 1_200_000] {
      let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &random) }
      let name = "f\(size).bin"
      try Data(bytes).write(to: served.appendingPathComponent(name))
      lines.append("\(name) \(SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())")
    }
    manifest = logs.appendingPathComponent("served.manifest").path
    try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: manifest))
    let (stdinRead, stdinWrite) = try ProcessSpawn.pipe().split()
    let (stdoutRead, stdoutWrite) = try ProcessSpawn.pipe().split()
    process = try ProcessSpawn.Reaped(
      executable: path, arguments: ["--root", served.path], input: stdinRead.fd.borrowedView,
      output: stdoutWrite.fd.borrowedView)
    // Only the server keeps its ends: our copy of its stdin's read end would keep it from seeing our close, and of
    // its stdout's write end the read below from seeing a server that exited. Both close here.
    _ = consume stdinRead
    _ = consume stdoutWrite
    input = stdinWrite
    var text = ""
    var buffer = [UInt8](repeating: 0, count: 256)
    while !text.contains("\n") {
      let n = (try? buffer.withUnsafeMutableBytes { try stdoutRead.fd.read(into: $0) }) ?? 0
      guard n > 0 else {
        stop()
        throw CommandFailure("gc-file-server (\(path)) exited before it listened")
      }
      text += String(decoding: buffer[0..<n], as: UTF8.self)
    }
    guard let port = text.split(separator: "\n").first.flatMap({ Int($0.dropFirst("listening ".count)) }) else {
      stop()
      throw CommandFailure("gc-file-server said '\(text)', not 'listening <port>'")
    }
    url = "http://127.0.0.1:\(port)"
  }

  /// Closes its stdin and waits for it to exit.
  func stop() {
    input = nil  // closes it
    let by = MonotonicClock.nanoseconds() + 10_000_000_000
    while process.termination == nil && MonotonicClock.nanoseconds() < by { Thread.sleep(forTimeInterval: 0.02) }
    if process.termination == nil { _ = Signals.send(SIGKILL, to: process.pid) }
  }
}
