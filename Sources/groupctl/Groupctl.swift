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
      The container root comes from --root (after the subcommand or before it: `groupctl --root DIR status ID`), \
      else GROUP_CONTAINER_ROOT, else $XDG_DATA_HOME/group-containers (default ~/.local/share/group-containers). \
      Paths are relative to the container; paths that lead outside \
      it are refused. Commands that only read (read, status, defaults read/read-type/find/domains/export, cache \
      get/list/stats, downloads list/wait/watch, activities list/watch, doctor) never create a container, suite or cache: a missing one \
      is an error.

      Exit status: 0 success, 1 failure (the reason on stderr, after 'groupctl: '), 64 a usage error (with the \
      subcommand's usage line). `downloads` adds 2 (no such task, a wait that timed out) and 3 (an agent already \
      runs); `cache get` exits 1 on a miss.
      """,
    // No `version:` here: ArgumentParser would list --version among every subcommand's options.
    // Every command of the tree names itself (`commandName:`): a name left out is derived by `String(describing:)`
    // of the type, and each of those asked the runtime a few conformances it scans every record loaded to answer —
    // 14 unnamed commands were half of a `groupctl write`'s conformance scans, ~6 ms of its 41 ms of CPU.
    subcommands: [
      Read.self, Write.self, Present.self, Status.self, Defaults.self, Cache.self, Stress.self, Open.self,
      Downloads.self, Activities.self, Widgets.self, Doctor.self, Send.self, IntentCommand.self,
    ]
  )

  static let version = "0.1.0"

  @Flag(name: .customLong("version"), help: "Show the version.") var showVersion = false

  func run() throws {
    guard showVersion else { throw CleanExit.helpRequest(self) }
    Output.line(Self.version)
  }

  static func main() async {
    Interrupts.install()  // before the command runs: SIGINT/SIGTERM then end it cleanly
    let arguments = RootArguments.hoistRoot(Array(CommandLine.arguments.dropFirst()))
    let command: ParsableCommand
    do {
      command = try parseAsRoot(arguments)
    } catch {
      // A mistyped subcommand: ArgumentParser says only "Unexpected argument"; name the closest ones.
      if let unknown = RootArguments.unknownSubcommand(in: arguments) {
        Output.error(unknown)
        exit(withError: ExitCode.validationFailure)
      }
      exit(withError: error)  // the parser names the subcommand
    }
    do {
      if var asyncCommand = command as? AsyncParsableCommand {
        try await asyncCommand.run()
      } else {
        var command = command
        try command.run()
      }
    } catch {
      exit(command: type(of: command), error)
    }
  }

  /// Ends the process for an error thrown by `command`'s `run()`. ArgumentParser's own handling prints the
  /// top-level usage for a `ValidationError` thrown there; a user needs the subcommand's: 64 with its usage line.
  /// Failures print `groupctl: <reason>` and exit 1; ArgumentParser's own errors (help, `ExitCode`, `CleanExit`)
  /// pass through.
  static func exit(command: ParsableCommand.Type, _ error: Error) -> Never {
    switch error {
    case let error as ValidationError:
      let help = (["groupctl"] + commandPath(of: command)).joined(separator: " ")
      Output.error(
        "Error: \(error.message)\nUsage: \(usageString(for: command))\n  See '\(help) --help' for more information.")
      exit(withError: ExitCode.validationFailure)
    case is ExitCode, is CleanExit:
      exit(withError: error)
    case _ where exitCode(for: error) != .failure:
      // ArgumentParser's own, e.g. the help that its `help` subcommand throws from run().
      exit(withError: error)
    default:
      Output.error("groupctl: \(error)")
      exit(withError: ExitCode.failure)
    }
  }

  /// The subcommand names from the root down to `command` (e.g. ["defaults", "write"]).
  static func commandPath(of command: ParsableCommand.Type) -> [String] {
    func search(_ node: ParsableCommand.Type, _ path: [String]) -> [String]? {
      if ObjectIdentifier(node) == ObjectIdentifier(command) { return path }
      for child in node.configuration.subcommands {
        if let found = search(child, path + [child._commandName]) { return found }
      }
      return nil
    }
    return search(Groupctl.self, []) ?? []
  }
}

/// A failure a command reports itself: `groupctl: <description>` on stderr, exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Options every subcommand takes.
struct ContainerOptions: ParsableArguments {
  @Argument(help: "The group identifier, e.g. group.com.example.app.")
  var groupID: String

  @Option(help: "The directory holding containers (overrides GROUP_CONTAINER_ROOT).")
  var root: String?

  func open() throws -> GroupContainer {
    try GroupContainer(identifier: groupID, root: rootURL)
  }

  /// The container if it exists; else `no such container 'ID' at ROOT/ID` (exit status 1), with nothing created.
  /// For the commands that only read.
  func openExisting() throws -> GroupContainer {
    guard let group = try GroupContainer(existingIdentifier: groupID, root: rootURL) else {
      let rootPath = try rootURL?.standardizedFileURL.path ?? GroupContainer.defaultRoot()
      throw CommandFailure("no such container '\(groupID)' at \(rootPath)/\(groupID)")
    }
    return group
  }

  private var rootURL: URL? { root.map { URL(fileURLWithPath: $0, isDirectory: true) } }
}

/// Standard output without buffering: each line reaches a pipe or file at once.
enum Output {
  static func line(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
  }

  /// One line on standard error.
  static func error(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
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
  static let configuration = CommandConfiguration(
    commandName: "read",
    abstract: "Coordinated read of a container item to stdout.",
    discussion: "A container that does not exist is an error (exit status 1); read never creates one.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "Container-relative path.") var path: String

  func run() throws {
    _ = try ContainerPath(path)  // a malformed path is refused before the container is looked for
    let group = try container.openExisting()
    let url = try group.url(forRelativePath: path)
    let data: Data
    do {
      data = try FileCoordinator().coordinate(readingItemAt: url) { url in try group.contents(of: url) }
    } catch let error as GroupContainerError {
      // The user named an item: say that it is missing, not which system call found it so.
      guard let system = error.fileSystemError, [.noSuchFileOrDirectory, .notDirectory].contains(system.errno) else {
        throw error
      }
      throw CommandFailure("no such item '\(path)' in the container '\(group.identifier)' (\(group.url.path))")
    }
    FileHandle.standardOutput.write(data)
  }
}

struct Write: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "write",
    abstract: "Coordinated atomic replace of a container item with stdin.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "Container-relative path.") var path: String
  @Flag(help: "Also survive power loss (fsync file and directory).") var durable = false
  @Flag(help: "Print how long the coordinated write took: 'coordinated write <ns> ns' (the benchmarks' first write).")
  var printDuration = false

  func run() throws {
    let group = try container.open()
    let url = try group.url(forRelativePath: path)
    let data = FileHandle.standardInput.readDataToEndOfFile()
    let start = MonotonicClock.nanoseconds()
    try FileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
      try group.write(data, to: url, durable: durable)
    }
    if printDuration { Output.line("coordinated write \(MonotonicClock.nanoseconds() - start) ns") }
  }
}

struct Status: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "status",
    abstract: "Live processes, presenters and held locks of a container.",
    discussion: "A container that does not exist is an error (exit status 1); status never creates one.")

  @OptionGroup var container: ContainerOptions
  @Flag(help: "Print one compact JSON line.") var json = false

  func run() throws {
    let status = try container.openExisting().status()
    if json {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]  // one line, like the other JSON outputs
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
    if !status.damagedPresenters.isEmpty {
      Output.line("damaged presenter records (\(status.damagedPresenters.count)): presenters that cannot be asked")
      for d in status.damagedPresenters {
        Output.line("  \(d.pid.map { "pid \($0)" } ?? "pid ?") \(d.record): \(d.reason)")
      }
    }
    Output.line("locks (\(status.locks.count)):")
    for l in status.locks {
      Output.line("  pid \(l.pid) \(l.exclusive ? "EX" : "SH") \(l.kind) \(l.item.isEmpty ? "/" : l.item)")
    }
  }
}
