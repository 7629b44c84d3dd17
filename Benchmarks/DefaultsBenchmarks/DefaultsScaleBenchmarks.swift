// The goals of issue #9 that depend on the suite's size, each row with its baseline in the same run:
//
//   2,000,000 sets in a 1,000-key suite / in a 1,000,000-key suite   one key overwritten 2,000,000 times per
//                                             sample: the sample's time / 2,000,000 is the mean set, with at least
//                                             one compaction of the whole suite (goal: mean at 1 M ≤ 1.5× at 1 k)
//   40,000 sets of an identical 4 KB value / of a distinct one   10,000 keys that all share one 4 KB value, or
//                                             each have their own; keys overwritten with the shared value, or with
//                                             new ones: two compaction cycles per sample (goal: identical ≤ distinct)
//   1 / 4 writers growing a suite to 1,000,000 keys   `groupctl stress defaults --rounds 1`: p99.9 and worst set
//                                             as it reports them over every set (goals: 1 writer worst ≤ 10 ms,
//                                             p99.9 ≤ 50 µs; 4 writers worst ≤ 50 ms); its check must find nothing
//                                             lost
//   first read in a new process (10 keys) / (1,000,000 keys)   `groupctl defaults read <key>` started, run and
//                                             exited; its peak resident memory as it reports it (VmHWM: wait4's
//                                             ru_maxrss counted this benchmark's own memory, shared with the
//                                             child until its exec) (goals: ≤ 50 ms and ≤ 10 MB above 10 keys)
import Benchmark
import BenchmarkSupport
import Foundation
import Glibc
import GroupContainer

func defaultsScaleBenchmarks() {
  let once = Benchmark.Configuration(
    metrics: [.wallClock], timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(300),
    maxIterations: 1)

  // Overwriting one key: with an Int record of ~40 bytes the journal compacts every ~25,000 sets at 1,000 keys
  // (1 MiB) and every ~1.9 million at 1,000,000 (twice the ~39 MB a compaction reads), so a sample of 2,000,000
  // sets carries its share of whole-suite compactions. A sample per batch: the mean, which package-benchmark's
  // percentiles of single sets do not give.
  var batches = once
  batches.maxIterations = 5
  batches.maxDuration = .seconds(120)
  for size in [1_000, 1_000_000] {
    let suite = Suite(name: "size")
    let next = Counter()
    Benchmark("SharedDefaults 2,000,000 sets (\(size.formatted())-key suite)", configuration: batches) { benchmark in
      let defaults = suite.defaults!
      for _ in benchmark.scaledIterations {
        for _ in 0..<2_000_000 { try defaults.set(next.advance(), forKey: "key") }
      }
    } setup: {
      try suite.setUp(integerKeys: size)
    } teardown: {
      suite.tearDown()
    }
  }

  let fourKB = 4096
  for identical in [false, true] {
    let suite = Suite(name: "values")
    let next = Counter()
    let shared = PropertyListValue.data([UInt8](repeating: 0x5A, count: fourKB))
    Benchmark(
      "SharedDefaults 40,000 sets of \(identical ? "an identical" : "a distinct") 4 KB value (10,000 keys)",
      configuration: batches
    ) { benchmark in
      let defaults = suite.defaults!
      for _ in benchmark.scaledIterations {
        for _ in 0..<40_000 {
          let n = next.advance()
          try defaults.set(value: identical ? shared : distinctValue(n, fourKB), forKey: "k\(n % 10_000)")
        }
      }
    } setup: {
      try suite.setUp()
      try suite.defaults!.set(values: numberedKeys(10_000) { identical ? shared : distinctValue($0, fourKB) })
      try suite.defaults!.synchronize()
    } teardown: {
      suite.tearDown()
    }
  }

  let p999 = BenchmarkMetric.custom("p99.9 set (µs)", polarity: .prefersSmaller, useScalingFactor: false)
  let worst = BenchmarkMetric.custom("worst set (µs)", polarity: .prefersSmaller, useScalingFactor: false)
  var stress = once
  stress.metrics += [p999, worst]
  for writers in [1, 4] {
    let suite = Suite(name: "growing")
    Benchmark("\(writers) writer(s) growing a suite to 1,000,000 keys", configuration: stress) { benchmark in
      for _ in benchmark.scaledIterations {
        let last = try runStressDefaults(benchmark, suite, writers: writers, keys: 1_000_000 / writers)
        guard last.contains(" lost=0 "), let p = field(last, "p999_us"), let w = field(last, "max_us") else {
          throw BenchmarkSetupError("stress defaults: \(last)")
        }
        benchmark.measurement(p999, p)
        benchmark.measurement(worst, w)
      }
    } setup: {
      try suite.setUp()
    } teardown: {
      suite.tearDown()
    }
  }

  let resident = BenchmarkMetric.custom("peak resident (KB)", polarity: .prefersSmaller, useScalingFactor: false)
  let firstRead = Benchmark.Configuration(
    metrics: [.wallClock, resident], timeUnits: .milliseconds, warmupIterations: 1, maxDuration: .seconds(20),
    maxIterations: 20)
  for size in [10, 1_000_000] {
    let suite = Suite(name: "first")
    Benchmark("first read in a new process (\(size.formatted())-key suite)", configuration: firstRead) { benchmark in
      try timeFirstReads(benchmark, suite, key: "k\(size / 2)", resident: resident)
    } setup: {
      try suite.setUp(integerKeys: size)
    } teardown: {
      suite.tearDown()
    }
  }
}

