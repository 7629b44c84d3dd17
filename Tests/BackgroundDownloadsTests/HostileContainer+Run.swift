// One pair of the hostile-container generator (HostileContainerTests.swift): a copy of the template container, the
// plant, every module's operations as concurrent processes, the checks.
import BackgroundDownloads
import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore

enum HostileRun {
  static let group = "group.com.example.hostile"
  /// Every child's bound: a child still running after it hangs (healthy runs take a few seconds; the longest
  /// documented wait of these operations is the 5 s presenter and hand-over timeouts).
  /// `GC_HOSTILE_BOUND` shortens it (a mutant's replay, where every pair may hang).
  static let bound = Double(ProcessInfo.processInfo.environment["GC_HOSTILE_BOUND"] ?? "") ?? 45
  /// The children never start the real download agent behind our back (a detached one would outlive the test):
  /// sessions start /bin/true, and the tests run the agent in the foreground, bounded, as a child of their own.
  static let environment = ["GROUPCONTAINER_DOWNLOAD_AGENT": "/bin/true"]
  static let round = 7

  /// A child of the run: gc-test-helper (a typed command) or groupctl.
  struct Op {
    var name: String
    var child: Child
  }

  static func helper(_ name: String, _ command: HelperCommand, root: String) throws -> Op {
    Op(name: name, child: try Child(command, root: root, group: group, environment: environment))
  }

  static func groupctl(_ name: String, _ arguments: [String], root: String) throws -> Op {
    Op(name: name, child: try Child(arguments + ["--root", root], executable: "groupctl", environment: environment))
  }

  static func ioFault(_ operation: HelperCommand.IOFaultOperation, round: Int = round) -> HelperCommand {
    .ioFault(operation: operation, call: nil, nth: 0, errno: EIO, round: round)
  }

  /// Waits for every op (together, one deadline); returns findings: hangs (killed), crashes, failures without a word.
  static func finish(_ ops: [Op], within seconds: Double = bound) async -> [String] {
    var findings: [String] = []
    let deadline = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
    for op in ops {
      let left = Double(deadline &- min(deadline, MonotonicClock.nanoseconds())) / 1e9
      if await !op.child.process.exited(within: max(left, 0.1)) {
        findings.append(
          "hang: \(op.name) still ran after \(Int(seconds)) s; output \(op.child.output.suffix(5)); stderr \(op.child.errors.text.suffix(800))"
        )
        op.child.kill()
        continue
      }
      await op.child.process.output()
      findings += judge(op)
    }
    return findings
  }

  /// A crash (a signal: a trap, SIGBUS, SIGSEGV) or a failure with nothing said.
  static func judge(_ op: Op) -> [String] {
    let process = op.child.process
    // gc-test-helper reports an error its command threw by Swift's trap for an error raised at top level: that is
    // the helper's way of failing with a message, not a crash of the library.
    let thrown = op.child.errors.text.contains("Fatal error: Error raised at top level:")
    if process.terminationReason == .uncaughtSignal && !thrown {
      return [
        "crash: \(op.name) ended by signal \(process.terminationStatus); stderr \(op.child.errors.text.prefix(1200))"
      ]
    }
    if process.terminationStatus != 0 && op.child.errors.text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
      && op.child.output.isEmpty
    {
      return ["unclear: \(op.name) exited \(process.terminationStatus) without a word"]
    }
    return []
  }

  /// What an `ioFault` helper acknowledged ("result ok X", "next ok X").
  static func acknowledged(_ op: Op) -> [String] {
    op.child.output.compactMap { line in
      for prefix in ["result ok ", "next ok "] where line.hasPrefix(prefix) {
        return String(line.dropFirst(prefix.count))
      }
      return nil
    }
  }

  static func seen(_ op: Op) -> String? {
    op.child.output.first { $0.hasPrefix("seen") }.map { String($0.dropFirst(5)) }
  }

