// One pair of the hostile-container generator (HostileContainerTests.swift): a copy of the template container, the
// plant, every module's operations as concurrent processes, the checks.
import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination

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

  /// The operations of every module, started together.
  static func operations(root: String, server: FileServer, download: Int) throws -> [Op] {
    var ops: [Op] = []
    for operation: HelperCommand.IOFaultOperation in [
      .defaultsSet, .defaultsSynchronize, .coordinatedWrite, .coordinatedMove, .cacheStore, .activityUpdate,
      .inboxSend,
    ] {
      ops.append(try helper(operation.rawValue, ioFault(operation), root: root))
    }
    let url = server.url("/gen/20000?seed=\(download)").absoluteString
    ops.append(
      try groupctl(
        "downloads start",
        ["downloads", "start", group, url, "--to", "Downloads/h\(download).bin", "--session", "hostile"],
        root: root))
    ops.append(try groupctl("download agent", ["downloads", "agent", group, "--idle", "1"], root: root))
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
    return HostileNames(template: container.path)
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
    // The canary: outside the container; a symlink planted inside points at it.
    let canary = root.path + "/canary"
    try FileManager.default.createDirectory(atPath: canary, withIntermediateDirectories: false)
    try Data("canary".utf8).write(to: URL(fileURLWithPath: canary + "/file"))
    var canaryStat = stat()
    _ = lstat(canary + "/file", &canaryStat)
    let inside = container + "/Documents/inside"
    try Data("inside".utf8).write(to: URL(fileURLWithPath: inside))
    try FileManager.default.createDirectory(atPath: inside + "dir", withIntermediateDirectories: false)
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

    let ops = try operations(root: root.path, server: server, download: index + 1)
    findings += await finish(ops)
    findings += mustFail(combo, ops)
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
    let created = rootAfter.subtracting(rootBefore).filter { $0 != "opened.log" && !$0.hasPrefix("send-") }
    if !created.isEmpty { findings.append("escape: created beside the container: \(created.sorted())") }
    return (findings, nil)
  }

  /// Where the design says an operation must refuse, with a clear error: a registration another user owns (or
  /// that a link or a non-file replaced) decides what runs, so the hand-over never follows it
  /// (DESIGN.md: "trusted only when nobody but its owner can write it").
  static func mustFail(_ combo: HostileCombo, _ ops: [Op]) -> [String] {
    guard combo.place.name == "scheme registration faultsink",
      [.wrongOwner, .symlinkInside, .symlinkOutside, .fifo, .socket, .directory].contains(combo.kind),
      let send = ops.first(where: { $0.name == "inboxSend" })
    else { return [] }
    let acknowledged = acknowledged(send)
    return acknowledged.isEmpty ? [] : ["refused nothing: the hand-over followed the registration (\(acknowledged))"]
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
