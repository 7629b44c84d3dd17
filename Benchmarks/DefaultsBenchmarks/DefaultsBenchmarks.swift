// What shared defaults cost, each figure measured in the same run as its baselines:
//
//   Baseline: flock+pwrite                    flock(LOCK_EX) → pwrite 40 bytes → flock(LOCK_UN), raw syscalls
//   SharedDefaults set                        set(_:forKey:) of an Int in a 400-key suite: committed, visible to
//                                             every process
//   Foundation UserDefaults set+synchronize   the same in a 400-key UserDefaults(suiteName:), + synchronize() (what
//                                             it takes there to make a write visible to another process)
//   Foundation UserDefaults set+synchronize (1 key)  the same in an empty suite: Foundation's best case
//   SharedDefaults get (nothing changed)      integer(forKey:) when no process wrote since: no system call
//   Foundation UserDefaults get               integer(forKey:)
//   SharedDefaults get after a remote set     another store instance (its own descriptors and header mapping, as
//                                             another process has) sets a key; this one reads it: catch-up cost
//   SharedDefaults update                     update(_:_:) increment (read-modify-write under the lock)
//   SharedDefaults set → observer             another store instance sets; an observer on this one gets the change
//                                             through the suite's futex change signal (the cross-process path)
//   SharedDefaults set → observer in another process   `groupctl defaults watch` in a child prints the change;
//                                             measured until its JSON line reaches us through a pipe
//   4 processes: raw flock+pwrite             4 forked children × N raw appends under flock
//   4 processes: SharedDefaults set           4 `groupctl stress defaults-writer` children × N sets (process start
//                                             included): 1,000 keys rewritten 100 times each, or all keys distinct
//   16 processes: SharedDefaults set          the same number of sets in all, by 16 writers of 1,000 keys each
//   … 4 observers in other processes          the 4 writers of 1,000 keys while 4 `groupctl defaults watch`
//                                             children observe a key none of them sets
//   (DefaultsScaleBenchmarks.swift: the rows that depend on the suite's size; DefaultsMemoryBenchmarks.swift: a new
//   process's first read, memory, big values, reads while a suite grows)
//
// Run from this directory: `swift package --allow-writing-to-package-directory benchmark` (or `make bench`).
import Benchmark
import BenchmarkSupport
import Dispatch
import Foundation
import Glibc
import GroupContainer
import Synchronization

