// The goals of issue #32 (items 2 and 4) that a new process, a big value or a growing suite decide, each row with
// its baseline in the same run. Every suite is written by `groupctl stress defaults-writer` (keys `w0-k<i>`), the
// way an app writes it, and read by another process:
//
//   first read of 1,000,000 keys (writer exited without synchronize) / (writer killed)   the writer set 1,000,000
//                                             new keys and exited (or was SIGKILLed after its loop) without
//                                             synchronize(): the journal past the last compaction is left as it
//                                             was; then `groupctl defaults read <key>` started, run and exited, with
//                                             its peak resident memory; baseline: the row `first read in a new
//                                             process (10-key suite)` (goals: ≤ 50 ms and ≤ 16 MB above it)
//   10 reads in a new process (100,000 keys) / (10 keys)   `groupctl stress defaults-reader --once`: its peak
//                                             resident memory (goal: what the suite adds ≤ what MMKV adds), and
//                                             the slowest of its 10 reads (the first, which opens the suite)
//   10 reads in a new process (100,000 keys, writer exited without synchronize)   the same after a writer that
//                                             left its journal past the last compaction (422 KB for 100,000 keys)
//   10 reads in a new process (… keys, an app of shared defaults only) / (…, that app linked statically)
//                                             the same reads by `gc-bench-defaults-reader` (DefaultsReader/), which
//                                             links SharedDefaults alone, as the benchmarks are linked or fully static
//                                             (`make static-programs`): what such an app pays, the issue's comparison
//                                             with MMKV (13.8 MB there, measured outside this package; the 10-key row
//                                             is each reader's floor)
//   an idle widget-like process / a process that only starts (…, linked statically)   issue #37 item 6:
//                                             `gc-bench-idle-widget` (IdleWidget/) opens a container, a defaults
//                                             suite, an image cache (one image stored and read), a download session
//                                             and the activities' updates, idles 2 s, and reports its resident memory
//                                             (VmRSS); the floor is the same program started with `--floor` (Foundation
//                                             loaded, nothing of this package used), as the benchmarks are linked or
//                                             fully static (goal: ≤ 16 MB, a release build)
//   six 60 MB values: the writer / a reader   the writer sets them and synchronizes; the reader reads one and the
//                                             whole suite; peak resident memory as a share of the values' bytes
//                                             (goal: ≤ 300 %)
//   value(forKey:) while a writer adds 900,000 keys / of a suite nobody writes   a reader process reads random
//                                             keys of the suite's first 100,000, each read timed, while `groupctl
//                                             stress defaults` grows the suite (every read catches up with it), or
//                                             for 10 s; p99.9 and worst read (goal: p99.9 ≤ 1 ms)
import Benchmark
import BenchmarkSupport
import Foundation
import Glibc
import GroupContainer

