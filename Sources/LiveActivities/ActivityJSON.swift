import GroupContainerCore

/// The JSON text of records and of `JSONValue`s, written and read by hand.
///
/// Why not Foundation's coders: on this machine JSONDecoder took 311 µs to read a 380-byte record and 85 µs to read
/// a five-field content state into a `JSONValue` (each `try?` of its `init(from:)` throws and builds an error), and
/// JSONEncoder 154 µs to write the record — most of an update's cost, paid again by every observer.
///
/// The writer makes the bytes JSONEncoder makes with `.sortedKeys` and `.withoutEscapingSlashes`: keys in the order
/// of their UTF-8 bytes, `"` `\` and control characters escaped (`\b \f \n \r \t`, else `\u00xx`), doubles as Swift
/// prints them without a trailing `.0`. The reader (`JSONScanner`, all escapes) takes RFC 8259 JSON and gives up (nil)
/// on anything it is not sure JSONDecoder reads the same way — a lone surrogate, nesting deeper than ``maxDepth``, a
/// number out of range — so the caller then asks JSONDecoder (through `UntrustedJSON`, which refuses first the
/// numbers Foundation would stop the process on, as the reader gives up on them), which decides: both routes accept
/// and refuse the same bytes and read them to the same values (`ActivityRecordFormatTests`, and the fuzz harness checks it on every input).
package enum ActivityJSON {
  /// Deeper nesting is left to JSONDecoder (which allows 512).
  package static let maxDepth = 128

  // MARK: Writing

  /// Bytes of JSON being written.
  package struct Writer {
    package var bytes: [UInt8] = []
    /// Values' doubles that an `Int64` holds written as that integer (`1e+16` as `10000000000000000`, `-0.0` as
    /// `0`), which is what reading them gives (JSONValue reads integers first): ``JSONText``'s bytes then read back
    /// to a value that writes them again.
    package var wholeAsInteger = false

    package init(capacity: Int = 512) { bytes.reserveCapacity(capacity) }

    package mutating func raw(_ text: StaticString) {
      text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// `value`; nil when it holds a number JSON cannot write (NaN, infinity: JSONEncoder refuses them too).
    package mutating func value(_ value: JSONValue) -> Bool {
      switch value {
      case .null: raw("null")
      case .bool(let b): b ? raw("true") : raw("false")
      case .integer(let i): integer(i)
      case .double(let d):
        if wholeAsInteger, let i = Int64(exactly: d) {
          integer(i)
        } else {
          return double(d)
        }
      case .string(let s): string(s)
      case .array(let a):
        bytes.append(UInt8(ascii: "["))
        for (index, element) in a.enumerated() {
          if index > 0 { bytes.append(UInt8(ascii: ",")) }
          guard self.value(element) else { return false }
        }
        bytes.append(UInt8(ascii: "]"))
      case .object(let o) where o.count == 1:  // nothing to sort: no array of keys
        let (key, element) = o.first!
        bytes.append(UInt8(ascii: "{"))
        string(key)
        bytes.append(UInt8(ascii: ":"))
        guard self.value(element) else { return false }
        bytes.append(UInt8(ascii: "}"))
      case .object(let o):
        bytes.append(UInt8(ascii: "{"))
        for (index, key) in Self.sortedKeys(o).enumerated() {
          if index > 0 { bytes.append(UInt8(ascii: ",")) }
          string(key)
          bytes.append(UInt8(ascii: ":"))
          guard self.value(o[key]!) else { return false }
        }
        bytes.append(UInt8(ascii: "}"))
      }
      return true
    }

    /// Keys in the order of their UTF-8 bytes, as JSONEncoder's `.sortedKeys` puts them.
    static func sortedKeys(_ object: [String: JSONValue]) -> [String] {
      object.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    package mutating func integer(_ value: Int64) { DecimalDigits.append(value, to: &bytes) }
    package mutating func integer(_ value: UInt64) { DecimalDigits.append(value, to: &bytes) }

    /// The UTF-8 of `text` in one copy (appending a `String.UTF8View` went a byte at a time).
    mutating func utf8(_ text: String) {
      var text = text
      text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// A finite double as JSONEncoder writes it (`1` for 1.0, `1e+21`); false for NaN and infinities.
    package mutating func double(_ value: Double) -> Bool {
      guard value.isFinite else { return false }
      // A whole number below 2^53 prints as its integer (Swift writes `12.0` up to 1e16, then `1e+16`); -0 keeps its
      // sign: the integer route would drop it.
      if value == value.rounded(.towardZero), abs(value) < 9_007_199_254_740_992, !(value == 0 && value.sign == .minus)
      {
        integer(Int64(value))
        return true
      }
      // Swift's digits, written straight from the double's own buffer (`_writeASCII` below): `description` made a
      // String, a third of the time of writing a record's date.
      value.write(to: &self)
      if bytes.count >= 2, bytes[bytes.count - 1] == UInt8(ascii: "0"), bytes[bytes.count - 2] == UInt8(ascii: ".") {
        bytes.removeLast(2)
      }
      return true
    }

    /// `bytes`, already JSON (a value this writer wrote), as they are.
    package mutating func json(_ json: [UInt8]) { bytes.append(contentsOf: json) }

    package mutating func string(_ value: String) {
      bytes.append(UInt8(ascii: "\""))
      // Most strings need no escape: one copy (a byte at a time was a tenth of an update's cost).
      var plain = value
      let copied = plain.withUTF8 { utf8 -> Bool in
        guard !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
          return false
        }
        bytes.append(contentsOf: utf8)
        return true
      }
      if copied {
        bytes.append(UInt8(ascii: "\""))
        return
      }
      for byte in value.utf8 {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), byte]
        case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
        case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
        case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
        case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
        case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
        case 0..<0x20:
          bytes += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")]
          bytes += [Self.hex(byte >> 4), Self.hex(byte & 0xf)]
        default: bytes.append(byte)
        }
      }
      bytes.append(UInt8(ascii: "\""))
    }

    private static func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 48 + nibble : 87 + nibble }
  }
}

