// Many small downloads and many tasks (issue #37, items 1 and 2), against curl and aria2c run as child processes in
// the same iteration, from the same gc-file-server on 127.0.0.1, into the same file system:
//
//   N files of S kB: agent ÷ peers   one iteration runs, in an order that rotates, (a) the agent: N tasks at once
//                                    until the Nth completion event reaches this attached process (every file fsynced
//                                    and published with a directory fsync before its event; 16 connections, as
//                                    aria2c gets); (b) `aria2c -j16`;
//                                    (c) `curl --parallel` (its default, 50 at once) followed by one `sync -f` of the
//                                    file system; (d) the durable floor (DurableFloor.swift): this process fetching
//                                    the files with the agent's HTTP client and durability rule (fsync, rename,
//                                    shared directory fsync) and no bookkeeping — what the agent's work would cost
//                                    were its tasks, records, events and coordination free. Metrics: each side's
//                                    time, the agent's speed as a percentage of each peer's (> 100: the agent is
//                                    faster) and the floor's as a percentage of curl + sync's. No wall-clock metric:
//                                    the row is the comparison, not the sum of the four. And the CPU each side spent
//                                    per file: the agent's (its threads' run time) and this attached process's
//                                    during (a), the tools' own during (b) and (c), this process's during (d) — on two
//                                    cores the row is bound by CPU. Less noisy than the times, but the machine's
//                                    speed drifts: the tools' CPU moves alike, so compare the agent's with curl's of
//                                    the same run, in alternating runs.
//   Scale: N tasks of 4 kB           a fresh container and agent (started by a warm-up task, not timed), then N tasks
//                                    at once until the Nth completion event. Metrics: wall time and agent CPU per task,
//                                    and the agent's resident memory once it is started (after the warm-up) and once
//                                    the N tasks are finished (they stay 24 h), after 30 s idle, and its CPU in those
//                                    30 s (one of its quiet listings of `tasks/`). 100 and 10,000: cost per task
//                                    should be flat.

import Benchmark
import BenchmarkSupport
import Foundation
import Glibc
import GroupContainer

/// Runs `tool` with `arguments`; throws when it cannot be started or exits non-zero.
func runTool(_ tool: String, _ arguments: [String]) throws {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: tool)
  process.arguments = arguments
  process.standardOutput = FileHandle.nullDevice
  process.standardError = FileHandle.nullDevice  // curl --parallel draws a progress meter there despite -s
  try process.run()
  process.waitUntilExit()
  guard process.terminationStatus == 0 else {
    throw BenchmarkSetupError("\(tool) exited \(process.terminationStatus)")
  }
}

func milliseconds(_ d: Duration) -> Int {
  Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
}

/// The comparison rows' session: 16 connections per host, as `aria2c -j16` (the fixture's session keeps the
/// default 6 of the older rows).
nonisolated(unsafe) var comparisonSessionStorage: DownloadSession?  // made in the first iteration, then only read

func comparisonSession() throws -> DownloadSession {
  if let session = comparisonSessionStorage { return session }
  var configuration = DownloadSession.Configuration()
  configuration.agentExecutable = URL(fileURLWithPath: agentPath())
  configuration.agentIdleTimeout = .seconds(60)
  configuration.httpMaximumConnectionsPerHost = 16
  let session = try DownloadSession(
    identifier: "bench16", container: downloadFixture.container!, configuration: configuration)
  comparisonSessionStorage = session
  return session
}

/// CPU time this process spent, in ns (all its threads: the attached sessions).
func ownCPUNanoseconds() -> Int {
  var now = timespec()
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
  return now.tv_sec * 1_000_000_000 + now.tv_nsec
}

/// CPU time of the children this process waited for so far (aria2c, curl, sync), in ns.
func childrenCPUNanoseconds() -> Int {
  var usage = rusage()
  getrusage(RUSAGE_CHILDREN.rawValue, &usage)
  let seconds = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec
  return seconds * 1_000_000_000 + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000
}

/// The CPU a side spent on one run, in ns: the agent's and this process's for the agent; the tools' for the others.
struct PeerCPU {
  var tool = 0
  var agent = 0
  var attached = 0
}

/// One side of a comparison: fetches `count` files of `size` bytes (seeds from `round`) into `directory`.
enum SmallFilesPeer: CaseIterable {
  case agent, aria2c, curlThenSync, durableFloor

