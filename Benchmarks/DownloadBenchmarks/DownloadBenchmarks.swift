// Background downloads against curl, in the same run, from the project's own gc-file-server on 127.0.0.1:
//
//   Loopback 1 GiB: agent            DownloadSession.download of a 1 GiB entity, until its completion event reaches
//                                    this (attached) process: agent scheduling, transfer, fsync, coordinated publish,
//                                    status and event files. Custom metrics: the agent's CPU time for it and its peak
//                                    resident memory (VmHWM) after it, against its resident memory before.
//   Loopback 1 GiB: curl             curl -s -o FILE URL, same entity, same file system
//   Loopback 1 GiB: curl, then fsync the same, then fsync(FILE): the durability the agent gives before publishing
//   Loopback 1 GiB: agent, then curl the two above in turn in each iteration (the machine's disk and page cache vary
//                                    from minute to minute); custom metrics: each side's time and the agent's
//                                    throughput as a percentage of curl's in that pair
//   200 files of 64 kB: agent        200 tasks at once (6 connections per host, the session default), until the
//                                    200th completion event; custom metric: finished transfer → event in this
//                                    process (p50 over the 200, from the task's completion time)
//   1 file of 1 kB: agent            one task alone, until its completion event; custom metric: finished transfer → event
//                                    in this process (from the task's completion time)
//   200 files of 64 kB: curl         curl --parallel --parallel-max 6 with the same 200 URLs
//
//   (ManyFilesBenchmarks.swift: many small files against aria2c and curl + sync, and the scale rows.)
//
// The server generates its bodies (no disk read on its side); every byte is written by the client.

import Benchmark
import BenchmarkSupport
import Foundation
import Glibc
import GroupContainer

final class DownloadFixture: @unchecked Sendable {  // set up before the measured closures run, then only read
  var root = ""
  var container: GroupContainer?
  var session: DownloadSession?
  var server: Process?
  var serverInput: Pipe?
  var port = 0
  var counter = 0
}

let downloadFixture = DownloadFixture()

/// The products directory of this benchmark executable (gc-file-server and gc-download-agent are built beside it).
/// The agent the rows start: `GC_BENCH_AGENT` when set (an A/B pair runs two builds' agents in turn, without a
/// rebuild in between, which would relink the one beside the benchmark), else the one built beside the benchmark.
func agentPath() -> String {
  ProcessInfo.processInfo.environment["GC_BENCH_AGENT"] ?? productPath("gc-download-agent")
}

func productPath(_ name: String) -> String {
  let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent(name).path
}

func startDownloadFixture() throws {
  let f = downloadFixture
  guard f.server == nil else { return }
  // The plugin preloads package-benchmark's malloc interposer into this process, and every child inherited it: the
  // agent's allocations then carried its 16-byte header each (its memory rows measured the interposer too), and
  // aria2c's and curl's were counted. This process keeps it (loaded already); the children start without.
  unsetenv("LD_PRELOAD")
  f.root = try makeTemporaryRoot()
  let container = try GroupContainer(identifier: "group.bench.downloads", root: URL(fileURLWithPath: f.root))
  f.container = container
  let server = Process()
  server.executableURL = URL(fileURLWithPath: productPath("gc-file-server"))
  let input = Pipe()
  let output = Pipe()
  server.standardInput = input
  server.standardOutput = output
  try server.run()
  let text = try readUntil("\n", from: output, who: "gc-file-server")
  guard text.hasPrefix("listening "), let port = Int(text.dropFirst(10).prefix { $0.isNumber }) else {
    throw BenchmarkSetupError("gc-file-server said '\(text)'")
  }
  f.server = server
  f.serverInput = input
  f.port = port
  var configuration = DownloadSession.Configuration()
  configuration.agentExecutable = URL(fileURLWithPath: agentPath())
  configuration.agentIdleTimeout = .seconds(60)
  f.session = try DownloadSession(identifier: "bench", container: container, configuration: configuration)
}