  /// Waits until a long-lived helper says "ready" (or ends).
  static func ready(_ child: Child, within seconds: Double = 60) async -> Bool {
    let by = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
    while MonotonicClock.nanoseconds() < by {
      if child.output.contains(where: { $0.hasPrefix("ready") }) { return true }
      if !child.process.isRunning { return false }
      try? await Task.sleep(for: .milliseconds(20))
    }
    return false
  }

  /// The long-lived peers: the Inbox receiver of scheme "faultsink" and a presenter of the coordinated document.
  static func peers(root: String) throws -> [Op] {
    [
      try helper("inbox receiver", .inboxReceiver(scheme: "faultsink", log: root + "/opened.log"), root: root),
      try helper("presenter of doc.txt", .present(item: "Documents/doc.txt"), root: root),
    ]
  }

  /// The operations of every module, started together. `realAgent`: the download's session starts the real agent
  /// (detached, its output in `agent.log`), and no agent of ours runs: it alone must do the download.
  static func operations(root: String, server: FileServer, download: Int, realAgent: Bool = false) throws -> [Op] {
    var ops: [Op] = []
    for operation: HelperCommand.IOFaultOperation in [
      .defaultsSet, .defaultsSynchronize, .coordinatedWrite, .coordinatedMove, .cacheStore, .activityUpdate,
      .inboxSend,
    ] {
      ops.append(try helper(operation.rawValue, ioFault(operation), root: root))
    }
    let url = server.url("/gen/20000?seed=\(download)").absoluteString
    let start = ["downloads", "start", group, url, "--to", "Downloads/h\(download).bin", "--session", "hostile"]
    if realAgent {
      let agent = productsDirectory.appendingPathComponent("gc-download-agent").path
      ops.append(
        Op(
          name: "downloads start",
          child: try Child(
            start + ["--root", root], executable: "groupctl", environment: ["GROUPCONTAINER_DOWNLOAD_AGENT": agent])))
    } else {
      ops.append(try groupctl("downloads start", start, root: root))
      ops.append(try groupctl("download agent", ["downloads", "agent", group, "--idle", "1"], root: root))
    }
    ops.append(try groupctl("doctor", ["doctor", group], root: root))
    return ops
  }

  /// The template: a container in which every module's operation ran once, cleanly (so every place holds a valid
  /// file to cut, grow or replace), with the peers gone.
  static func makeTemplate(in root: TestRoot, server: FileServer) async throws -> HostileNames {
    let container = try root.container(group)
    try container.registerURLScheme("faultsink", launching: URL(fileURLWithPath: "/bin/false"))
    let peers = try peers(root: root.path)
    for peer in peers { _ = await ready(peer.child) }
    let ops = try operations(root: root.path, server: server, download: 0)
    var problems = await finish(ops)
    // The download completes (its status, commit and event written) under an agent of ours.
    let agent = try groupctl("download agent", ["downloads", "agent", group, "--idle", "1"], root: root.path)
    problems += await finish([agent])
    // Each pair runs in a `cp -a` of the template: the activities' suite keeps its journal there under a new inode
    // (`SuiteJournal.follow`), so nothing is compacted first.
    try copyDeadPresenter(container: container.path)
    for peer in peers { peer.child.kill() }
    guard problems.isEmpty else { throw HostilePlantError(description: "the template's clean round: \(problems)") }
    // doctor exits 1 on a warning (a temp file of a writer running beside it): only its crash or hang counts.
    for op in ops
    where op.name != "doctor"
      && (op.child.process.terminationStatus != 0 || op.child.output.contains(where: { $0.hasPrefix("result error") }))
    {
      throw HostilePlantError(
        description: "the template's \(op.name) failed: \(op.child.output) \(op.child.errors.text)")
    }
    var names = HostileNames(template: container.path)
    let download = ops.first { $0.name == "downloads start" }?.child.output.first { $0.count == 32 } ?? ""
    names.task = DownloadStore.taskPath(download, "task")
    names.waitingTask = try await addUnfinishedWork(root: root, server: server)
    return names
  }