  func run(count: Int, size: Int, round: Int, directory: String) async throws -> PeerCPU {
    let f = downloadFixture
    let urls = (0..<count).map { "http://127.0.0.1:\(f.port)/gen/\(size)?seed=\(round * 100_000 + $0)" }
    let absolute = f.container!.url.appendingPathComponent(directory).path
    switch self {
    case .agent:
      let session = try comparisonSession()
      // The agent of the first run starts during it (its start is counted, as in its time): no pid yet.
      let agentBefore = agentPID(f.container!).map { ($0, threadsRuntime($0)) }
      let ownBefore = ownCPUNanoseconds()
      var ids: Set<String> = []
      for (i, url) in urls.enumerated() {
        ids.insert(try session.download(from: URL(string: url)!, to: "\(directory)/\(i)").id)
      }
      _ = try await awaitCompletions(ids, in: session)
      var cpu = PeerCPU(attached: ownCPUNanoseconds() - ownBefore)
      if let pid = agentPID(f.container!) {
        let before = agentBefore?.0 == pid ? agentBefore!.1 : [:]
        cpu.agent = threadsRuntime(pid).reduce(0) { $0 + $1.value - (before[$1.key] ?? 0) }
      }
      return cpu
    case .aria2c:
      try FileManager.default.createDirectory(atPath: absolute, withIntermediateDirectories: true)
      let list = absolute + ".aria2-input"
      let text = urls.enumerated().map { "\($1)\n  out=\($0)\n" }.joined()
      try text.write(toFile: list, atomically: false, encoding: .utf8)
      let before = childrenCPUNanoseconds()
      try runTool(
        "/usr/bin/aria2c",
        ["-q", "-j16", "-d", absolute, "-i", list, "--allow-overwrite=true", "--auto-file-renaming=false"])
      let cpu = PeerCPU(tool: childrenCPUNanoseconds() - before)
      try? FileManager.default.removeItem(atPath: list)
      return cpu
    case .curlThenSync:
      try FileManager.default.createDirectory(atPath: absolute, withIntermediateDirectories: true)
      var arguments = ["-s", "--parallel"]
      for (i, url) in urls.enumerated() { arguments += ["-o", "\(absolute)/\(i)", url] }
      let before = childrenCPUNanoseconds()
      try runTool("/usr/bin/curl", arguments)
      try runTool("/usr/bin/sync", ["-f", absolute])
      return PeerCPU(tool: childrenCPUNanoseconds() - before)
    case .durableFloor:
      try FileManager.default.createDirectory(atPath: absolute, withIntermediateDirectories: true)
      let before = ownCPUNanoseconds()
      try await DurableFloor.shared.fetch(urls, into: absolute)
      return PeerCPU(tool: ownCPUNanoseconds() - before)
    }
  }
}

func smallFilesComparison(count: Int, size: Int) -> @Sendable (Benchmark) async throws -> Void {
  { benchmark in
    let f = downloadFixture
    f.counter += 1
    let round = f.counter
    let clock = ContinuousClock()
    var times: [SmallFilesPeer: Duration] = [:]
    var cpu: [SmallFilesPeer: PeerCPU] = [:]
    // The order rotates: whoever goes first finds a quieter page cache.
    let peers = SmallFilesPeer.allCases
    for k in 0..<peers.count {
      let peer = peers[(k + round) % peers.count]
      let directory = "Downloads/many-\(round)-\(peer)"
      let start = clock.now
      cpu[peer] = try await peer.run(count: count, size: size, round: round, directory: directory)
      times[peer] = clock.now - start
      try? FileManager.default.removeItem(at: f.container!.url.appendingPathComponent(directory))
    }
    let agent = max(1, milliseconds(times[.agent]!))
    benchmark.measurement(.custom("agent (ms)", useScalingFactor: false), agent)
    benchmark.measurement(.custom("aria2c -j16 (ms)", useScalingFactor: false), milliseconds(times[.aria2c]!))
    benchmark.measurement(
      .custom("curl --parallel + sync (ms)", useScalingFactor: false), milliseconds(times[.curlThenSync]!))
    benchmark.measurement(
      .custom("agent vs aria2c (%)", useScalingFactor: false), milliseconds(times[.aria2c]!) * 100 / agent)
    benchmark.measurement(
      .custom("agent vs curl + sync (%)", useScalingFactor: false), milliseconds(times[.curlThenSync]!) * 100 / agent)
    let floor = max(1, milliseconds(times[.durableFloor]!))
    benchmark.measurement(.custom("durable floor (ms)", useScalingFactor: false), floor)
    benchmark.measurement(.custom("agent vs durable floor (%)", useScalingFactor: false), floor * 100 / agent)
    benchmark.measurement(
      .custom("durable floor vs curl + sync (%)", useScalingFactor: false),
      milliseconds(times[.curlThenSync]!) * 100 / floor)
    func perFile(_ ns: Int) -> Int { ns / 1000 / count }
    benchmark.measurement(.custom("agent CPU per file (µs)", useScalingFactor: false), perFile(cpu[.agent]!.agent))
    benchmark.measurement(
      .custom("attached process CPU per file (µs)", useScalingFactor: false), perFile(cpu[.agent]!.attached))
    benchmark.measurement(.custom("aria2c CPU per file (µs)", useScalingFactor: false), perFile(cpu[.aria2c]!.tool))
    benchmark.measurement(
      .custom("curl + sync CPU per file (µs)", useScalingFactor: false), perFile(cpu[.curlThenSync]!.tool))
    benchmark.measurement(
      .custom("durable floor CPU per file (µs)", useScalingFactor: false), perFile(cpu[.durableFloor]!.tool))
  }
}