func stopDownloadFixture() {
  let f = downloadFixture
  f.session?.invalidate()
  f.session = nil
  comparisonSessionStorage?.invalidate()
  comparisonSessionStorage = nil
  try? f.serverInput?.fileHandleForWriting.close()
  f.server?.waitUntilExit()
  f.server = nil
  removeTree(f.root)
}

/// Waits for the completion events of `ids`; returns when each arrived (wall clock).
func awaitCompletions(_ ids: Set<String>, in session: DownloadSession) async throws -> [String: Date] {
  var arrived: [String: Date] = [:]
  for await event in session.events {
    if case .didCompleteWithError(let task, let error, _) = event, ids.contains(task.id) {
      if let error { throw BenchmarkSetupError("download \(task.id) failed: \(error)") }
      arrived[task.id] = Date()
      if arrived.count == ids.count { break }
    }
  }
  return arrived
}

/// Finished transfer → event in this process, in µs, for each of `ids` (from its completion time), sorted.
func finishToEventLatencies(_ ids: Set<String>, arrived: [String: Date], in session: DownloadSession) -> [Int] {
  session.allTasks().compactMap { task -> Int? in
    guard ids.contains(task.id), let done = task.completionDate, let seen = arrived[task.id] else { return nil }
    return Int(seen.timeIntervalSince(done) * 1e6)
  }.sorted()
}

/// The running agent's pid (the pid its lock file holds).
func agentPID(_ container: GroupContainer) -> Int32? {
  let path = container.url.appendingPathComponent(".coordination/downloads/agent.lock").path
  return (try? String(contentsOfFile: path, encoding: .utf8)).flatMap {
    Int32($0.trimmingCharacters(in: .whitespacesAndNewlines))
  }
}

/// utime + stime of `pid` in milliseconds, and its VmRSS / VmHWM / RssAnon (the heap and stacks, not code pages) in
/// kB.
func processFigures(_ pid: Int32) -> (cpuMilliseconds: Int, rssKB: Int, peakKB: Int, anonymousKB: Int) {
  let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
  let fields = stat.split(separator: ")").last.map { $0.split(separator: " ") } ?? []
  let ticks = (fields.count > 12 ? Int(fields[11]) ?? 0 : 0) + (fields.count > 12 ? Int(fields[12]) ?? 0 : 0)
  let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
  func kB(_ key: String) -> Int {
    status.split(separator: "\n").first { $0.hasPrefix(key) }.flatMap {
      Int($0.split(separator: " ").dropFirst().first ?? "")
    } ?? 0
  }
  return (ticks * 1000 / Int(sysconf(Int32(_SC_CLK_TCK))), kB("VmRSS:"), kB("VmHWM:"), kB("RssAnon:"))
}

func runCurl(_ arguments: [String]) throws {
  let curl = Process()
  curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
  curl.arguments = arguments
  try curl.run()
  curl.waitUntilExit()
  guard curl.terminationStatus == 0 else { throw BenchmarkSetupError("curl exited \(curl.terminationStatus)") }
}

