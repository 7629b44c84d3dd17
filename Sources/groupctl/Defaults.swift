import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

struct Defaults: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "defaults",
    abstract: "Read and write a shared defaults suite, in the style of macOS `defaults`.",
    discussion: """
      The suite is --suite S, default the group identifier (macOS's domain). Commands that only read (read, \
      read-type, find, domains, export) and delete, rename and sync never create a container or suite: a missing \
      one is an error, exit status 1.
      """,
    subcommands: [
      DefaultsRead.self, DefaultsReadType.self, DefaultsWrite.self, DefaultsDelete.self, DefaultsRename.self,
      DefaultsDomains.self, DefaultsFind.self, DefaultsExport.self, DefaultsImport.self, DefaultsWatch.self,
      DefaultsSync.self,
    ])
}

struct SuiteOptions: ParsableArguments {
  @Option(help: "The suite (default: the group identifier).") var suite: String?

  /// Opens the suite, creating the container and suite when missing (for writers).
  func open(_ container: ContainerOptions) throws -> SharedDefaults {
    try SharedDefaults(suiteName: suite, container: try container.open())
  }

  /// Opens the suite only if the container and the suite exist; else exit status 1, nothing created.
  func openExisting(_ container: ContainerOptions) throws -> SharedDefaults {
    try Self.openExisting(suite, in: try container.openExisting())
  }

  /// The suite `name` (default: the group identifier) of an existing container, or `no such suite` (status 1).
  static func openExisting(_ name: String?, in group: GroupContainer) throws -> SharedDefaults {
    guard let defaults = try SharedDefaults(existingSuiteName: name, container: group) else {
      throw CommandFailure("no such suite '\(name ?? group.identifier)' in \(group.identifier)")
    }
    return defaults
  }
}

struct DefaultsRead: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "read", abstract: "Print one key, or the whole suite.",
    discussion: "A missing container, suite or key is an error (exit status 1); nothing is created.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key (default: every key).") var key: String?
  @OptionGroup var suite: SuiteOptions
  @Flag(help: "Print plain JSON (integers as numbers, data as base64, dates as ISO 8601).") var json = false
  /// For the benchmarks: a last line `peak_rss_kb=<n>`, this process's own peak (see `peakResidentBytes`).
  @Flag(help: .hidden) var printPeakMemory = false

  func run() throws {
    defer {
      if printPeakMemory { Output.line("peak_rss_kb=\(((try? MemorySignals.peakResidentBytes()) ?? 0) / 1024)") }
    }
    let defaults = try suite.openExisting(container)
    let value: PropertyListValue
    if let key {
      guard let found = defaults.value(forKey: key) else {
        throw CommandFailure("the key '\(key)' does not exist in suite '\(defaults.suiteName)'")
      }
      value = found
    } else {
      value = .dictionary(defaults.propertyListRepresentation())
    }
    Output.line(json ? PlainJSON.render(value) : OldStylePlist.render(value))
    let unapplied = defaults.unappliedOutsideEdits
    if let last = unapplied.last {
      Output.error(
        "note: \(unapplied.count) outside edit(s) of '\(defaults.suiteName).plist' were kept aside, not applied (they may hold values read before newer writes); latest: \(last)"
      )
    }
  }
}