/// A fresh container with its own session and agent (started and warmed by one task), for the scale rows.
func freshSession() async throws -> (GroupContainer, DownloadSession) {
  let f = downloadFixture
  let root = try makeTemporaryRoot()
  let container = try GroupContainer(identifier: "group.bench.scale", root: URL(fileURLWithPath: root))
  var configuration = DownloadSession.Configuration()
  configuration.agentExecutable = URL(fileURLWithPath: agentPath())
  // Up until the row reads its memory, however long this process takes to handle the events: an agent idle for
  // its timeout exits by design (it did, 60 s after its last task, while acknowledgements here were quadratic).
  configuration.agentIdleTimeout = .seconds(600)
  let session = try DownloadSession(identifier: "scale", container: container, configuration: configuration)
  let warm = try session.download(from: URL(string: "http://127.0.0.1:\(f.port)/gen/1024?seed=0")!, to: "warm")
  _ = try await awaitCompletions([warm.id], in: session)
  return (container, session)
}

/// Waits until the agent has settled after a burst: its CPU time still (≤ 5 ms in a second) two seconds in a row, at
/// most 60 s. The end of a burst shrinks its tables and gives the freed heap back (DownloadAgent's loop); on a loaded
/// machine that came later than a fixed 2 s wait, and the row then measured the burst's memory, not the finished
/// tasks'.
func waitUntilSettled(_ pid: Int32) async throws {
  var last = processFigures(pid).cpuMilliseconds
  var still = 0
  for _ in 0..<60 {
    try await Task.sleep(for: .seconds(1))
    let now = processFigures(pid).cpuMilliseconds
    still = now - last <= 5 ? still + 1 : 0
    if still == 2 { return }
    last = now
  }
}

func scaleRow(tasks: Int) -> @Sendable (Benchmark) async throws -> Void {
  { benchmark in
    let f = downloadFixture
    let (container, session) = try await freshSession()
    defer {
      session.invalidate()
      removeTree(container.url.deletingLastPathComponent().path)
    }
    guard let pid = agentPID(container) else { throw BenchmarkSetupError("no agent pid") }
    // The agent ends before its container is removed: with its long idle timeout it fought the removal (taking
    // agent.lock again) and outlived the run.
    defer {
      kill(pid, SIGTERM)
      for _ in 0..<250 where kill(pid, 0) == 0 { usleep(20_000) }
    }
    let before = processFigures(pid)
    let clock = ContinuousClock()
    let start = clock.now
    var ids: Set<String> = []
    for i in 0..<tasks {
      let url = URL(string: "http://127.0.0.1:\(f.port)/gen/4096?seed=\(i)")!
      ids.insert(try session.download(from: url, to: "Downloads/\(i)").id)
    }
    _ = try await awaitCompletions(ids, in: session)
    let wall = clock.now - start
    let after = processFigures(pid)
    benchmark.measurement(.custom("agent RSS, started (MB)", useScalingFactor: false), before.rssKB / 1024)
    benchmark.measurement(
      .custom("wall per task (µs)", useScalingFactor: false), milliseconds(wall) * 1000 / tasks)
    benchmark.measurement(
      .custom("agent CPU per task (µs)", useScalingFactor: false),
      (after.cpuMilliseconds - before.cpuMilliseconds) * 1000 / tasks)
    // Once the agent's loop has settled (its passes after the last event), with every task finished and retained:
    // its CPU over 30 s idle, then its memory — the state it keeps those tasks in (its listing 10 s after a burst,
    // and the trim after it, are behind it).
    try await waitUntilSettled(pid)
    let idleStart = threadsRuntime(pid)
    try await Task.sleep(for: .seconds(30))
    let idleCPU = threadsRuntime(pid).reduce(0) { $0 + $1.value - (idleStart[$1.key] ?? 0) } / 30_000
    // An agent that is gone reads as 0 MB: the row fails instead, with the end of the agent's log.
    guard kill(pid, 0) == 0 else {
      let log = container.url.appendingPathComponent(".coordination/downloads/agent.log").path
      let tail = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").suffix(20)
      throw BenchmarkSetupError(
        "the agent \(pid) is gone (agent.lock names \(agentPID(container).map(String.init) ?? "none")); its log ends:\n"
          + tail.joined(separator: "\n"))
    }
    let settled = processFigures(pid)
    benchmark.measurement(.custom("agent RSS, tasks finished (MB)", useScalingFactor: false), settled.rssKB / 1024)
    benchmark.measurement(
      .custom("of which anonymous (MB)", useScalingFactor: false), settled.anonymousKB / 1024)
    benchmark.measurement(.custom("agent idle CPU (µs/s)", useScalingFactor: false), idleCPU)
  }
}