extension ActivityJSON.Writer: TextOutputStream {
  /// Text appended as its UTF-8.
  package mutating func write(_ string: String) { utf8(string) }

  /// ASCII appended as it is: what `Double.write(to:)` hands its digits to (the default made a String of them).
  package mutating func _writeASCII(_ buffer: UnsafeBufferPointer<UInt8>) { bytes.append(contentsOf: buffer) }
}

extension ActivityJSON {
  /// How deep arrays and objects nest in `bytes` (JSON): brackets counted outside strings.
  package static func nestingDepth(_ bytes: [UInt8]) -> Int {
    var depth = 0, deepest = 0, inString = false, escaped = false
    for byte in bytes {
      if inString {
        if escaped {
          escaped = false
        } else if byte == UInt8(ascii: "\\") {
          escaped = true
        } else if byte == UInt8(ascii: "\"") {
          inString = false
        }
        continue
      }
      switch byte {
      case UInt8(ascii: "\""): inString = true
      case UInt8(ascii: "["), UInt8(ascii: "{"):
        depth += 1
        deepest = max(deepest, depth)
      case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
      default: break
      }
    }
    return deepest
  }

  /// `value` as compact JSON, keys sorted; nil when it holds a number JSON cannot write.
  package static func encode(_ value: JSONValue) -> [UInt8]? {
    var writer = Writer()
    return writer.value(value) ? writer.bytes : nil
  }

  // MARK: Reading

  /// A JSON number as read (the scanner's: `JSONScanner` reads numbers as a `JSONValue` reads them).
  package typealias Number = JSONScanner.Number

  /// Reads JSON from bytes: the shared scanner (`JSONScanner`), plus ``JSONScanner/value()`` for a `JSONValue`.
  package typealias Reader = JSONScanner

  /// The value in `bytes` (white space around it allowed), or nil when this route gives up.
  package static func decode(_ bytes: some Collection<UInt8>) -> JSONValue? {
    let result = bytes.withContiguousStorageIfAvailable { buffer -> JSONValue? in
      var reader = Reader(buffer)
      guard let value = reader.value(), reader.atEnd() else { return nil }
      return value
    }
    if let result { return result }
    return decode(Array(bytes))
  }
}

extension JSONScanner {
  /// Any value as a `JSONValue`; nil where this route gives up (nesting deeper than ``ActivityJSON/maxDepth``, a
  /// repeated key, and what the scanner gives up on).
  package mutating func value() -> JSONValue? {
    skipSpace()
    guard at < bytes.count else { return nil }
    switch bytes[at] {
    case UInt8(ascii: "{"):
      guard enter(maxDepth: ActivityJSON.maxDepth) else { return nil }
      defer { leave() }
      var object: [String: JSONValue] = [:]
      let complete = members { key, scanner in
        // A repeated key: JSONDecoder decides.
        guard object[key] == nil, let value = scanner.value() else { return false }
        object[key] = value
        return true
      }
      return complete ? .object(object) : nil
    case UInt8(ascii: "["):
      guard enter(maxDepth: ActivityJSON.maxDepth) else { return nil }
      defer { leave() }
      var array: [JSONValue] = []
      let complete = elements { scanner in
        guard let element = scanner.value() else { return false }
        array.append(element)
        return true
      }
      return complete ? .array(array) : nil
    case UInt8(ascii: "\""): return string().map { .string($0) }
    case UInt8(ascii: "t"): return word("true") ? .bool(true) : nil
    case UInt8(ascii: "f"): return word("false") ? .bool(false) : nil
    case UInt8(ascii: "n"): return word("null") ? .null : nil
    default:
      switch number() {
      case .integer(let i)?: return .integer(i)
      case .double(let d)?: return .double(d)
      case nil: return nil
      }
    }
  }
}