struct DefaultsWrite: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "write",
    abstract: "Set a key (creating the container and suite when missing).",
    discussion: """
      The value, as macOS `defaults write` takes it: -int N | -float F | -bool true|false | -string S | -data HEX \
      | -date ISO8601 | -array ITEM… | -array-add ITEM… (appends; creates the array) | -dict KEY ITEM… | \
      -dict-add KEY ITEM… (merges; creates the dictionary). An ITEM is a string, or typed with one of the scalar \
      flags (-array -int 1 -string x). A bare value is a string, unless it starts with { ( < or " : then it is an \
      old-style plist, e.g. '{ a = 1; b = (x, "y z"); }' or '( 1, 2 )' (its scalars are strings, as on macOS).
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key.") var key: String
  @OptionGroup var suite: SuiteOptions
  @Argument(parsing: .allUnrecognized, help: "The typed value.") var value: [String] = []

  func run() throws {
    let parsed = try ValueSyntax.parse(value)  // before opening: a malformed value creates nothing
    let defaults = try suite.open(container)
    switch parsed {
    case .set(let value):
      try defaults.set(value: value, forKey: key)
    case .arrayAdd(let items):
      try defaults.update(key) { old in
        guard let old else { return .array(items) }
        guard case .array(let existing) = old else {
          throw CommandFailure("-array-add: the value of '\(key)' is \(TypeName.of(old)), not an array; left unchanged")
        }
        return .array(existing + items)
      }
    case .dictAdd(let entries):
      try defaults.update(key) { old in
        guard let old else { return .dictionary(entries) }
        guard case .dictionary(let existing) = old else {
          throw CommandFailure(
            "-dict-add: the value of '\(key)' is \(TypeName.of(old)), not a dictionary; left unchanged")
        }
        return .dictionary(existing.merging(entries) { $1 })
      }
    }
  }
}

struct DefaultsDelete: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "delete", abstract: "Remove a key, or every key.",
    discussion: "A missing container, suite or key is an error (exit status 1); nothing is created.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key (default: every key of the suite).") var key: String?
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.openExisting(container)
    if let key {
      guard defaults.value(forKey: key) != nil else {
        throw CommandFailure("the key '\(key)' does not exist in suite '\(defaults.suiteName)'")
      }
      try defaults.removeObject(forKey: key)
    } else {
      for key in defaults.propertyListRepresentation().keys { try defaults.removeObject(forKey: key) }
    }
  }
}

struct DefaultsSync: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sync", abstract: "Make the snapshot plist current and durable (synchronize()).",
    discussion: "A missing container or suite is an error (exit status 1); nothing is created.")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var suite: SuiteOptions

  func run() throws { try suite.openExisting(container).synchronize() }
}

struct DefaultsWatch: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "watch",
    abstract: "Print one JSON line per change (from any process) until interrupted.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "Keys to watch (default: all).") var keys: [String] = []
  @OptionGroup var suite: SuiteOptions

  func run() async throws {
    let defaults = try suite.open(container)
    let changes = defaults.changes(forKeys: keys.isEmpty ? nil : Set(keys))
    Interrupts.onInterrupt {}
    Output.line(#"{"event":"ready","pid":\#(CurrentProcess.id)}"#)
    for await change in changes {
      let pid = change.originProcessID.map(String.init) ?? "null"
      let old = change.oldValue.map(PlainJSON.render) ?? "null"
      let new = change.newValue.map(PlainJSON.render) ?? "null"
      Output.line(#"{"key":\#(PlainJSON.string(change.key)),"old":\#(old),"new":\#(new),"pid":\#(pid)}"#)
    }
  }
}

/// Plain JSON for a property-list value: objects, arrays, numbers (also beyond Int64), base64 data, ISO 8601 dates.
enum PlainJSON {
  static func render(_ value: PropertyListValue) -> String {
    switch value {
    case .string(let s): return string(s)
    case .integer(let i): return i.description
    case .real(let d): return d.isFinite ? "\(d)" : "null"
    case .bool(let b): return b ? "true" : "false"
    case .date(let d):
      return string(
        ISO8601DateFormatter().string(from: Date(timeIntervalSinceReferenceDate: d.secondsSinceReferenceDate)))
    case .data(let bytes): return string(Data(bytes).base64EncodedString())
    case .array(let a): return "[" + a.map(render).joined(separator: ",") + "]"
    case .dictionary(let d):
      return "{" + d.keys.sorted().map { string($0) + ":" + render(d[$0]!) }.joined(separator: ",") + "}"
    case .uid(let u): return "\(u)"
    }
  }

  static func string(_ s: String) -> String {
    // Nothing to escape (nearly always): the string as it is, quoted (a scalar at a time was most of a line's cost).
    if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
      return "\"" + s + "\""
    }
    var out = "\""
    for scalar in s.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out + "\""
  }
}

/// The old-style (NeXT) plist text `defaults read` prints.
enum OldStylePlist {
  static func render(_ value: PropertyListValue, indent: String = "") -> String {
    switch value {
    case .string(let s): return quote(s)
    case .integer(let i): return i.description
    case .real(let d): return "\(d)"
    case .bool(let b): return b ? "1" : "0"
    case .date(let d):
      return quote(
        ISO8601DateFormatter().string(from: Date(timeIntervalSinceReferenceDate: d.secondsSinceReferenceDate)))
    case .data(let bytes):
      return "{length = \(bytes.count), bytes = 0x" + bytes.map { String(format: "%02x", $0) }.joined() + "}"
    case .array(let a):
      if a.isEmpty { return "(\n\(indent))" }
      return "(\n" + a.map { indent + "    " + render($0, indent: indent + "    ") }.joined(separator: ",\n")
        + "\n\(indent))"
    case .dictionary(let d):
      if d.isEmpty { return "{\n\(indent)}" }
      return "{\n"
        + d.keys.sorted().map { indent + "    " + quote($0) + " = " + render(d[$0]!, indent: indent + "    ") + ";" }
        .joined(separator: "\n") + "\n\(indent)}"
    case .uid(let u): return "<CFKeyedArchiverUID \(u)>"
    }
  }

  static func quote(_ s: String) -> String {
    let plain =
      !s.isEmpty
      && s.unicodeScalars.allSatisfy {
        $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-/".unicodeScalars.contains($0))
      }
    return plain ? s : PlainJSON.string(s)
  }
}
