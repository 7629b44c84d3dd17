import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

struct Stress: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "stress",
    abstract: "Run many writer processes against the container and check that nothing was lost.",
    subcommands: [
      StressDefaults.self, StressDefaultsWriter.self, StressDefaultsReader.self, StressFiles.self,
      StressFilesWriter.self,
      StressFilesPresenter.self, PresentMany.self, StressStorm.self, StressStormWorker.self, StressStormCheck.self,
    ])
}

struct StressDefaults: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults",
    abstract: "N writer processes: writer w sets keys w<w>-k<i> and increments `counter` with update().",
    discussion: """
      Then it checks independently, re-reading the plist with the codec, and prints as its last line \
      keys=<found>/<expected> lost=<n> counter=<value>/<expected> writes_per_s=<x> p999_us=<n> max_us=<n> \
      (the latencies: over every set and update of every writer). Exit status 0 only when nothing was lost.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "Writer processes.") var writers = 4
  @Option(help: "Distinct keys per writer.") var keys = 1000
  @Option(help: "update() increments of `counter` per writer.") var increments = 1000
  @Option(
    help:
      "Times each writer writes its keys: more than 1 keeps the suite's size, as real suites do; 1 makes every set a new key, so the suite grows."
  )
  var rounds = 1
  @Option(help: .hidden) var testingUpdateDelayUs = 0
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let group = try container.open()
    let defaults = try SharedDefaults(suiteName: suite.suite, container: group)
    try defaults.removeObject(forKey: "counter")
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var children: [(Process, Pipe)] = []
    for w in 0..<writers {
      let child = Process()
      child.executableURL = executable
      var arguments = [
        "stress", "defaults-writer", container.groupID, "--index", "\(w)", "--keys", "\(keys)",
        "--increments", "\(increments)", "--suite", defaults.suiteName, "--rounds", "\(rounds)", "--latency",
        "--testing-update-delay-us", "\(testingUpdateDelayUs)", "--start-on-stdin-close",
      ]
      if let root = container.root { arguments += ["--root", root] }
      child.arguments = arguments
      let output = Pipe()
      child.standardOutput = output
      child.standardInput = Pipe()
      try child.run()
      children.append((child, output))
    }
    // Start every loop at once, when all writers are ready: with 16 writers on 2 cores, the later ones' process
    // start (exec, dynamic linking, opening the suite) would otherwise run inside the earlier ones' loops.
    try startTogether(children)
    let start = Date()
    var failed = 0
    var latencies = LatencyHistogram()
    for (child, output) in children {
      // Read to the end first: a writer blocked on a full pipe would never exit.
      let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      child.waitUntilExit()
      if child.terminationStatus != 0 { failed += 1 }
      for line in text.split(separator: "\n") where line.hasPrefix("latency ") {
        if let histogram = LatencyHistogram(line: line.dropFirst("latency ".count)) { latencies.merge(histogram) }
      }
    }
    let elapsed = Date().timeIntervalSince(start)
    let values = try Self.export(of: defaults, in: group)
    var found = 0
    for w in 0..<writers {
      for i in 0..<keys where values["w\(w)-k\(i)"] == .integer(PropertyListInteger(i)) { found += 1 }
    }
    let expected = writers * keys
    let counter = values["counter"]?.intValue ?? 0
    let lost = expected - found + (writers * increments - counter)
    let rate = Double(writers * (keys * rounds + increments)) / max(elapsed, 1e-9)
    if failed > 0 { Output.line("\(failed) writer process(es) failed") }
    Output.line(
      "keys=\(found)/\(expected) lost=\(lost) counter=\(counter)/\(writers * increments) writes_per_s=\(Int(rate))"
        + " p999_us=\(latencies.percentile(0.999) / 1000) max_us=\(latencies.maximum / 1000)")
    if lost != 0 || failed > 0 { throw ExitCode(1) }
  }
}

extension StressDefaults {
  /// The check that does not trust the engine: makes the suite's export current (synchronize()), then reads the
  /// plist file with the codec.
  /// A tool writing the file in place at that moment (a test edits it while the writers run) leaves it
  /// half-written for a while: read again after another synchronize(), which takes in the tool's edit, for up to
  /// 10 s.
  static func export(of defaults: SharedDefaults, in group: GroupContainer) throws -> [String: PropertyListValue] {
    let path = group.preferencesURL.appendingPathComponent("\(defaults.suiteName).plist").path
    var attempts = 0
    while true {
      try defaults.synchronize()
      let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: path)))
      attempts += 1
      do {
        guard case .dictionary(let values) = try PropertyListValue(bytes: bytes, limits: SharedDefaults.suiteLimits)
        else { throw CommandFailure("the snapshot '\(path)' is not a dictionary") }
        return values
      } catch  where attempts < 100 {
        Thread.sleep(forTimeInterval: 0.1)
      }
    }
  }
}

/// Waits until every child printed "ready" on its standard output, then closes all their standard inputs at once
/// (`defaults-writer --start-on-stdin-close`). Throws when a child exited before it was ready.
func startTogether(_ children: [(Process, Pipe)]) throws {
  for (_, output) in children {
    var line: [UInt8] = []
    while !line.starts(with: Array("ready\n".utf8)) {
      let chunk = output.fileHandleForReading.availableData  // blocks until bytes or end of file
      guard !chunk.isEmpty else { throw CommandFailure("a writer exited before it was ready") }
      line += chunk
    }
  }
  for (child, _) in children { try (child.standardInput as? Pipe)?.fileHandleForWriting.close() }
}

struct StressDefaultsWriter: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults-writer", abstract: "One writer of `stress defaults` (started by it).",
    shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option var index: Int
  @Option var keys: Int
  @Option var increments: Int
  @Option(help: "Times the keys are written (a suite that stays the same size, as real ones do).") var rounds = 1
  @Flag(help: "Print \"loop <start-ns> <end-ns>\" (monotonic) after the loop.") var timing = false
  @Flag(help: "Time every set and update; print \"latency <histogram>\" (LatencyHistogram) after the loop.")
  var latency = false
  @Flag(help: "Print \"ready\" when the suite is open, then start the loop when standard input closes.")
  var startOnStdinClose = false
  @Option(help: .hidden) var testingUpdateDelayUs = 0
  /// For the tests' histories: "update <value>" after each update() returned (acknowledged), in order.
  @Flag(help: .hidden) var printUpdates = false
  /// For the benchmarks' big-value rows: each set writes a distinct data value of this many bytes, not an integer.
  @Option(help: .hidden) var valueBytes = 0
  /// For the benchmarks: a last line `peak_rss_kb=<n>`, this process's own peak.
  @Flag(help: .hidden) var printPeakMemory = false
  /// For the benchmarks: synchronize() after the loop (the export written and everything durable).
  @Flag(help: .hidden) var synchronize = false
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.open(container)
    // Options and key names outside the loop: the loop measures the suite, not argument parsing or string building.
    let (keys, rounds, increments) = (self.keys, self.rounds, self.increments)
    let names = (0..<keys).map { "w\(index)-k\($0)" }
    let (timed, delay, valueBytes) = (latency, UInt32(testingUpdateDelayUs), self.valueBytes)
    var big = Data(count: valueBytes)
    if startOnStdinClose {
      Output.line("ready")
      _ = FileHandle.standardInput.readDataToEndOfFile()
    }
    var histogram = LatencyHistogram()
    let start = DispatchTime.now().uptimeNanoseconds
    // Interleave the two kinds of writes, so sets and updates of all writers contend.
    for i in 0..<max(keys * rounds, increments) {
      if i < keys * rounds {
        let before = timed ? DispatchTime.now().uptimeNanoseconds : 0
        if valueBytes > 0 {
          // Distinct values: the first eight bytes are the set's number.
          big.withUnsafeMutableBytes { out in withUnsafeBytes(of: UInt64(i).littleEndian) { out.copyMemory(from: $0) } }
          try defaults.set(big, forKey: names[i % keys])
        } else {
          try defaults.set(i % keys, forKey: names[i % keys])
        }
        if timed { histogram.record(DispatchTime.now().uptimeNanoseconds &- before) }
      }
      if i < increments {
        let before = timed ? DispatchTime.now().uptimeNanoseconds : 0
        let new = try defaults.update("counter") { old in
          if delay > 0 { MonotonicClock.sleep(nanoseconds: UInt64(delay) * 1000) }
          return .integer(PropertyListInteger((old?.intValue ?? 0) + 1))
        }
        if printUpdates { Output.line("update \(new?.intValue ?? -1)") }
        if timed { histogram.record(DispatchTime.now().uptimeNanoseconds &- before) }
      }
    }
    if timed { Output.line("latency " + histogram.line) }
    // For benchmarks: when this writer's loop ran (monotonic clock, comparable across processes).
    if timing { Output.line("loop \(start) \(DispatchTime.now().uptimeNanoseconds)") }
    // A compaction of this writer may still be reading a tool's in-place edit of the export (it lands in the file
    // the compaction replaced, which only this process can still reach): wait for it before exiting. (Not
    // synchronize(): its durable compaction would give a tool still writing in place only 250 ms.)
    defaults.waitForBackgroundWork()
    if synchronize { try defaults.synchronize() }
    if printPeakMemory { Output.line("peak_rss_kb=\(((try? MemorySignals.peakResidentBytes()) ?? 0) / 1024)") }
  }
}

/// A reader beside `stress defaults`' writers, for the benchmarks: reads the keys a writer `w<index>` writes
/// (`w<index>-k<i>`, random i below --keys), each read timed, until standard input closes (or once each with
/// --once); then prints "latency <histogram>", "p999_us=<n> max_us=<n> reads=<n>" and, with --print-peak-memory,
/// "peak_rss_kb=<n>".
struct StressDefaultsReader: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults-reader", abstract: "A timed reader of a suite (for the benchmarks).", shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option var index = 0
  @Option var keys: Int
  @Flag(help: "Read --reads keys once, then exit (a new process's reads); else read until standard input closes.")
  var once = false
  @Option(help: "With --once: how many keys.") var reads = 10
  @Flag(help: "Also read the whole suite (dictionaryRepresentation) once.") var whole = false
  @Flag var printPeakMemory = false
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.open(container)
    let (keys, index) = (max(self.keys, 1), self.index)
    var histogram = LatencyHistogram()
    var generator = SystemRandomNumberGenerator()
    var reads = 0
    var found = 0
    func readOne() {
      let name = "w\(index)-k\(Int.random(in: 0..<keys, using: &generator))"
      let before = DispatchTime.now().uptimeNanoseconds
      if defaults.value(forKey: name) != nil { found += 1 }
      histogram.record(DispatchTime.now().uptimeNanoseconds &- before)
      reads += 1
    }
    if once {
      for _ in 0..<self.reads { readOne() }
    } else {
      Output.line("ready")
      // Standard input closing is the stop: a thread waits for it while this one reads.
      let stop = StopFlag()
      Thread.detachNewThread {
        _ = FileHandle.standardInput.readDataToEndOfFile()
        stop.set()
      }
      while !stop.isSet { readOne() }
    }
    if whole { found += defaults.dictionaryRepresentation().isEmpty ? 0 : 1 }
    Output.line("latency " + histogram.line)
    Output.line(
      "p999_us=\(histogram.percentile(0.999) / 1000) max_us=\(histogram.maximum / 1000) reads=\(reads) found=\(found)")
    if printPeakMemory { Output.line("peak_rss_kb=\(((try? MemorySignals.peakResidentBytes()) ?? 0) / 1024)") }
  }
}

/// A flag one thread sets and another polls.
final class StopFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var value = false
  func set() { lock.withLock { value = true } }
  var isSet: Bool { lock.withLock { value } }
}
