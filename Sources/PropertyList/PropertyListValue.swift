/// A property-list value: the data model shared by the binary and XML formats.
///
/// Dictionaries are unordered (writers sort keys for deterministic output). `uid` exists only
/// because keyed archives contain it: readers accept it, writers refuse it.
public enum PropertyListValue: Sendable, Hashable {
  /// Text. Binary files store it as ASCII or UTF-16BE, XML as UTF-8.
  case string(String)
  /// An integer of up to 128 bits (see `PropertyListInteger` for why 128).
  case integer(PropertyListInteger)
  /// A floating-point number; binary files keep every bit, including NaN payloads.
  case real(Double)
  /// A Boolean.
  case bool(Bool)
  /// A point in time; XML files keep whole seconds only.
  case date(PropertyListDate)
  /// Raw bytes (base64 in XML).
  case data([UInt8])
  /// An ordered list of values.
  case array([PropertyListValue])
  /// String-keyed values. Keys are strings because both formats require it.
  case dictionary([String: PropertyListValue])
  /// An object reference from an `NSKeyedArchiver` archive: readable, never written.
  case uid(UInt64)
}

/// An integer as stored in a property list.
///
/// Binary plists carry 1-, 2-, 4-, 8- and 16-byte integers; Apple and Python write unsigned
/// 64-bit values above `Int64.max` in the 16-byte form, so the payload is a full `Int128`.
public struct PropertyListInteger: Sendable, Hashable, Comparable, CustomStringConvertible,
  ExpressibleByIntegerLiteral
{
  /// The integer value.
  public var value: Int128

  /// Wraps a 128-bit value.
  public init(_ value: Int128) { self.value = value }
  /// Wraps a platform integer.
  public init(_ value: Int) { self.value = Int128(value) }
  /// Wraps a signed 64-bit integer.
  public init(_ value: Int64) { self.value = Int128(value) }
  /// Wraps an unsigned 64-bit integer (values above `Int64.max` are written as 16 bytes).
  public init(_ value: UInt64) { self.value = Int128(value) }
  /// Wraps any integer that fits in `Int128`; `nil` otherwise.
  public init?(exactly value: some BinaryInteger) {
    guard let wide = Int128(exactly: value) else { return nil }
    self.value = wide
  }
  /// Lets `PropertyListInteger` be written as a literal.
  public init(integerLiteral value: Int128) { self.value = value }

  /// The value as `Int`, if it fits.
  public var intValue: Int? { Int(exactly: value) }
  /// The value as `Int64`, if it fits.
  public var int64Value: Int64? { Int64(exactly: value) }
  /// The value as `UInt64`, if it fits (non-negative and at most `UInt64.max`).
  public var uint64Value: UInt64? { UInt64(exactly: value) }

  /// Decimal representation.
  public var description: String { value.description }

  /// Orders by numeric value.
  public static func < (lhs: PropertyListInteger, rhs: PropertyListInteger) -> Bool {
    lhs.value < rhs.value
  }
}

// MARK: - Convenience accessors

extension PropertyListValue {
  /// The string, if this is `.string`.
  public var stringValue: String? {
    if case .string(let value) = self { return value }
    return nil
  }

  /// The integer, if this is `.integer`.
  public var integerValue: PropertyListInteger? {
    if case .integer(let value) = self { return value }
    return nil
  }

  /// The integer as `Int`, if this is `.integer` and it fits.
  public var intValue: Int? { integerValue?.intValue }

  /// The integer as `Int64`, if this is `.integer` and it fits.
  public var int64Value: Int64? { integerValue?.int64Value }

  /// The integer as `UInt64`, if this is `.integer` and it fits.
  public var uint64Value: UInt64? { integerValue?.uint64Value }

  /// The floating-point number, if this is `.real`.
  public var realValue: Double? {
    if case .real(let value) = self { return value }
    return nil
  }

  /// The Boolean, if this is `.bool`.
  public var boolValue: Bool? {
    if case .bool(let value) = self { return value }
    return nil
  }

  /// The date, if this is `.date`.
  public var dateValue: PropertyListDate? {
    if case .date(let value) = self { return value }
    return nil
  }

  /// The bytes, if this is `.data`.
  public var dataValue: [UInt8]? {
    if case .data(let value) = self { return value }
    return nil
  }

  /// The elements, if this is `.array`.
  public var arrayValue: [PropertyListValue]? {
    if case .array(let value) = self { return value }
    return nil
  }

