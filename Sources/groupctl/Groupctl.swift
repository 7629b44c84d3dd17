import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

@main
struct Groupctl: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "groupctl",
    abstract: "Inspect and use a shared group container from the shell.",
    discussion: """
      The container root comes from --root, else GROUP_CONTAINER_ROOT, else $XDG_DATA_HOME/group-containers \
      (default ~/.local/share/group-containers). Paths are relative to the container; paths that lead outside \
      it are refused.
      """,
    subcommands: [Read.self, Write.self, Present.self, Status.self, Defaults.self, Cache.self, Stress.self, Open.self, Downloads.self, Doctor.self]
  )

  static func main() async {
    Interrupts.install()  // before the command runs: SIGINT/SIGTERM then end it cleanly
    await main(nil)
  }
}

/// Options every subcommand takes.
struct ContainerOptions: ParsableArguments {
  @Argument(help: "The group identifier, e.g. group.com.example.app.")
  var groupID: String

  @Option(help: "The directory holding containers (overrides GROUP_CONTAINER_ROOT).")
  var root: String?

  func open() throws -> GroupContainer {
    try GroupContainer(identifier: groupID, root: root.map { URL(fileURLWithPath: $0, isDirectory: true) })
  }
}

/// Standard output without buffering: each line reaches a pipe or file at once.
enum Output {
  static func line(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
  }

  /// One flat JSON object per line, keys sorted, nil values left out. Written by hand: JSONSerialization takes
  /// ~100 µs per line here, which `present` would add to every handshake it answers.
  static func json(_ object: [String: JSONScalar?]) {
    var text = "{"
    for (key, value) in object.sorted(by: { $0.key < $1.key }) {
      guard let value else { continue }
      if text.count > 1 { text += "," }
      text += JSONScalar.string(key).encoded + ":" + value.encoded
    }
    line(text + "}")
  }
}

/// A JSON value of a flat `Output.json` line.
enum JSONScalar {
  case string(String), int(Int), double(Double), bool(Bool)

  var encoded: String {
    switch self {
    case .int(let value): return String(value)
    case .double(let value): return value.isFinite ? "\(value)" : "null"
    case .bool(let value): return value ? "true" : "false"
    case .string(let value): return PlainJSON.string(value)
    }
  }
}

struct Read: ParsableCommand {
  static let configuration = CommandConfiguration(abstract: "Coordinated read of a container item to stdout.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "Container-relative path.") var path: String

  func run() throws {
    let group = try container.open()
    let url = try group.url(forRelativePath: path)
    let data = try FileCoordinator().coordinate(readingItemAt: url) { url in try group.contents(of: url) }
    FileHandle.standardOutput.write(data)
  }
}

struct Write: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Coordinated atomic replace of a container item with stdin.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "Container-relative path.") var path: String
  @Flag(help: "Also survive power loss (fsync file and directory).") var durable = false

  func run() throws {
    let group = try container.open()
    let url = try group.url(forRelativePath: path)
    let data = FileHandle.standardInput.readDataToEndOfFile()
    try FileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
      try group.write(data, to: url, durable: durable)
    }
  }
}

struct Status: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Live processes, presenters and held locks of a container.")

  @OptionGroup var container: ContainerOptions
  @Flag(help: "Print JSON.") var json = false

  func run() throws {
    let status = try container.open().status()
    if json {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
      Output.line(String(decoding: try encoder.encode(status), as: UTF8.self))
      return
    }
    Output.line("container \(status.container)")
    Output.line("processes (\(status.processes.count)):")
    for p in status.processes { Output.line("  pid \(p.pid)\(p.isCurrent ? " (groupctl)" : "")") }
    Output.line("presenters (\(status.presenters.count)):")
    for p in status.presenters {
      Output.line("  pid \(p.pid) \(p.item.isEmpty ? "/" : p.item)\(p.isDirectory ? "/" : "")")
    }
    Output.line("locks (\(status.locks.count)):")
    for l in status.locks {
      Output.line("  pid \(l.pid) \(l.exclusive ? "EX" : "SH") \(l.kind) \(l.item.isEmpty ? "/" : l.item)")
    }
  }
}