  /// A dead process's presenter registration of doc.txt, at the place's fixed name: a copy of the live presenter
  /// peer's (the reaper of a later process removes a killed one's).
  static func copyDeadPresenter(container: String) throws {
    let bucket = container + "/" + HostilePlace.docBucket + "/"
    guard let registration = try? FileManager.default.contentsOfDirectory(atPath: bucket).sorted().first else { return }
    try FileManager.default.copyItem(atPath: bucket + registration, toPath: bucket + "99999.12345.1")
  }

  /// Files a clean round of the operations leaves empty or absent, made by the operations that write them, so the
  /// template holds a valid one to cut or grow: the memory-pressure message (`cache pressure normal`), the
  /// activities' authorization (`activities enable`), a download
  /// task with a control (suspended and resumed before any agent ran it) and a partial (then run by the real agent,
  /// started by a session as an app's is, which writes `agent.log`, and killed while the server stalls the body at
  /// 100,000 of 300,000 bytes — the server stalls only that first request: in each pair an agent finishes it).
  /// Returns the unfinished task's path without its extension.
  static func addUnfinishedWork(root: TestRoot, server: FileServer) async throws -> String {
    let container = root.path + "/" + group
    var problems = await finish([
      try groupctl("pressure", ["cache", "pressure", "normal", group], root: root.path),
      try groupctl("activities enable", ["activities", "enable", group], root: root.path),
    ])
    let stalledTarget = "/gen/300000?seed=9999&stall=100000&faults=1"
    let stalled = server.url(stalledTarget).absoluteString
    let start = try groupctl(
      "downloads start (partial)",
      ["downloads", "start", group, stalled, "--to", "Downloads/partial.bin", "--session", "hostile"], root: root.path)
    problems += await finish([start])
    let id = start.child.output.first { $0.count == 32 } ?? ""
    for verb in ["suspend", "resume"] {
      problems += await finish([try groupctl("downloads \(verb)", ["downloads", verb, group, id], root: root.path)])
    }
    let agent = productsDirectory.appendingPathComponent("gc-download-agent").path
    let smallTarget = "/gen/1000?seed=9998"
    let small = server.url(smallTarget).absoluteString
    let trigger = Op(
      name: "downloads start (real agent)",
      child: try Child(
        [
          "downloads", "start", group, small, "--to", "Downloads/small.bin", "--session", "hostile", "--root",
          root.path,
        ],
        executable: "groupctl", environment: ["GROUPCONTAINER_DOWNLOAD_AGENT": agent]))
    problems += await finish([trigger])
    let partial = container + "/" + DownloadStore.taskPath(id, "partial")
    let by = MonotonicClock.nanoseconds() + UInt64(bound * 1e9)
    var size: Int64 = 0
    while size < 100_000 && MonotonicClock.nanoseconds() < by {
      var info = stat()
      size = lstat(partial, &info) == 0 ? Int64(info.st_size) : 0
      if size < 100_000 { try? await Task.sleep(for: .milliseconds(50)) }
    }
    let store = try DownloadStore(
      container: GroupContainer(identifier: group, root: URL(fileURLWithPath: root.path, isDirectory: true)))
    // Every agent of this root is stopped before any is killed. The holder is not the only one: an agent started
    // by the trigger's session tries the lock for about a second, and were the holder killed first it would take
    // the lock and finish the task (its second request is not stalled) — in fresh CI runs the template then had no
    // partial. A stopped agent takes nothing.
    let agents = killAgents(root: root.path)
    if agents.count > 1 { print("HostileContainerTests: the template's kill stopped \(agents.count) agents at once") }
    while store.isHeld(DownloadStore.agentLockPath) && MonotonicClock.nanoseconds() < by {
      try? await Task.sleep(for: .milliseconds(20))
    }
    if size < 100_000 || !FileManager.default.fileExists(atPath: partial) {
      // Seen rarely in whole runs, never alone: the evidence goes with the message (the root is removed after).
      let stats = try? await server.stats(for: stalledTarget)
      let smallStats = try? await server.stats(for: smallTarget)
      let log = (try? String(contentsOfFile: container + "/" + DownloadStore.directory + "/agent.log", encoding: .utf8))
      problems.append(
        "no partial of \(id) after the kill (\(size) of 100,000 bytes seen, \(agents.count) agents killed, "
          + "the agent lock \(store.isHeld(DownloadStore.agentLockPath) ? "still held" : "free"); the task: "
          + "\(String(describing: store.task(id))); the stalled target served: \(String(describing: stats)), the "
          + "trigger's small one: \(String(describing: smallStats)); "
          + "agent.log ends: \(log.map { String($0.suffix(3000)) } ?? "(none)"); the trigger (exit "
          + "\(trigger.child.process.terminationStatus)) printed \(trigger.child.output), on stderr: "
          + "\(trigger.child.errors.text.suffix(2000)); agent.lock names: "
          + "\(String(describing: store.holderPID(DownloadStore.agentLockPath))); "
          + "download agents running now, any root: \(agentsAnywhere()))")
    }
    guard problems.isEmpty else { throw HostilePlantError(description: "the template's unfinished work: \(problems)") }
    return (DownloadStore.taskPath(id, "task") as NSString).deletingPathExtension
  }