let benchmarks: @Sendable () -> Void = {
  let fast = Benchmark.Configuration(
    metrics: [.wallClock, .throughput, .mallocCountTotal, .syscalls],
    timeUnits: .nanoseconds, warmupIterations: 1_000, maxDuration: .seconds(4), maxIterations: 2_000_000)
  let slow = Benchmark.Configuration(
    metrics: [.wallClock, .throughput], timeUnits: .microseconds, warmupIterations: 20,
    maxDuration: .seconds(4), maxIterations: 20_000)
  let once = Benchmark.Configuration(
    metrics: [.wallClock, .throughput], timeUnits: .milliseconds, warmupIterations: 0, maxDuration: .seconds(20),
    maxIterations: 3)

  let raw = RawJournal()
  Benchmark("Baseline: flock+pwrite", configuration: fast) { benchmark in
    for _ in benchmark.scaledIterations { raw.append() }
  } setup: {
    try raw.setUp()
  } teardown: {
    raw.tearDown()
  }

  let suite = Suite(name: "set")
  Benchmark("SharedDefaults set", configuration: fast) { benchmark in
    let defaults = suite.defaults!
    var i = 0
    for _ in benchmark.scaledIterations {
      try defaults.set(i, forKey: "key")
      i &+= 1
    }
  } setup: {
    try suite.setUp()
    try suite.defaults!.set(values: suiteOf400)
  } teardown: {
    suite.tearDown()
  }

  // Foundation's cost grows with the suite (it rewrites the whole plist): a realistic 400-key suite, and its best case.
  for (label, preload) in [("", suiteOf400), (" (1 key)", [:])] {
    let foundation = FoundationSuite()
    Benchmark("Foundation UserDefaults set+synchronize\(label)", configuration: slow) { benchmark in
      let defaults = foundation.defaults!
      var i = 0
      for _ in benchmark.scaledIterations {
        defaults.set(i, forKey: "key")
        defaults.synchronize()
        i &+= 1
      }
    } setup: {
      foundation.setUp()
      for (key, value) in preload { foundation.defaults!.set(value.intValue ?? 0, forKey: key) }
      foundation.defaults!.synchronize()
    } teardown: {
      foundation.tearDown()
    }
  }

  let getSuite = Suite(name: "get")
  Benchmark("SharedDefaults get (nothing changed)", configuration: fast) { benchmark in
    let defaults = getSuite.defaults!
    var sum = 0
    for _ in benchmark.scaledIterations { sum &+= defaults.integer(forKey: "key") }
    blackHole(sum)
  } setup: {
    try getSuite.setUp()
    try getSuite.defaults!.set(7, forKey: "key")
  } teardown: {
    getSuite.tearDown()
  }

  let foundationGet = FoundationSuite()
  Benchmark("Foundation UserDefaults get", configuration: fast) { benchmark in
    let defaults = foundationGet.defaults!
    var sum = 0
    for _ in benchmark.scaledIterations { sum &+= defaults.integer(forKey: "key") }
    blackHole(sum)
  } setup: {
    foundationGet.setUp()
    foundationGet.defaults!.set(7, forKey: "key")
  } teardown: {
    foundationGet.tearDown()
  }

  let remote = Suite(name: "remote", withRemote: true)
  Benchmark("SharedDefaults remote set alone", configuration: fast) { benchmark in
    let writer = remote.remote!
    var i = 0
    for _ in benchmark.scaledIterations {
      try writer.set(i, forKey: "key")
      i &+= 1
    }
  } setup: {
    try remote.setUp()
  } teardown: {
    remote.tearDown()
  }

  let remoteGet = Suite(name: "remoteget", withRemote: true)
  let remoteNext = Counter()
  Benchmark("SharedDefaults remote set + get here", configuration: fast) { benchmark in
    let (reader, writer) = (remoteGet.defaults!, remoteGet.remote!)
    for _ in benchmark.scaledIterations {
      let i = remoteNext.advance()
      try writer.set(i, forKey: "key")
      guard reader.integer(forKey: "key") == i else { throw BenchmarkSetupError("the reader missed a write") }
    }
  } setup: {
    try remoteGet.setUp()
  } teardown: {
    remoteGet.tearDown()
  }

  let update = Suite(name: "update")
  Benchmark("SharedDefaults update (increment)", configuration: fast) { benchmark in
    let defaults = update.defaults!
    for _ in benchmark.scaledIterations {
      try defaults.update("counter") { .integer(PropertyListInteger(($0?.intValue ?? 0) + 1)) }
    }
  } setup: {
    try update.setUp()
  } teardown: {
    update.tearDown()
  }

  let observed = Suite(name: "observed", withRemote: true)
  let arrivals = Arrivals()
  let observedNext = Counter()
  Benchmark("SharedDefaults set → observer (other store instance)", configuration: slow) { benchmark in
    try setAndAwait(observed.remote!, benchmark, next: observedNext) { arrivals.wait(for: $0) }
  } setup: {
    try observed.setUp()
    observed.observation = observed.defaults!.observe(["key"]) { change in
      arrivals.arrived(change.newValue?.intValue ?? -1)
    }
  } teardown: {
    observed.observation = nil
    observed.tearDown()
  }

  let watched = Suite(name: "watched")
  let watcher = WatchChild()
  let watchedNext = Counter()
  Benchmark("SharedDefaults set → observer in another process", configuration: slow) { benchmark in
    try setAndAwait(watched.defaults!, benchmark, next: watchedNext) { watcher.wait(for: $0) }
  } setup: {
    try watched.setUp()
    try watcher.start(
      arguments: ["defaults", "watch", watched.identifier, "key", "--suite", "watched", "--root", watched.root!])
  } teardown: {
    watcher.stop()
    watched.tearDown()
  }

  let perProcess = 100_000
  let aggregate = BenchmarkMetric.custom("sets/s of the 4 loops together (K)", useScalingFactor: false)
  var fourWriters = once
  fourWriters.metrics += [aggregate]
  fourWriters.maxIterations = 7  // the rows vary by ±30 % from sample to sample on two shared cores
  let rawFour = RawJournal()
  Benchmark("4 processes: raw flock+pwrite (×\(perProcess) each)", configuration: once) { benchmark in
    for _ in benchmark.scaledIterations {
      benchmark.startMeasurement()
      rawFour.forkWriters(4, appends: perProcess)
      benchmark.stopMeasurement()
    }
  } setup: {
    try rawFour.setUp()
  } teardown: {
    rawFour.tearDown()
  }

  // A suite keeps its size in real use (the same settings rewritten): 1,000 keys per writer, 100 rounds. The
  // second variant writes only new keys, so the suite grows to 400,000 and compactions (O(suite)) dominate. The
  // issue's goals compare rows of this run: 16 writers with the same total number of sets as 4 (≥ 0.7×), the
  // growing suite against the rewritten one (≥ 0.8×), and 4 observers in other processes (≤ 10 % slower).
  let total = 4 * perProcess
  for (writers, keys, rounds, observers) in [
    (4, 1_000, perProcess / 1_000, 0), (4, perProcess, 1, 0), (16, 1_000, total / 16 / 1_000, 0),
    (4, 1_000, perProcess / 1_000, 4),
  ] {
    let label = rounds == 1 ? "all keys distinct" : "1,000 keys each"
    let watching = observers == 0 ? "" : ", \(observers) observers in other processes"
    let suite = Suite(name: "writers")
    let watchers = (0..<observers).map { _ in WatchChild() }
    Benchmark(
      "\(writers) processes: SharedDefaults set (×\(total / writers) each, \(label)\(watching))",
      configuration: fourWriters
    ) { benchmark in
      for _ in benchmark.scaledIterations {
        // Every sample on a new suite: the "all keys distinct" row grows it from empty each time (on the suite
        // of the sample before, it would rewrite 400,000 existing keys).
        for watcher in watchers { watcher.stop() }
        suite.tearDown()
        try suite.setUp()
        // Each observes a key no writer sets: what is measured is what observing costs the writers (a change
        // signal per commit, a catch-up per wake-up), not the observers' share of two cores spent printing.
        for watcher in watchers {
          try watcher.start(
            arguments: ["defaults", "watch", suite.identifier, "key", "--suite", suite.name, "--root", suite.root!])
        }
        let loops = try runWriters(benchmark, suite, count: writers, keys: keys, rounds: rounds)
        benchmark.measurement(aggregate, Int(Double(total) / loops / 1000))
      }
    } teardown: {
      for watcher in watchers { watcher.stop() }
      suite.tearDown()
    }
  }

  defaultsScaleBenchmarks()
  defaultsMemoryBenchmarks()
  activityBenchmarks(slow)
}