func defaultsMemoryBenchmarks() {
  let resident = BenchmarkMetric.custom("peak resident (KB)", polarity: .prefersSmaller, useScalingFactor: false)
  let share = BenchmarkMetric.custom("peak resident / values (%)", polarity: .prefersSmaller, useScalingFactor: false)
  let p999 = BenchmarkMetric.custom("p99.9 read (µs)", polarity: .prefersSmaller, useScalingFactor: false)
  let worst = BenchmarkMetric.custom("worst read (µs)", polarity: .prefersSmaller, useScalingFactor: false)

  let firstRead = Benchmark.Configuration(
    metrics: [.wallClock, resident], timeUnits: .milliseconds, warmupIterations: 1, maxDuration: .seconds(20),
    maxIterations: 20)
  for killed in [false, true] {
    let suite = Suite(name: "left")
    let keys = 1_000_000
    Benchmark(
      "first read of \(keys.formatted()) keys (writer \(killed ? "killed" : "exited without synchronize"))",
      configuration: firstRead
    ) { benchmark in
      try timeFirstReads(benchmark, suite, key: "w0-k\(keys / 2)", resident: resident)
    } setup: {
      try suite.setUpRoot()
      _ = try runWriter(suite, ["--keys", "\(keys)"], killAfterLoop: killed)
    } teardown: {
      suite.tearDown()
    }
  }

  let slowest = BenchmarkMetric.custom("slowest of 10 reads (µs)", polarity: .prefersSmaller, useScalingFactor: false)
  let once = Benchmark.Configuration(
    metrics: [resident, slowest], timeUnits: .milliseconds, warmupIterations: 1, maxDuration: .seconds(20),
    maxIterations: 10)
  // Who reads: groupctl (the rows' first figures), or an app of shared defaults only, linked as the benchmarks are
  // or fully static.
  enum Reader { case groupctl, app, appLinkedStatically }
  let rows: [(Int, Bool, Reader)] = [
    (10, true, .groupctl), (100_000, true, .groupctl), (100_000, false, .groupctl),
    (10, true, .app), (100_000, true, .app), (10, true, .appLinkedStatically), (100_000, true, .appLinkedStatically),
  ]
  for (keys, synchronized, reader) in rows {
    let suite = Suite(name: "few")
    let left = synchronized ? "" : ", writer exited without synchronize"
    let by = [
      .groupctl: "", .app: ", an app of shared defaults only", .appLinkedStatically: ", that app linked statically",
    ][reader]!
    Benchmark("10 reads in a new process (\(keys.formatted()) keys\(left)\(by))", configuration: once) { benchmark in
      for _ in benchmark.scaledIterations {
        let text =
          reader == .groupctl
          ? try runGroupctl(
            suite, ["stress", "defaults-reader", "--once", "--reads", "10", "--keys", "\(keys)", "--print-peak-memory"])
          : try runToEnd(
            locateProgram("gc-bench-defaults-reader", linkedStatically: reader == .appLinkedStatically),
            [suite.identifier, suite.name, suite.root!, "\(keys)"])
        guard let peakKB = field(text, "peak_rss_kb"), let worst = field(text, "max_us"), field(text, "found") == 10
        else { throw BenchmarkSetupError("defaults-reader: \(text)") }
        benchmark.measurement(resident, peakKB)
        benchmark.measurement(slowest, worst)
      }
    } setup: {
      try suite.setUpRoot()
      _ = try runWriter(suite, ["--keys", "\(keys)"] + (synchronized ? ["--synchronize"] : []))
    } teardown: {
      suite.tearDown()
    }
  }

  let current = BenchmarkMetric.custom("resident (KB)", polarity: .prefersSmaller, useScalingFactor: false)
  let idle = Benchmark.Configuration(
    metrics: [current, resident], timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(30),
    maxIterations: 3)
  for linkedStatically in [false, true] {
    for floor in [false, true] {
      let suite = Suite(name: "widget")
      let what = floor ? "A process that only starts" : "An idle widget-like process"
      let how = linkedStatically ? "linked statically" : "linked as the benchmarks are"
      Benchmark("\(what) (\(how))", configuration: idle) { benchmark in
        for _ in benchmark.scaledIterations {
          let program = try locateProgram("gc-bench-idle-widget", linkedStatically: linkedStatically)
          let text = try runToEnd(program, floor ? ["--floor"] : [suite.identifier, suite.root!])
          guard let now = field(text, "rss_kb"), let peak = field(text, "peak_rss_kb") else {
            throw BenchmarkSetupError("gc-bench-idle-widget: \(text)")
          }
          benchmark.measurement(current, now)
          benchmark.measurement(resident, peak)
        }
      } setup: {
        try suite.setUpRoot()
      } teardown: {
        suite.tearDown()
      }
    }
  }

  let big = Benchmark.Configuration(
    metrics: [.wallClock, resident, share], timeUnits: .milliseconds, warmupIterations: 0,
    maxDuration: .seconds(300), maxIterations: 1)
  let (count, size) = (6, 60 << 20)
  for reader in [false, true] {
    let suite = Suite(name: "big")
    Benchmark(
      "six 60 MB values: \(reader ? "a reader (one, then all)" : "the writer, synchronized")", configuration: big
    ) { benchmark in
      for _ in benchmark.scaledIterations {
        let text =
          reader
          ? try runGroupctl(
            suite,
            [
              "stress", "defaults-reader", "--once", "--reads", "1", "--whole", "--keys", "\(count)",
              "--print-peak-memory",
            ])
          : try runWriter(
            suite, ["--keys", "\(count)", "--value-bytes", "\(size)", "--synchronize", "--print-peak-memory"])
        guard let peakKB = field(text, "peak_rss_kb") else { throw BenchmarkSetupError("no peak in: \(text)") }
        benchmark.measurement(resident, peakKB)
        benchmark.measurement(share, peakKB * 1024 * 100 / (count * size))
      }
    } setup: {
      try suite.setUpRoot()
      if reader { _ = try runWriter(suite, ["--keys", "\(count)", "--value-bytes", "\(size)", "--synchronize"]) }
    } teardown: {
      suite.tearDown()
    }
  }

  let latency = Benchmark.Configuration(
    metrics: [p999, worst], timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(300),
    maxIterations: 1)
  let growBy = 900_000
  for growing in [false, true] {
    let suite = Suite(name: "growing-read")
    Benchmark(
      "value(forKey:) \(growing ? "while a writer adds \(growBy.formatted()) keys" : "of a suite nobody writes")",
      configuration: latency
    ) { benchmark in
      for _ in benchmark.scaledIterations {
        let reader = try startReader(suite, index: 1, keys: 100_000)
        if growing {
          _ = try runStressDefaults(benchmark, suite, writers: 1, keys: growBy)
        } else {
          sleep(10)
        }
        let text = try reader.finish()
        guard let p = field(text, "p999_us"), let w = field(text, "max_us") else {
          throw BenchmarkSetupError("defaults-reader: \(text)")
        }
        benchmark.measurement(p999, p)
        benchmark.measurement(worst, w)
      }
    } setup: {
      try suite.setUpRoot()
      // A suite of 100,000 keys to start from (the growing writer's own keys come on top).
      _ = try runWriter(suite, ["--keys", "100000", "--index", "1", "--synchronize"])
    } teardown: {
      suite.tearDown()
    }
  }
}

