import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

struct Defaults: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Read and write a shared defaults suite, in the style of macOS `defaults`.",
    subcommands: [DefaultsRead.self, DefaultsWrite.self, DefaultsDelete.self, DefaultsWatch.self, DefaultsSync.self])
}

struct SuiteOptions: ParsableArguments {
  @Option(help: "The suite (default: the group identifier).") var suite: String?

  func open(_ container: ContainerOptions) throws -> SharedDefaults {
    try SharedDefaults(suiteName: suite, container: try container.open())
  }
}

struct DefaultsRead: ParsableCommand {
  static let configuration = CommandConfiguration(commandName: "read", abstract: "Print one key, or the whole suite.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key (default: every key).") var key: String?
  @OptionGroup var suite: SuiteOptions
  @Flag(help: "Print plain JSON (integers as numbers, data as base64, dates as ISO 8601).") var json = false

  func run() throws {
    let defaults = try suite.open(container)
    let value: PropertyListValue
    if let key {
      guard let found = defaults.value(forKey: key) else {
        throw ValidationError("the key '\(key)' does not exist in suite '\(defaults.suiteName)'")
      }
      value = found
    } else {
      value = .dictionary(defaults.propertyListRepresentation())
    }
    Output.line(json ? PlainJSON.render(value) : OldStylePlist.render(value))
  }
}

struct DefaultsWrite: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "write",
    abstract: "Set a key.",
    discussion: """
      The value: -int N | -float F | -bool true|false | -string S | -data HEX | -date ISO8601 | -array V… | \
      -dict K V… (array items and dictionary values are strings). A bare value is a string.
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key.") var key: String
  @OptionGroup var suite: SuiteOptions
  @Argument(parsing: .allUnrecognized, help: "The typed value.") var value: [String] = []

  func run() throws {
    let defaults = try suite.open(container)
    try defaults.set(value: try ValueSyntax.parse(value), forKey: key)
  }
}

/// The macOS `defaults write` value syntax.
enum ValueSyntax {
  static func parse(_ words: [String]) throws -> PropertyListValue {
    guard let first = words.first else { throw ValidationError("missing value (e.g. -int 5 or -string hello)") }
    let rest = Array(words.dropFirst())
    func single() throws -> String {
      guard rest.count == 1 else { throw ValidationError("\(first) takes exactly one value") }
      return rest[0]
    }
    switch first {
    case "-int", "-integer":
      guard let v = Int128(try single()) else { throw ValidationError("'\(rest[0])' is not an integer") }
      return .integer(PropertyListInteger(v))
    case "-float", "-real", "-double":
      guard let v = Double(try single()), v.isFinite else { throw ValidationError("'\(rest[0])' is not a number") }
      return .real(v)
    case "-bool", "-boolean":
      switch try single().lowercased() {
      case "true", "yes", "1": return .bool(true)
      case "false", "no", "0": return .bool(false)
      default: throw ValidationError("'\(rest[0])' is not true or false")
      }
    case "-string":
      return .string(try single())
    case "-data":
      let hex = try single()
      guard hex.count % 2 == 0, let bytes = hexBytes(hex) else { throw ValidationError("'\(hex)' is not hex bytes") }
      return .data(bytes)
    case "-date":
      let text = try single()
      guard let date = ISO8601DateFormatter().date(from: text) else {
        throw ValidationError("'\(text)' is not an ISO 8601 date like 2026-01-02T03:04:05Z")
      }
      return .date(PropertyListDate(secondsSinceReferenceDate: date.timeIntervalSinceReferenceDate))
    case "-array":
      return .array(rest.map { .string($0) })
    case "-dict":
      guard rest.count % 2 == 0 else { throw ValidationError("-dict takes key/value pairs") }
      var dictionary: [String: PropertyListValue] = [:]
      for i in stride(from: 0, to: rest.count, by: 2) { dictionary[rest[i]] = .string(rest[i + 1]) }
      return .dictionary(dictionary)
    default:
      guard words.count == 1, !first.hasPrefix("-") else { throw ValidationError("unknown value type '\(first)'") }
      return .string(first)
    }
  }

  static func hexBytes(_ hex: String) -> [UInt8]? {
    var bytes: [UInt8] = []
    var iterator = hex.makeIterator()
    while let high = iterator.next(), let low = iterator.next() {
      guard let byte = UInt8(String([high, low]), radix: 16) else { return nil }
      bytes.append(byte)
    }
    return bytes
  }
}

struct DefaultsDelete: ParsableCommand {
  static let configuration = CommandConfiguration(commandName: "delete", abstract: "Remove a key, or every key.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key (default: every key of the suite).") var key: String?
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.open(container)
    if let key {
      guard defaults.value(forKey: key) != nil else {
        throw ValidationError("the key '\(key)' does not exist in suite '\(defaults.suiteName)'")
      }
      try defaults.removeObject(forKey: key)
    } else {
      for key in defaults.propertyListRepresentation().keys { try defaults.removeObject(forKey: key) }
    }
  }
}

struct DefaultsSync: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sync", abstract: "Make the snapshot plist current and durable (synchronize()).")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var suite: SuiteOptions

  func run() throws { try suite.open(container).synchronize() }
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
    Output.line(#"{"event":"ready","pid":\#(getpid())}"#)
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
