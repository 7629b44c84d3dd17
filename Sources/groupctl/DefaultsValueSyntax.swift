import ArgumentParser
import Foundation
import GroupContainer

/// What `defaults write` does with the key: set it, append to its array, or merge into its dictionary.
enum WriteValue: Equatable {
  case set(PropertyListValue)
  case arrayAdd([PropertyListValue])
  case dictAdd([String: PropertyListValue])
}

/// The macOS `defaults write` value syntax. Every mistake is a `ValidationError` (exit status 64 with the usage of
/// `defaults write`).
enum ValueSyntax {
  /// The flags that type one scalar (`-int 5`), alone or as an item of `-array`/`-dict`.
  static let scalarFlags: Set<String> = [
    "-int", "-integer", "-float", "-real", "-double", "-bool", "-boolean", "-string", "-data", "-date",
  ]

  static func parse(_ words: [String]) throws -> WriteValue {
    guard let first = words.first else { throw ValidationError("missing value (e.g. -int 5 or -string hello)") }
    let rest = Array(words.dropFirst())
    switch first {
    case "-array":
      return .set(.array(try items(rest, of: first)))
    case "-array-add":
      guard !rest.isEmpty else { throw ValidationError("-array-add takes one item or more") }
      return .arrayAdd(try items(rest, of: first))
    case "-dict":
      return .set(.dictionary(try entries(rest, of: first)))
    case "-dict-add":
      guard !rest.isEmpty else { throw ValidationError("-dict-add takes one key/value pair or more") }
      return .dictAdd(try entries(rest, of: first))
    case _ where scalarFlags.contains(first):
      guard rest.count == 1 else { throw ValidationError("\(first) takes exactly one value") }
      return .set(try scalar(first, rest[0]))
    default:
      guard words.count == 1 else {
        throw ValidationError(
          "'\(words.joined(separator: " "))' is several values: quote a string with spaces, or type them (-array a b)")
      }
      guard !first.hasPrefix("-") else { throw ValidationError("unknown value type '\(first)'") }
      return .set(try bare(first))
    }
  }

  /// A bare value: an old-style plist when it starts like one (`{ ( < "`), else a string, as macOS reads it.
  static func bare(_ text: String) throws -> PropertyListValue {
    let start = text.first(where: { !$0.isWhitespace })
    guard let start, "{(<\"".contains(start) else { return .string(text) }
    do { return try OpenStepPropertyListReader.read(text) } catch {
      throw ValidationError("the value is not a valid old-style property list: \(error)")
    }
  }

  /// The items of `-array`/`-array-add`: strings, or scalars typed with a flag (`-int 1`).
  static func items(_ words: [String], of flag: String) throws -> [PropertyListValue] {
    var items: [PropertyListValue] = []
    var index = 0
    while index < words.count {
      items.append(try item(words, &index, in: flag))
    }
    return items
  }

  /// The key/value pairs of `-dict`/`-dict-add`: keys are strings, values strings or typed scalars.
  static func entries(_ words: [String], of flag: String) throws -> [String: PropertyListValue] {
    var entries: [String: PropertyListValue] = [:]
    var index = 0
    while index < words.count {
      let key = words[index]
      if scalarFlags.contains(key) || key == "-array" || key == "-dict" {
        throw ValidationError("\(flag): '\(key)' stands where a key is expected (\(flag) takes KEY VALUE pairs)")
      }
      index += 1
      guard index < words.count else { throw ValidationError("\(flag): the key '\(key)' has no value") }
      entries[key] = try item(words, &index, in: flag)
    }
    return entries
  }

  /// One item at `index` (advanced past it).
  private static func item(_ words: [String], _ index: inout Int, in flag: String) throws -> PropertyListValue {
    let word = words[index]
    if scalarFlags.contains(word) {
      guard index + 1 < words.count else { throw ValidationError("\(flag): \(word) needs a value") }
      defer { index += 2 }
      return try scalar(word, words[index + 1])
    }
    if ["-array", "-dict", "-array-add", "-dict-add"].contains(word) {
      throw ValidationError(
        "\(flag) cannot hold \(word): write nested values as a plist, e.g. '( (a, b), { k = v; } )'")
    }
    index += 1
    return .string(word)
  }

  /// One scalar typed by `flag`.
  static func scalar(_ flag: String, _ text: String) throws -> PropertyListValue {
    switch flag {
    case "-int", "-integer":
      guard let v = Int128(text) else { throw ValidationError("'\(text)' is not an integer") }
      return .integer(PropertyListInteger(v))
    case "-float", "-real", "-double":
      guard let v = Double(text), v.isFinite else { throw ValidationError("'\(text)' is not a number") }
      return .real(v)
    case "-bool", "-boolean":
      switch text.lowercased() {
      case "true", "yes", "1": return .bool(true)
      case "false", "no", "0": return .bool(false)
      default: throw ValidationError("'\(text)' is not true or false")
      }
    case "-data":
      guard text.count % 2 == 0, let bytes = hexBytes(text) else {
        throw ValidationError("'\(text)' is not hex bytes")
      }
      return .data(bytes)
    case "-date":
      guard let date = ISO8601DateFormatter().date(from: text) else {
        throw ValidationError("'\(text)' is not an ISO 8601 date like 2026-01-02T03:04:05Z")
      }
      return .date(PropertyListDate(secondsSinceReferenceDate: date.timeIntervalSinceReferenceDate))
    default:
      return .string(text)
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

/// The type names `defaults read-type` prints (macOS's words).
enum TypeName {
  static func of(_ value: PropertyListValue) -> String {
    switch value {
    case .string: "string"
    case .integer: "integer"
    case .real: "float"
    case .bool: "boolean"
    case .date: "date"
    case .data: "data"
    case .array: "array"
    case .dictionary: "dictionary"
    case .uid: "uid"
    }
  }
}