extension Suite {
  /// A fresh suite of `count` keys `k<i>` = i, synchronized.
  func setUp(integerKeys count: Int) throws {
    try setUp()
    try defaults!.set(values: numberedKeys(count) { .integer(PropertyListInteger($0)) })
    try defaults!.synchronize()
  }
}

/// Keys `k0`…`k<count-1>` with the values `value(i)`.
func numberedKeys(_ count: Int, _ value: (Int) -> PropertyListValue) -> [String: PropertyListValue] {
  var values: [String: PropertyListValue] = [:]
  values.reserveCapacity(count)
  for i in 0..<count { values["k\(i)"] = value(i) }
  return values
}

/// `count` bytes that differ from every other `n`'s in their first eight.
func distinctValue(_ n: Int, _ count: Int) -> PropertyListValue {
  var bytes = [UInt8](repeating: 0x5A, count: count)
  withUnsafeBytes(of: UInt64(n).littleEndian) { for (i, byte) in $0.enumerated() { bytes[i] = byte } }
  return .data(bytes)
}

/// `groupctl stress defaults` on `suite` (`writers` × `keys` new keys, no increments), timed by the benchmark;
/// returns its last line.
func runStressDefaults(_ benchmark: Benchmark, _ suite: Suite, writers: Int, keys: Int) throws -> String {
  let child = Process()
  child.executableURL = URL(fileURLWithPath: try locateGroupctl())
  child.arguments = [
    "stress", "defaults", suite.identifier, "--writers", "\(writers)", "--keys", "\(keys)", "--increments", "0",
    "--rounds", "1", "--suite", suite.name, "--root", suite.root!,
  ]
  let output = Pipe()
  child.standardOutput = output
  benchmark.startMeasurement()
  try child.run()
  let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  child.waitUntilExit()
  benchmark.stopMeasurement()
  let last = text.split(separator: "\n").last.map(String.init) ?? ""
  guard child.terminationStatus == 0 else { throw BenchmarkSetupError("stress defaults failed: \(last)") }
  return last
}

/// Each iteration: `groupctl defaults read <key>` started, run and exited (timed), and its own peak resident memory
/// as it reports it (`resident`).
func timeFirstReads(_ benchmark: Benchmark, _ suite: Suite, key: String, resident: BenchmarkMetric) throws {
  let groupctl = try locateGroupctl()
  let arguments = [
    "defaults", "read", suite.identifier, key, "--suite", suite.name, "--root", suite.root!, "--print-peak-memory",
  ]
  let output = suite.root! + "/read-output"
  for _ in benchmark.scaledIterations {
    benchmark.startMeasurement()
    let status = try spawnAndWait(groupctl, arguments, output: output)
    benchmark.stopMeasurement()
    let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    guard status == 0, let peakKB = field(text, "peak_rss_kb") else {
      throw BenchmarkSetupError("groupctl defaults read exited with \(status): \(text)")
    }
    benchmark.measurement(resident, peakKB)
  }
}

/// The integer after `name=` in a `key=value` line.
func field(_ line: String, _ name: String) -> Int? {
  guard let range = line.range(of: name + "=") else { return nil }
  return Int(line[range.upperBound...].prefix { $0.isNumber })
}

/// Starts `path` with `arguments` (its output to the file `output`) and waits; returns its exit status.
func spawnAndWait(_ path: String, _ arguments: [String], output: String) throws -> Int32 {
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
  let argv = ([path] + arguments).map { strdup($0) } + [nil]
  defer { for pointer in argv { free(pointer) } }
  var pid: pid_t = 0
  let result = posix_spawn(&pid, path, &actions, nil, argv, environ)
  guard result == 0 else { throw BenchmarkSetupError("posix_spawn \(path) failed: errno \(result)") }
  var status: Int32 = 0
  while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
  // Exited: the code in bits 8-15; killed: 128 + the signal, as a shell says.
  return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + status & 0x7F
}