/// Runs `count` `groupctl stress defaults-writer` processes on `suite` (each `keys` keys, `rounds` times), timed by
/// the benchmark from the common start of their loops to the last exit. Returns the seconds from the first writer's loop start to
/// the last one's end (process start and exit left out), and throws when a writer failed.
func runWriters(_ benchmark: Benchmark?, _ suite: Suite, count: Int, keys: Int, rounds: Int) throws -> Double {
  let groupctl = try locateGroupctl()
  let children = (0..<count).map { w -> (Process, Pipe) in
    let child = Process()
    child.executableURL = URL(fileURLWithPath: groupctl)
    child.arguments = [
      "stress", "defaults-writer", suite.identifier, "--index", "\(w)", "--keys", "\(keys)", "--rounds",
      "\(rounds)", "--increments", "0", "--timing", "--start-on-stdin-close", "--suite", suite.name, "--root",
      suite.root!,
    ]
    let output = Pipe()
    child.standardOutput = output
    child.standardInput = Pipe()
    return (child, output)
  }
  for (child, _) in children { try child.run() }
  // All loops start together once every writer has opened the suite: 16 process starts on 2 cores would otherwise
  // run inside the first writers' loops and be counted as the suite's cost.
  for (_, output) in children { try readUntil("ready\n", from: output, who: "a writer") }
  benchmark?.startMeasurement()
  for (child, _) in children { try (child.standardInput as! Pipe).fileHandleForWriting.close() }
  // Read each to its end before waiting: a writer blocked on a full pipe would never exit.
  let texts = children.map { String(decoding: $0.1.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
  for (child, _) in children { child.waitUntilExit() }
  benchmark?.stopMeasurement()
  guard children.allSatisfy({ $0.0.terminationStatus == 0 }) else { throw BenchmarkSetupError("a writer failed") }
  let spans = texts.compactMap { text -> (UInt64, UInt64)? in
    let fields = text.split(separator: "\n").last { $0.hasPrefix("loop ") }?.split(separator: " ") ?? []
    guard fields.count == 3, let start = UInt64(fields[1]), let end = UInt64(fields[2]) else { return nil }
    return (start, end)
  }
  guard spans.count == count else { throw BenchmarkSetupError("a writer printed no loop timing") }
  return Double(spans.map(\.1).max()! - spans.map(\.0).min()!) / 1e9
}

/// The observer-latency loop: each iteration sets `key` to the next number and waits until the observer saw it.
/// The number lives in `next`, outside the closure package-benchmark calls once per iteration: a counter started
/// inside it would set 1 again on every call, which the observer had already seen, and time the set alone.
func setAndAwait(
  _ writer: SharedDefaults, _ benchmark: Benchmark, next: Counter, until seen: (Int) -> Void
) throws {
  for _ in benchmark.scaledIterations {
    let i = next.advance()
    try writer.set(i, forKey: "key")
    seen(i)
  }
}

/// A number that keeps growing across the calls of one benchmark's closure.
final class Counter: Sendable {
  private let value = Mutex(0)
  func advance() -> Int {
    value.withLock {
      $0 += 1; return $0
    }
  }
}

/// 400 keys: a realistic suite (the trap list measured Foundation's plist encoding on 400 keys).
let suiteOf400: [String: PropertyListValue] = Dictionary(
  uniqueKeysWithValues: (0..<400).map { ("setting\($0)", .integer(PropertyListInteger($0))) })

/// A suite in a fresh container; `remote` is a second instance of the same suite opened through another path
/// (a symlink to the root), so it has its own store, descriptors and header mapping — as another process would.
final class Suite: @unchecked Sendable {  // the runner calls setUp/run/tearDown one after another
  let name: String
  let withRemote: Bool
  let identifier = "group.bench.defaults"
  var root: String?
  var defaults: SharedDefaults?
  var remote: SharedDefaults?
  var observation: DefaultsObservation?

  init(name: String, withRemote: Bool = false) {
    self.name = name
    self.withRemote = withRemote
  }

  func setUp() throws {
    let root = try makeTemporaryRoot()
    self.root = root
    defaults = try SharedDefaults(
      suiteName: name, container: GroupContainer(identifier: identifier, root: URL(fileURLWithPath: root)))
    if withRemote {
      let alias = root + "-alias"
      try FileManager.default.createSymbolicLink(atPath: alias, withDestinationPath: root)
      remote = try SharedDefaults(
        suiteName: name, container: GroupContainer(identifier: identifier, root: URL(fileURLWithPath: alias)))
    }
  }

  func tearDown() {
    defaults = nil
    remote = nil
    if let root {
      try? FileManager.default.removeItem(atPath: root + "-alias")
      removeTree(root)
    }
  }
}

final class FoundationSuite: @unchecked Sendable {
  var defaults: UserDefaults?
  let suite = "group.bench.foundation.\(getpid())"

  func setUp() { defaults = UserDefaults(suiteName: suite) }

  func tearDown() {
    defaults?.removePersistentDomain(forName: suite)
    defaults = nil
  }
}

/// The raw baseline: one lock file, one journal; each append is flock EX → pwrite → flock UN.
final class RawJournal: @unchecked Sendable {
  var root: String?
  var lock: Int32 = -1
  var journal: Int32 = -1
  var offset: off_t = 0
  let record = [UInt8](repeating: 0x42, count: 40)  // about one SharedDefaults Int record

  func setUp() throws {
    let root = try makeTemporaryRoot()
    self.root = root
    lock = open(root + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    journal = open(root + "/journal", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard lock >= 0, journal >= 0 else { throw BenchmarkSetupError("open failed: errno \(errno)") }
  }

  @inline(__always) func append() {
    flock(lock, LOCK_EX)
    record.withUnsafeBytes { _ = pwrite(journal, $0.baseAddress, $0.count, offset) }
    offset = (offset + 40) % (1 << 20)
    flock(lock, LOCK_UN)
  }

  /// `count` children each append `appends` records at the shared end (read under the lock, as a journal must).
  func forkWriters(_ count: Int, appends: Int) {
    var children: [pid_t] = []
    let lockPath = Array("\(root!)/lock".utf8CString)  // made before fork: the child must not allocate
    for _ in 0..<count {
      let pid = fork()
      if pid == 0 {
        // Only async-signal-safe calls in the child of a threaded process; its own descriptor, its own lock.
        let fd = lockPath.withUnsafeBufferPointer { open($0.baseAddress!, O_RDWR | O_CLOEXEC) }
        var st = stat()
        for _ in 0..<appends {
          flock(fd, LOCK_EX)
          fstat(journal, &st)
          record.withUnsafeBytes { _ = pwrite(journal, $0.baseAddress, $0.count, st.st_size) }
          flock(fd, LOCK_UN)
        }
        _exit(0)
      }
      children.append(pid)
    }
    for pid in children {
      var status: Int32 = 0
      waitpid(pid, &status, 0)
    }
    ftruncate(journal, 0)
  }

  func tearDown() {
    close(lock)
    close(journal)
    removeTree(root)
  }
}

/// Hands observed values from the delivery queue to the benchmark loop.
final class Arrivals: Sendable {
  private let latest = Mutex(0)
  private let signal = DispatchSemaphore(value: 0)

  func arrived(_ value: Int) {
    latest.withLock { $0 = max($0, value) }
    signal.signal()
  }

  func wait(for value: Int) {
    while latest.withLock({ $0 }) < value { _ = signal.wait(timeout: .now() + 1) }
  }
}

/// A `groupctl … watch` child process; the number after `valueMarker` in its JSON lines (`"new":N` for
/// `defaults watch`) is read on a thread, and a line containing `readyMarker` says it is watching.
final class WatchChild: @unchecked Sendable {  // `process` is set and cleared by setUp/teardown only
  private var process: Process?
  private let latest = Arrivals()
  private let ready = DispatchSemaphore(value: 0)
  private let valueMarker: String
  private let readyMarker: String

  init(valueMarker: String = #""new":"#, readyMarker: String = #""event":"ready""#) {
    self.valueMarker = valueMarker
    self.readyMarker = readyMarker
  }

  func start(arguments: [String]) throws {
    let child = Process()
    child.executableURL = URL(fileURLWithPath: try locateGroupctl())
    child.arguments = arguments
    child.environment = ProcessInfo.processInfo.environment.filter { $0.key != "LD_PRELOAD" }
    let out = Pipe()
    child.standardOutput = out
    try child.run()
    process = child
    let handle = out.fileHandleForReading
    Thread.detachNewThread { [self] in
      var pending = Data()
      while true {
        let data = handle.availableData
        if data.isEmpty { return }
        pending += data
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
          let line = String(decoding: pending[..<newline], as: UTF8.self)
          pending.removeSubrange(...newline)
          if line.contains(readyMarker) { ready.signal() }
          if let range = line.range(of: valueMarker) {
            latest.arrived(Int(line[range.upperBound...].prefix { $0.isNumber }) ?? -1)
          }
        }
      }
    }
    guard ready.wait(timeout: .now() + 20) == .success else {
      stop()
      throw BenchmarkSetupError(
        "`groupctl \(arguments.prefix(2).joined(separator: " "))` did not get ready within 20 s")
    }
  }

  func wait(for value: Int) { latest.wait(for: value) }

  func stop() {
    if let pid = process?.processIdentifier, process?.isRunning == true {
      kill(pid, SIGKILL)
      var status: Int32 = 0
      waitpid(pid, &status, 0)
    }
    process = nil
  }
}
