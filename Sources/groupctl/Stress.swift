import ArgumentParser
import Foundation
import GroupContainer

struct Stress: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Run many writer processes against the container and check that nothing was lost.",
    subcommands: [
      StressDefaults.self, StressDefaultsWriter.self, StressFiles.self, StressFilesWriter.self,
      StressFilesPresenter.self, PresentMany.self,
    ])
}

struct StressDefaults: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults",
    abstract: "N writer processes: writer w sets keys w<w>-k<i> and increments `counter` with update().",
    discussion: """
      Then it checks independently, re-reading the snapshot plist with the codec, and prints as its last line \
      keys=<found>/<expected> lost=<n> counter=<value>/<expected> writes_per_s=<x>. Exit status 0 only when \
      nothing was lost.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "Writer processes.") var writers = 4
  @Option(help: "Distinct keys per writer.") var keys = 1000
  @Option(help: "update() increments of `counter` per writer.") var increments = 1000
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let group = try container.open()
    let defaults = try SharedDefaults(suiteName: suite.suite, container: group)
    try defaults.removeObject(forKey: "counter")
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    let start = Date()
    var children: [Process] = []
    for w in 0..<writers {
      let child = Process()
      child.executableURL = executable
      var arguments = [
        "stress", "defaults-writer", container.groupID, "--index", "\(w)", "--keys", "\(keys)",
        "--increments", "\(increments)", "--suite", defaults.suiteName,
      ]
      if let root = container.root { arguments += ["--root", root] }
      child.arguments = arguments
      try child.run()
      children.append(child)
    }
    var failed = 0
    for child in children {
      child.waitUntilExit()
      if child.terminationStatus != 0 { failed += 1 }
    }
    let elapsed = Date().timeIntervalSince(start)
    // Check independently: make the snapshot current, then read the file with the codec.
    try defaults.synchronize()
    let path = group.preferencesURL.appendingPathComponent("\(defaults.suiteName).plist").path
    let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: path)))
    guard case .dictionary(let values) = try PropertyListValue(bytes: bytes) else {
      throw CommandFailure("the snapshot '\(path)' is not a dictionary")
    }
    var found = 0
    for w in 0..<writers {
      for i in 0..<keys where values["w\(w)-k\(i)"] == .integer(PropertyListInteger(i)) { found += 1 }
    }
    let expected = writers * keys
    let counter = values["counter"]?.intValue ?? 0
    let lost = expected - found + (writers * increments - counter)
    let rate = Double(writers * (keys + increments)) / max(elapsed, 1e-9)
    if failed > 0 { Output.line("\(failed) writer process(es) failed") }
    Output.line(
      "keys=\(found)/\(expected) lost=\(lost) counter=\(counter)/\(writers * increments) writes_per_s=\(Int(rate))")
    if lost != 0 || failed > 0 { throw ExitCode(1) }
  }
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
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.open(container)
    // Options and key names outside the loop: the loop measures the suite, not argument parsing or string building.
    let (keys, rounds, increments) = (self.keys, self.rounds, self.increments)
    let names = (0..<keys).map { "w\(index)-k\($0)" }
    let start = DispatchTime.now().uptimeNanoseconds
    // Interleave the two kinds of writes, so sets and updates of all writers contend.
    for i in 0..<max(keys * rounds, increments) {
      if i < keys * rounds { try defaults.set(i % keys, forKey: names[i % keys]) }
      if i < increments {
        try defaults.update("counter") { old in .integer(PropertyListInteger((old?.intValue ?? 0) + 1)) }
      }
    }
    // For benchmarks: when this writer's loop ran (monotonic clock, comparable across processes).
    if timing { Output.line("loop \(start) \(DispatchTime.now().uptimeNanoseconds)") }
  }
}