  /// Every process running a download agent, with its command line (evidence for a failure message).
  static func agentsAnywhere() -> [String] {
    processes(commandLineContaining: "--identifier").filter {
      (try? FileSystem.readLink("/proc/\($0.pid)/exe"))?.hasSuffix("/gc-download-agent") == true
    }.map { "\($0.pid): \($0.commandLine)" }
  }

  /// Kills every download agent whose command line names `root` (its `--root`), all stopped first: one killed
  /// before another is stopped would let that one take the lock and run on. Returns those killed.
  @discardableResult
  static func killAgents(root: String) -> [(pid: Int32, commandLine: String)] {
    let agents = processes(commandLineContaining: root).filter {
      (try? FileSystem.readLink("/proc/\($0.pid)/exe"))?.hasSuffix("/gc-download-agent") == true
    }
    for agent in agents { kill(agent.pid, SIGSTOP) }
    for agent in agents { kill(agent.pid, SIGKILL) }
    return agents
  }

  /// Runs one pair in a copy of the template; returns its findings (empty: none), each naming the pair.
  static func run(_ combo: HostileCombo, template: TestRoot, names: HostileNames, server: FileServer, index: Int)
    async -> (findings: [String], skipped: String?)
  {
    do {
      let (findings, skipped) = try await runThrowing(
        combo, template: template, names: names, server: server, index: index)
      return (findings.map { "\(combo): \($0)" }, skipped.map { "\(combo): \($0)" })
    } catch {
      return (["\(combo): the run failed: \(error)"], nil)
    }
  }