let benchmarks: @Sendable () -> Void = {
  let gib = 1 << 30
  let big = Benchmark.Configuration(
    metrics: [
      .wallClock, .custom("agent CPU (ms)", useScalingFactor: false),
      .custom("agent peak RSS (MB)", useScalingFactor: false),
      .custom("agent RSS before (MB)", useScalingFactor: false),
    ],
    timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(120), maxIterations: 3)
  let bigCurl = Benchmark.Configuration(
    metrics: [.wallClock], timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(120), maxIterations: 3)
  let paired = Benchmark.Configuration(
    metrics: [
      .wallClock, .custom("agent (ms)", useScalingFactor: false), .custom("curl (ms)", useScalingFactor: false),
      .custom("agent ÷ curl throughput (%)", useScalingFactor: false),
    ],
    timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(120), maxIterations: 7)
  let small = Benchmark.Configuration(
    metrics: [.wallClock, .custom("finish → event p50 (µs)", useScalingFactor: false)], timeUnits: .milliseconds,
    warmupIterations: 1, maxDuration: .seconds(60), maxIterations: 5)
  let one = Benchmark.Configuration(
    metrics: [.wallClock, .custom("finish → event (µs)", useScalingFactor: false)], timeUnits: .milliseconds,
    warmupIterations: 2, maxDuration: .seconds(30), maxIterations: 20)
  let smallCurl = Benchmark.Configuration(
    metrics: [.wallClock], timeUnits: .milliseconds, warmupIterations: 1, maxDuration: .seconds(60), maxIterations: 5)

  Benchmark("Loopback 1 GiB: agent", configuration: big) { benchmark in
    let f = downloadFixture
    let session = f.session!
    f.counter += 1
    let destination = "Downloads/big-\(f.counter)"
    // The agent is up (started by the warm-up download in setup): its figures before this transfer.
    let pid = agentPID(f.container!)
    let before = pid.map(processFigures)
    benchmark.startMeasurement()
    let task = try session.download(
      from: URL(string: "http://127.0.0.1:\(f.port)/gen/\(gib)?seed=\(f.counter)")!, to: destination)
    _ = try await awaitCompletions([task.id], in: session)
    benchmark.stopMeasurement()
    if let pid, let before {
      let after = processFigures(pid)
      benchmark.measurement(
        .custom("agent CPU (ms)", useScalingFactor: false), after.cpuMilliseconds - before.cpuMilliseconds)
      benchmark.measurement(.custom("agent peak RSS (MB)", useScalingFactor: false), after.peakKB / 1024)
      benchmark.measurement(.custom("agent RSS before (MB)", useScalingFactor: false), before.rssKB / 1024)
    }
    try? FileManager.default.removeItem(at: f.container!.url.appendingPathComponent(destination))
  } setup: {
    try startDownloadFixture()
    // Start the agent with a small download, so the 1 GiB runs are measured against a running agent.
    let f = downloadFixture
    let warm = try f.session!.download(
      from: URL(string: "http://127.0.0.1:\(f.port)/gen/1024?seed=0")!, to: "Downloads/warm")
    _ = try await awaitCompletions([warm.id], in: f.session!)
  }

  /// curl fetching 1 GiB into the container, then (with `fsync`) making the file durable as the agent does before it
  /// publishes: the like-for-like baseline, since curl alone leaves the file in the page cache.
  func curlGiB(_ benchmark: Benchmark, fsync: Bool) throws {
    let f = downloadFixture
    f.counter += 1
    let file = f.container!.url.appendingPathComponent("Downloads/curl-\(f.counter)").path
    benchmark.startMeasurement()
    try runCurl(["-s", "-o", file, "http://127.0.0.1:\(f.port)/gen/\(gib)?seed=\(f.counter)"])
    if fsync {
      guard let handle = FileHandle(forUpdatingAtPath: file) else { throw BenchmarkSetupError("cannot open \(file)") }
      try handle.synchronize()
      try handle.close()
    }
    benchmark.stopMeasurement()
    try? FileManager.default.removeItem(atPath: file)
  }

  Benchmark("Loopback 1 GiB: agent, then curl", configuration: paired) { benchmark in
    let f = downloadFixture
    let session = f.session!
    f.counter += 1
    let destination = "Downloads/pair-\(f.counter)"
    let file = f.container!.url.appendingPathComponent("Downloads/pair-curl-\(f.counter)").path
    let clock = ContinuousClock()
    benchmark.startMeasurement()
    let agentStart = clock.now
    let task = try session.download(
      from: URL(string: "http://127.0.0.1:\(f.port)/gen/\(gib)?seed=\(f.counter)")!, to: destination)
    _ = try await awaitCompletions([task.id], in: session)
    let agentTime = clock.now - agentStart
    let curlStart = clock.now
    try runCurl(["-s", "-o", file, "http://127.0.0.1:\(f.port)/gen/\(gib)?seed=\(f.counter)"])
    let curlTime = clock.now - curlStart
    benchmark.stopMeasurement()
    func milliseconds(_ d: Duration) -> Int {
      Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
    }
    benchmark.measurement(.custom("agent (ms)", useScalingFactor: false), milliseconds(agentTime))
    benchmark.measurement(.custom("curl (ms)", useScalingFactor: false), milliseconds(curlTime))
    benchmark.measurement(
      .custom("agent ÷ curl throughput (%)", useScalingFactor: false),
      milliseconds(curlTime) * 100 / max(1, milliseconds(agentTime)))
    try? FileManager.default.removeItem(at: f.container!.url.appendingPathComponent(destination))
    try? FileManager.default.removeItem(atPath: file)
  } setup: {
    try startDownloadFixture()
  }

  Benchmark("Loopback 1 GiB: curl", configuration: bigCurl) { benchmark in
    try curlGiB(benchmark, fsync: false)
  } setup: {
    try startDownloadFixture()
  }

  Benchmark("Loopback 1 GiB: curl, then fsync", configuration: bigCurl) { benchmark in
    try curlGiB(benchmark, fsync: true)
  } setup: {
    try startDownloadFixture()
  }

  Benchmark("200 files of 64 kB: agent", configuration: small) { benchmark in
    let f = downloadFixture
    let session = f.session!
    f.counter += 1
    let round = f.counter
    benchmark.startMeasurement()
    var ids: Set<String> = []
    for i in 0..<200 {
      let url = URL(string: "http://127.0.0.1:\(f.port)/gen/65536?seed=\(round * 1000 + i)")!
      ids.insert(try session.download(from: url, to: "Downloads/small-\(round)/\(i)").id)
    }
    let arrived = try await awaitCompletions(ids, in: session)
    benchmark.stopMeasurement()
    let latencies = finishToEventLatencies(ids, arrived: arrived, in: session)
    if !latencies.isEmpty {
      benchmark.measurement(.custom("finish → event p50 (µs)", useScalingFactor: false), latencies[latencies.count / 2])
    }
    try? FileManager.default.removeItem(at: f.container!.url.appendingPathComponent("Downloads/small-\(round)"))
  } setup: {
    try startDownloadFixture()
  }

  Benchmark("1 file of 1 kB: agent", configuration: one) { benchmark in
    let f = downloadFixture
    let session = f.session!
    f.counter += 1
    benchmark.startMeasurement()
    let task = try session.download(
      from: URL(string: "http://127.0.0.1:\(f.port)/gen/1024?seed=\(f.counter)")!, to: "Downloads/one-\(f.counter)")
    let arrived = try await awaitCompletions([task.id], in: session)
    benchmark.stopMeasurement()
    if let latency = finishToEventLatencies([task.id], arrived: arrived, in: session).first {
      benchmark.measurement(.custom("finish → event (µs)", useScalingFactor: false), latency)
    }
    try? FileManager.default.removeItem(at: f.container!.url.appendingPathComponent("Downloads/one-\(f.counter)"))
  } setup: {
    try startDownloadFixture()
  }

  Benchmark("200 files of 64 kB: curl", configuration: smallCurl) { benchmark in
    let f = downloadFixture
    f.counter += 1
    let round = f.counter
    let directory = f.container!.url.appendingPathComponent("Downloads/curl-small-\(round)").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    var arguments = ["-s", "--parallel", "--parallel-max", "6"]
    for i in 0..<200 {
      arguments += ["-o", "\(directory)/\(i)", "http://127.0.0.1:\(f.port)/gen/65536?seed=\(round * 1000 + i)"]
    }
    benchmark.startMeasurement()
    try runCurl(arguments)
    benchmark.stopMeasurement()
    try? FileManager.default.removeItem(atPath: directory)
  } setup: {
    try startDownloadFixture()
  } teardown: {
    stopDownloadFixture()
  }

  manyFilesBenchmarks()
}