  /// The entries, if this is `.dictionary`.
  public var dictionaryValue: [String: PropertyListValue]? {
    if case .dictionary(let value) = self { return value }
    return nil
  }

  /// The UID, if this is `.uid`.
  public var uidValue: UInt64? {
    if case .uid(let value) = self { return value }
    return nil
  }

  /// The entry for `key` when this is a dictionary; `nil` otherwise or when absent.
  public subscript(key: String) -> PropertyListValue? {
    dictionaryValue?[key]
  }

  /// The element at `index` when this is an array and the index is valid; `nil` otherwise.
  public subscript(index: Int) -> PropertyListValue? {
    guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
    return elements[index]
  }
}

// MARK: - Literals

// Literal conformances make hand-written values (tests, defaults) read like the plist itself.

extension PropertyListValue: ExpressibleByStringLiteral {
  /// A string literal is a `.string` value.
  public init(stringLiteral value: String) { self = .string(value) }
}

extension PropertyListValue: ExpressibleByIntegerLiteral {
  /// An integer literal is an `.integer` value.
  public init(integerLiteral value: Int128) { self = .integer(PropertyListInteger(value)) }
}

extension PropertyListValue: ExpressibleByFloatLiteral {
  /// A floating-point literal is a `.real` value.
  public init(floatLiteral value: Double) { self = .real(value) }
}

extension PropertyListValue: ExpressibleByBooleanLiteral {
  /// `true` and `false` are `.bool` values.
  public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension PropertyListValue: ExpressibleByArrayLiteral {
  /// An array literal is an `.array` value.
  public init(arrayLiteral elements: PropertyListValue...) { self = .array(elements) }
}

extension PropertyListValue: ExpressibleByDictionaryLiteral {
  /// Later duplicates of a key replace earlier ones, as in the file formats.
  public init(dictionaryLiteral elements: (String, PropertyListValue)...) {
    var dictionary: [String: PropertyListValue] = [:]
    for (key, value) in elements { dictionary[key] = value }
    self = .dictionary(dictionary)
  }
}

// MARK: - Printing

extension PropertyListValue: CustomStringConvertible {
  /// The value as a person reads it, close to the old-style plist text `defaults read` prints: `42`, `1.5`,
  /// `true`, `"text"`, `[1, 2]`, `{a = 1; b = "x";}` (keys sorted), `<00ff>`, `2026-11-23 20:49:00 +0000`.
  /// For display and logs only: parse nothing back from it.
  public var description: String {
    switch self {
    case .string(let value): return Self.quoted(value)
    case .integer(let value): return value.description
    case .real(let value): return value.description
    case .bool(let value): return value ? "true" : "false"
    case .date(let value):
      guard let c = value.components else { return "date(\(value.secondsSinceReferenceDate) s since 2001)" }
      func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
      let year = String(repeating: "0", count: max(0, 4 - String(c.year).count)) + String(c.year)
      return "\(year)-\(two(c.month))-\(two(c.day)) \(two(c.hour)):\(two(c.minute)):\(two(c.second)) +0000"
    case .data(let bytes):
      // Long data would flood a log line: show its start and its size.
      let shown = bytes.prefix(32).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
      return bytes.count > 32 ? "<\(shown)… (\(bytes.count) bytes)>" : "<\(shown)>"
    case .array(let elements): return "[" + elements.map(\.description).joined(separator: ", ") + "]"
    case .dictionary(let entries):
      if entries.isEmpty { return "{}" }
      let body = entries.keys.sorted().map { key in "\(Self.key(key)) = \(entries[key]!.description);" }
      return "{" + body.joined(separator: " ") + "}"
    case .uid(let value): return "UID(\(value))"
    }
  }

  /// A dictionary key bare when it is a plain word (as old-style plists print them), quoted otherwise.
  private static func key(_ key: String) -> String {
    let plain =
      !key.isEmpty
      && key.unicodeScalars.allSatisfy {
        $0.isASCII
          && (("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
            || $0 == "_" || $0 == "." || $0 == "-")
      }
    return plain ? key : quoted(key)
  }

  /// `"…"` with `\`, `"` and control characters escaped, so a printed value cannot fake its own end.
  private static func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\t": out += "\\t"
      case "\r": out += "\\r"
      default:
        if scalar.value < 0x20 || scalar.value == 0x7f {
          out += "\\u{" + String(scalar.value, radix: 16) + "}"
        } else {
          out.unicodeScalars.append(scalar)
        }
      }
    }
    return out + "\""
  }
}