/// The CPU time of each of `pid`'s threads now, in ns by thread id (`/proc/<pid>/task/*/schedstat`): precise where
/// `/proc/<pid>/stat` counts 10 ms ticks, which an idle process's few ms a second fall between. Per thread: a thread
/// that ends takes its time out of a sum (Dispatch ends threads idle 5 s), which made idle windows negative.
func threadsRuntime(_ pid: Int32) -> [String: Int] {
  let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
  var times: [String: Int] = [:]
  for tid in tasks {
    let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/schedstat", encoding: .utf8)) ?? ""
    times[tid] = text.split(separator: " ").first.flatMap { Int($0) } ?? 0
  }
  return times
}

func manyFilesBenchmarks() {
  let comparison = Benchmark.Configuration(
    metrics: [
      .custom("agent (ms)", useScalingFactor: false), .custom("aria2c -j16 (ms)", useScalingFactor: false),
      .custom("curl --parallel + sync (ms)", useScalingFactor: false),
      .custom("agent vs aria2c (%)", useScalingFactor: false),
      .custom("agent vs curl + sync (%)", useScalingFactor: false),
      .custom("agent CPU per file (µs)", useScalingFactor: false),
      .custom("attached process CPU per file (µs)", useScalingFactor: false),
      .custom("aria2c CPU per file (µs)", useScalingFactor: false),
      .custom("curl + sync CPU per file (µs)", useScalingFactor: false),
      .custom("durable floor (ms)", useScalingFactor: false),
      .custom("agent vs durable floor (%)", useScalingFactor: false),
      .custom("durable floor vs curl + sync (%)", useScalingFactor: false),
      .custom("durable floor CPU per file (µs)", useScalingFactor: false),
    ],
    timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(240), maxIterations: 6)
  let scale = Benchmark.Configuration(
    metrics: [
      .custom("wall per task (µs)", useScalingFactor: false),
      .custom("agent CPU per task (µs)", useScalingFactor: false),
      .custom("agent RSS, started (MB)", useScalingFactor: false),
      .custom("agent RSS, tasks finished (MB)", useScalingFactor: false),
      .custom("of which anonymous (MB)", useScalingFactor: false),
      .custom("agent idle CPU (µs/s)", useScalingFactor: false),
    ],
    timeUnits: .microseconds, warmupIterations: 0, maxDuration: .seconds(300), maxIterations: 3)

  Benchmark(
    "200 files of 64 kB: agent ÷ aria2c, curl + sync", configuration: comparison,
    closure: smallFilesComparison(count: 200, size: 65536),
    setup: {
      try startDownloadFixture()
    })
  Benchmark(
    "2,000 files of 4 kB: agent ÷ aria2c, curl + sync", configuration: comparison,
    closure: smallFilesComparison(count: 2000, size: 4096),
    setup: {
      try startDownloadFixture()
    })
  Benchmark(
    "Scale: 100 tasks of 4 kB", configuration: scale, closure: scaleRow(tasks: 100),
    setup: {
      try startDownloadFixture()
    })
  Benchmark(
    "Scale: 10,000 tasks of 4 kB", configuration: scale, closure: scaleRow(tasks: 10_000),
    setup: {
      try startDownloadFixture()
    })

}