  private static func runThrowing(
    _ combo: HostileCombo, template: TestRoot, names: HostileNames, server: FileServer, index: Int
  ) async throws -> ([String], String?) {
    let root = try TestRoot()
    let container = root.path + "/" + group
    guard try runTool("/bin/cp", ["-a", template.path + "/" + group, container]) == 0 else {
      throw HostilePlantError(description: "cp -a of the template failed")
    }
    // The canary outside the container and the file inside it that planted links point at.
    let targets = try LinkTargets(root: root.path, container: container)
    let (canary, inside, canaryStat) = (targets.canary, targets.inside, targets.canaryFile)
    let rootBefore = Set(try FileManager.default.contentsOfDirectory(atPath: root.path))

    var names = names
    var skipped: String?
    func plantIt() throws {
      let path = combo.place.path(names)
      guard !path.isEmpty, !path.hasSuffix("/") else {
        skipped = "the template has no such place"
        return
      }
      planted = container + "/" + path
      skipped = try plant(
        combo.kind, at: container + "/" + path, isDirectory: combo.place.isDirectory, canary: canary, inside: inside)
    }
    var planted: String?
    // An immutable plant (read-only as root) would keep the container from being removed.
    defer {
      if combo.kind == .readOnly, geteuid() == 0, let planted { _ = try? runTool("/usr/bin/chattr", ["-i", planted]) }
    }
    var findings: [String] = []
    try combo.place.prepare?(root.path)
    if !combo.place.live { try plantIt() }
    let peers = try peers(root: root.path)
    defer { for peer in peers where peer.child.process.isRunning { peer.child.kill() } }
    let receiverReady = await ready(peers[0].child)
    _ = await ready(peers[1].child)
    if combo.place.live {
      let pid = peers[0].child.pid
      let inboxes = (try? FileManager.default.contentsOfDirectory(atPath: container + "/.coordination/inbox")) ?? []
      if receiverReady, let inbox = inboxes.first(where: { $0.hasPrefix("\(pid).") }) {
        names.receiverInbox = ".coordination/inbox/" + inbox
        try plantIt()
      } else {
        skipped = "the receiver did not start: \(peers[0].child.errors.text.suffix(300))"
      }
    }
    if let skipped { return ([], skipped) }

    let agentLog = combo.place.name == "download agent log"
    let ops = try operations(root: root.path, server: server, download: index + 1, realAgent: agentLog)
    findings += await finish(ops)
    if agentLog { findings += await checkAgentLog(combo, ops, container: container, download: index + 1) }
    findings += await mustFail(combo, ops, root: root.path)
    // The peers lived through it all; a crash of theirs is a finding, any other end their own business.
    for peer in peers {
      if !peer.child.process.isRunning { findings += judge(peer) }
      peer.child.kill()
    }

    // Read back, in fresh processes: nothing acknowledged is lost.
    let byName = Dictionary(ops.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    let readers = [
      try helper("defaults read-back", ioFault(.defaultsSet, round: 900), root: root.path),
      try helper("cache read-back", ioFault(.cacheStore, round: 900), root: root.path),
      try helper("activity read-back", ioFault(.activityUpdate, round: 900), root: root.path),
      try groupctl("downloads list", ["downloads", "list", group], root: root.path),
    ]
    findings += await finish(readers)
    findings += lost(byName, readers: readers, container: container)

    // Nothing escaped: the canary as it was, nothing new beside the container.
    var after = stat()
    let canaryNow = try? String(contentsOfFile: canary + "/file", encoding: .utf8)
    if lstat(canary + "/file", &after) != 0 || canaryNow != "canary"
      || after.st_mtim.tv_sec != canaryStat.st_mtim.tv_sec
      || after.st_mtim.tv_nsec != canaryStat.st_mtim.tv_nsec || after.st_ino != canaryStat.st_ino
    {
      findings.append("escape: the canary file outside the container changed (now \(canaryNow ?? "unreadable"))")
    }
    let canaryList = (try? FileManager.default.contentsOfDirectory(atPath: canary)) ?? []
    if canaryList != ["file"] { findings.append("escape: the canary directory now holds \(canaryList)") }
    let rootAfter = Set(try FileManager.default.contentsOfDirectory(atPath: root.path))
    let created = rootAfter.subtracting(rootBefore).filter {
      $0 != "opened.log" && $0 != "relaunched.log" && !$0.hasPrefix("send-")
    }
    if !created.isEmpty { findings.append("escape: created beside the container: \(created.sorted())") }
    return (findings, nil)
  }

  /// Where the design says an operation must refuse, with a clear error: a registration another user owns (or
  /// that a link or a non-file replaced) decides what runs, so the hand-over never follows it
  /// (DESIGN.md: "trusted only when nobody but its owner can write it").
  ///
  /// The same for a download session's relaunch record: the agent starts the program it names, so a record another
  /// user owns, or a link or a non-file in its place, is never run (the agent logs why). A read-only one (0400, and
  /// immutable as root) keeps the rule and is run: that half shows the rule's check can see a relaunch.
  static func mustFail(_ combo: HostileCombo, _ ops: [Op], root: String) async -> [String] {
    if combo.place.name == "download session relaunch record" {
      let log = root + "/relaunched.log"
      if [.wrongOwner, .symlinkInside, .symlinkOutside, .fifo, .socket, .directory].contains(combo.kind) {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return text.isEmpty ? [] : ["refused nothing: the agent started the program the planted record names (\(text))"]
      }
      guard combo.kind == .readOnly else { return [] }
      // The relaunched helper is detached from the agent: its first line may come after the agent exited.
      let by = MonotonicClock.nanoseconds() + UInt64(bound * 1e9)
      while MonotonicClock.nanoseconds() < by {
        if ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("relaunched hostile") { return [] }
        try? await Task.sleep(for: .milliseconds(50))
      }
      return ["the agent did not start the app of a valid, read-only relaunch record within \(Int(bound)) s"]
    }
    guard combo.place.name == "scheme registration faultsink",
      [.wrongOwner, .symlinkInside, .symlinkOutside, .fifo, .socket, .directory].contains(combo.kind),
      let send = ops.first(where: { $0.name == "inboxSend" })
    else { return [] }
    let acknowledged = acknowledged(send)
    return acknowledged.isEmpty ? [] : ["refused nothing: the hand-over followed the registration (\(acknowledged))"]
  }

  /// A valid relaunch record for the session "hostile" in the container under `root`: gc-test-helper
  /// `dlRelaunched`, which writes "relaunched hostile <pid>" to `<root>/relaunched.log` and takes the events.
  static func registerRelaunch(root: String) throws {
    let container = try GroupContainer(identifier: group, root: URL(fileURLWithPath: root, isDirectory: true))
    try DownloadStore(container: container).register(
      RelaunchRecord(
        executable: helperExecutable.path,
        arguments: helperArguments(.dlRelaunched(log: root + "/relaunched.log"), root: root, group: group)),
      for: "hostile")
  }

  /// At the agent log's place the session started the real agent (detached, `agent.log` its output): whatever is
  /// planted there, the download completes (the served bytes published) and nothing is written through a link;
  /// where a writable regular file is left, the agent's log is in it. The agent is then killed (it would idle 30 s).
  static func checkAgentLog(_ combo: HostileCombo, _ ops: [Op], container: String, download: Int) async -> [String] {
    var findings: [String] = []
    let published = container + "/Downloads/h\(download).bin"
    // The agents of this copy, found by their `--root` (unique to it). Not by the pid in agent.lock: where this
    // pair's agent never locked it, that is the template's agent's, killed long ago — a pid another test's agent
    // may have by now.
    defer { killAgents(root: URL(fileURLWithPath: container).deletingLastPathComponent().path) }
    let by = MonotonicClock.nanoseconds() + UInt64(bound * 1e9)
    var whole = false
    while !whole && MonotonicClock.nanoseconds() < by {
      whole =
        FileManager.default.contents(atPath: published).map {
          FileServer.mismatch([UInt8]($0), size: 20_000, seed: UInt64(download)) == nil
        } ?? false
      if !whole { try? await Task.sleep(for: .milliseconds(50)) }
    }
    if !whole {
      let start = ops.first { $0.name == "downloads start" }
      findings.append(
        "stopped: the download was not published within \(Int(bound)) s by the agent the session started "
          + "(downloads start: \(start?.child.output.suffix(3) ?? []) \(start?.child.errors.text.suffix(300) ?? ""))")
    }
    if (try? String(contentsOfFile: container + "/Documents/inside", encoding: .utf8)) != "inside" {
      findings.append("escape: the agent's log was written through a link into Documents/inside")
    }
    if [.empty, .truncated, .sparse, .wrongOwner].contains(combo.kind) {
      var info = stat()
      let path = container + "/.coordination/downloads/agent.log"
      let text = lstat(path, &info) == 0 && info.st_size < 1 << 20 ? FileManager.default.contents(atPath: path) : nil
      if !(text.map { String(decoding: $0, as: UTF8.self).contains("download agent") } ?? false) {
        findings.append("the agent's log is not in agent.log (a regular file, \(info.st_size) bytes)")
      }
    }
    return findings
  }

  /// Every acknowledged value read back by the fresh processes (or, for files the test can read whole, here).
  static func lost(_ ops: [String: Op], readers: [Op], container: String) -> [String] {
    var findings: [String] = []
    func check(_ writers: [String], reader: Op, _ holds: (String, String) -> Bool) {
      let acks = writers.flatMap { ops[$0].map(acknowledged) ?? [] }
      guard !acks.isEmpty else { return }
      guard let seen = seen(reader) else {
        findings.append(
          "lost?: \(reader.name) could not read what was acknowledged (\(acks)): \(reader.child.errors.text.suffix(400))"
        )
        return
      }
      for ack in acks where !holds(ack, seen) {
        findings.append("lost: \(ack) acknowledged, \(reader.name) saw \(seen)")
      }
    }
    let pairs = { (seen: String) in Set(seen.split(separator: ",").map(String.init)) }
    check(["defaultsSet", "defaultsSynchronize"], reader: readers[0]) { pairs($1).contains($0) }
    check(["cacheStore"], reader: readers[1]) { ack, seen in pairs(seen).contains("\(ack)=ok") }
    // One writer: the last acknowledged update is what a fresh process reads.
    if let last = ops["activityUpdate"].flatMap({ acknowledged($0).last }) {
      check(["activityUpdate"], reader: readers[2]) { ack, seen in ack != last || seen == last }
    }
    if let start = ops["downloads start"], start.child.process.terminationStatus == 0,
      let id = start.child.output.first(where: { $0.count == 32 })
    {
      let list = readers[3].child.output.joined(separator: "\n")
      if readers[3].child.process.terminationStatus != 0 || !list.contains(id) {
        findings.append(
          "lost: the acknowledged download task \(id) is not listed: \(list) \(readers[3].child.errors.text)")
      }
    }
    // The coordinated document: whole, from the last acknowledged round.
    if let last = ops["coordinatedWrite"].flatMap({ acknowledged($0).last }) {
      let unit = Array("\(last);".utf8)
      let expected = Data((0..<20_000).map { unit[$0 % unit.count] })
      var info = stat()
      let path = container + "/Documents/doc.txt"
      if lstat(path, &info) != 0 || info.st_mode & S_IFMT != S_IFREG
        || FileManager.default.contents(atPath: path) != expected
      {
        findings.append("lost: Documents/doc.txt is not the acknowledged \(last)")
      }
    }
    if let last = ops["coordinatedMove"].flatMap({ acknowledged($0).last }) {
      let expected = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7) })
      var info = stat()
      let path = container + "/Documents/m/" + last
      if lstat(path, &info) != 0 || info.st_mode & S_IFMT != S_IFREG
        || FileManager.default.contents(atPath: path) != expected
      {
        findings.append("lost: the acknowledged move to Documents/m/\(last) is not there whole")
      }
    }
    for name in ops["inboxSend"].map(acknowledged) ?? [] {
      // Sent as send-<round> (its bytes say so); a name taken already gets a "-<n>" suffix in the Inbox.
      let unit = Array("\(name.split(separator: "-").prefix(2).joined(separator: "-"));".utf8)
      let expected = Data((0..<4096).map { unit[$0 % unit.count] })
      var info = stat()
      let path = container + "/Documents/Inbox/" + name
      if lstat(path, &info) != 0 || info.st_mode & S_IFMT != S_IFREG
        || FileManager.default.contents(atPath: path) != expected
      {
        findings.append("lost: the acknowledged hand-over Documents/Inbox/\(name) is not there whole")
      }
    }
    return findings
  }
}