extension Suite {
  /// A fresh root, no store opened in this process: the rows above measure other processes only.
  func setUpRoot() throws {
    root = try makeTemporaryRoot()
  }
}

/// `groupctl <arguments> <group> --suite … --root …` run to its end; returns its standard output.
func runGroupctl(_ suite: Suite, _ arguments: [String]) throws -> String {
  let at = arguments.firstIndex { $0.hasPrefix("-") } ?? arguments.count
  return try runToEnd(
    try locateGroupctl(),
    Array(arguments[..<at]) + [suite.identifier] + Array(arguments[at...]) + [
      "--suite", suite.name, "--root", suite.root!,
    ])
}

/// `executable` with `arguments` run to its end; returns its standard output (throws unless it exits with 0).
func runToEnd(_ executable: String, _ arguments: [String]) throws -> String {
  let child = Process()
  child.executableURL = URL(fileURLWithPath: executable)
  child.arguments = arguments
  let output = Pipe()
  child.standardOutput = output
  try child.run()
  let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  child.waitUntilExit()
  guard child.terminationStatus == 0 else {
    throw BenchmarkSetupError(
      "\(executable) \(arguments.joined(separator: " ")) exited with \(child.terminationStatus): \(text)")
  }
  return text
}

/// One `groupctl stress defaults-writer` (writer 0 unless `--index` is given, no increments); with `killAfterLoop`
/// it is SIGKILLed as soon as its loop ends (before it waits for its background work). Returns its output.
func runWriter(_ suite: Suite, _ options: [String], killAfterLoop: Bool = false) throws -> String {
  var arguments = ["stress", "defaults-writer", "--increments", "0"] + options
  if !options.contains("--index") { arguments += ["--index", "0"] }
  guard killAfterLoop else { return try runGroupctl(suite, arguments) }
  let child = Process()
  child.executableURL = URL(fileURLWithPath: try locateGroupctl())
  child.arguments =
    ["stress", "defaults-writer", suite.identifier] + arguments.dropFirst(2) + [
      "--timing", "--suite", suite.name, "--root", suite.root!,
    ]
  let output = Pipe()
  child.standardOutput = output
  try child.run()
  let text = try readUntil("loop ", from: output, who: "the writer")
  kill(child.processIdentifier, SIGKILL)
  child.waitUntilExit()
  return text
}

/// A `groupctl stress defaults-reader` reading keys `w<index>-k<i>`, i < `keys`, until `finish()`.
struct Reader {
  let child: Process
  let output: Pipe
  let input: Pipe

  /// Stops the reader (closes its standard input) and returns its report.
  func finish() throws -> String {
    try input.fileHandleForWriting.close()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.waitUntilExit()
    guard child.terminationStatus == 0 else { throw BenchmarkSetupError("defaults-reader failed: \(text)") }
    return text
  }
}

func startReader(_ suite: Suite, index: Int, keys: Int) throws -> Reader {
  let child = Process()
  child.executableURL = URL(fileURLWithPath: try locateGroupctl())
  child.arguments = [
    "stress", "defaults-reader", suite.identifier, "--index", "\(index)", "--keys", "\(keys)", "--suite", suite.name,
    "--root", suite.root!,
  ]
  let (output, input) = (Pipe(), Pipe())
  child.standardOutput = output
  child.standardInput = input
  try child.run()
  // It reads from the moment it printed "ready" (the suite open).
  try readUntil("ready", from: output, who: "the reader")
  return Reader(child: child, output: output, input: input)
}
