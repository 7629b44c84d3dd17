import GroupContainerCore

/// The JSON text of records and of `JSONValue`s, written and read by hand.
///
/// Why not Foundation's coders: on this machine JSONDecoder took 311 µs to read a 380-byte record and 85 µs to read
/// a five-field content state into a `JSONValue` (each `try?` of its `init(from:)` throws and builds an error), and
/// JSONEncoder 154 µs to write the record — most of an update's cost, paid again by every observer.
///
/// The writer makes the bytes JSONEncoder makes with `.sortedKeys` and `.withoutEscapingSlashes`: keys in the order
/// of their UTF-8 bytes, `"` `\` and control characters escaped (`\b \f \n \r \t`, else `\u00xx`), doubles as Swift
/// prints them without a trailing `.0`. The reader takes RFC 8259 JSON and gives up (nil) on anything it is not sure
/// JSONDecoder reads the same way — a lone surrogate, nesting deeper than ``maxDepth``, a number out of range — so
/// the caller then asks JSONDecoder (through `UntrustedJSON`, which refuses first the numbers Foundation would stop
/// the process on, as the reader gives up on them), which decides: both routes accept and refuse the same bytes and read them to the
/// same values (`ActivityRecordFormatTests`, and the fuzz harness checks it on every input).
package enum ActivityJSON {
  /// Deeper nesting is left to JSONDecoder (which allows 512).
  package static let maxDepth = 128

  // MARK: Writing

  /// Bytes of JSON being written.
  package struct Writer {
    package var bytes: [UInt8] = []

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
      case .double(let d): return double(d)
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

    package mutating func integer(_ value: some BinaryInteger) {
      utf8(String(value))
    }

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
      var text = value.description
      if text.hasSuffix(".0") { text.removeLast(2) }
      utf8(text)
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

  /// Whether reading `value`'s bytes gives `value` back as it is, so the round trip can be skipped: no double (`1.0`
  /// is written `1` and read as an integer) and nesting far from ``maxDepth`` (where the reader gives up).
  package static func readsBackUnchanged(_ value: JSONValue, depth: Int = 0) -> Bool {
    switch value {
    case .null, .bool, .integer, .string: return true
    case .double: return false
    case .array(let a): return depth < maxDepth / 2 && a.allSatisfy { readsBackUnchanged($0, depth: depth + 1) }
    case .object(let o): return depth < maxDepth / 2 && o.values.allSatisfy { readsBackUnchanged($0, depth: depth + 1) }
    }
  }

  /// `value` as compact JSON, keys sorted; nil when it holds a number JSON cannot write.
  package static func encode(_ value: JSONValue) -> [UInt8]? {
    var writer = Writer()
    return writer.value(value) ? writer.bytes : nil
  }

  // MARK: Reading

  /// A JSON number as read: an integer JSONDecoder reads as `Int64` (also `1.0` and `1e2`), else a double.
  package enum Number: Equatable {
    case integer(Int64)
    case double(Double)
  }

  /// Reads JSON from bytes; every method returns nil where this route gives up (the caller asks JSONDecoder).
  package struct Reader: ~Copyable {
    let bytes: UnsafeBufferPointer<UInt8>
    package var at = 0
    var depth = 0

    package init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Whether only white space is left.
    package mutating func atEnd() -> Bool {
      skipSpace()
      return at == bytes.count
    }

    package mutating func skipSpace() {
      while at < bytes.count {
        switch bytes[at] {
        case 0x20, 0x09, 0x0A, 0x0D: at += 1
        default: return
        }
      }
    }

    package mutating func take(_ byte: UInt8) -> Bool {
      skipSpace()
      guard at < bytes.count, bytes[at] == byte else { return false }
      at += 1
      return true
    }

    /// Any value.
    package mutating func value() -> JSONValue? {
      skipSpace()
      guard at < bytes.count else { return nil }
      switch bytes[at] {
      case UInt8(ascii: "{"):
        guard depth < ActivityJSON.maxDepth else { return nil }
        depth += 1
        defer { depth -= 1 }
        var object: [String: JSONValue] = [:]
        let complete = members { key, reader in
          // A repeated key: JSONDecoder decides.
          guard object[key] == nil, let value = reader.value() else { return false }
          object[key] = value
          return true
        }
        return complete ? .object(object) : nil
      case UInt8(ascii: "["):
        guard depth < ActivityJSON.maxDepth else { return nil }
        depth += 1
        defer { depth -= 1 }
        at += 1
        var array: [JSONValue] = []
        if take(UInt8(ascii: "]")) { return .array(array) }
        repeat {
          guard let element = value() else { return nil }
          array.append(element)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? .array(array) : nil
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

    /// An object: `member` reads the value of each key (false: this route gives up).
    package mutating func members(_ member: (String, inout Reader) -> Bool) -> Bool {
      guard take(UInt8(ascii: "{")) else { return false }
      if take(UInt8(ascii: "}")) { return true }
      repeat {
        skipSpace()
        guard let key = string(), take(UInt8(ascii: ":")), member(key, &self) else { return false }
      } while take(UInt8(ascii: ","))
      return take(UInt8(ascii: "}"))
    }

    /// `null`: true (and read) when the next value is null.
    package mutating func null() -> Bool {
      skipSpace()
      return at < bytes.count && bytes[at] == UInt8(ascii: "n") && word("null")
    }

    mutating func word(_ text: StaticString) -> Bool {
      let count = text.utf8CodeUnitCount
      guard at + count <= bytes.count else { return false }
      let same = text.withUTF8Buffer { word in (0..<count).allSatisfy { bytes[at + $0] == word[$0] } }
      if same { at += count }
      return same
    }

    /// A string, escapes resolved; nil for a control character, invalid UTF-8 or a lone surrogate.
    package mutating func string() -> String? {
      skipSpace()
      guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { return nil }
      at += 1
      let start = at
      var plain = true  // no escape and only ASCII: the bytes are the string
      while at < bytes.count {
        let byte = bytes[at]
        if byte == UInt8(ascii: "\"") { break }
        if byte < 0x20 { return nil }
        if byte == UInt8(ascii: "\\") || byte >= 0x80 { plain = false }
        at += byte == UInt8(ascii: "\\") ? 2 : 1
      }
      guard at < bytes.count else { return nil }
      let body = UnsafeBufferPointer(rebasing: bytes[start..<at])
      at += 1
      if plain { return String(decoding: body, as: UTF8.self) }
      return Self.unescaped(body)
    }

    /// The string between quotes with escapes resolved and its UTF-8 checked.
    static func unescaped(_ body: UnsafeBufferPointer<UInt8>) -> String? {
      var out: [UInt8] = []
      out.reserveCapacity(body.count)
      var i = 0
      func hex4(_ at: Int) -> UInt32? {
        guard at + 4 <= body.count else { return nil }
        var value: UInt32 = 0
        for byte in body[at..<(at + 4)] {
          let digit: UInt8
          switch byte {
          case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
          case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
          case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
          default: return nil
          }
          value = value << 4 | UInt32(digit)
        }
        return value
      }
      while i < body.count {
        let byte = body[i]
        guard byte == UInt8(ascii: "\\") else {
          out.append(byte)
          i += 1
          continue
        }
        guard i + 1 < body.count else { return nil }
        i += 2
        switch body[i - 1] {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
          guard var scalar = hex4(i) else { return nil }
          i += 4
          if (0xD800..<0xDC00).contains(scalar) {  // a high surrogate: its low one must follow
            guard i + 6 <= body.count, body[i] == UInt8(ascii: "\\"), body[i + 1] == UInt8(ascii: "u"),
              let low = hex4(i + 2), (0xDC00..<0xE000).contains(low)
            else { return nil }
            i += 6
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
          }
          guard let unicode = Unicode.Scalar(scalar) else { return nil }  // a lone low surrogate
          out.append(contentsOf: UTF8.encode(unicode)!)
        default: return nil
        }
      }
      return String(validating: out, as: UTF8.self)
    }

    /// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; nil when it is not one,
    /// or not finite as a double.
    package mutating func number() -> Number? { number(asDouble: false) }

    /// `number()`; with `asDouble`, a whole number past 2^53 is a double rather than left to JSONDecoder (a `Double`
    /// property reads the same value either way).
    mutating func number(asDouble: Bool) -> Number? {
      skipSpace()
      let start = at
      func digits() -> Int {
        let first = at
        while at < bytes.count, bytes[at] &- UInt8(ascii: "0") < 10 { at += 1 }
        return at - first
      }
      if at < bytes.count, bytes[at] == UInt8(ascii: "-") { at += 1 }
      let integerStart = at
      let integerDigits = digits()
      guard integerDigits > 0, integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else { return nil }
      let integerEnd = at
      var fractionEnd = at
      var plain = true
      if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
        at += 1
        guard digits() > 0 else { return nil }
        plain = false
        fractionEnd = at
      }
      var exponentStart = at
      if at < bytes.count, bytes[at] | 0x20 == UInt8(ascii: "e") {
        at += 1
        exponentStart = at
        if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
        guard digits() > 0 else { return nil }
        plain = false
      }
      let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
      if plain { return Int64(text).map { .integer($0) } }  // past 64 bits: JSONDecoder decides
      let digitCount = (integerEnd - integerStart) + max(fractionEnd - integerEnd - 1, 0)
      // What the JSONDecoder route refuses before JSONDecoder sees it (it can stop the process on some).
      if UntrustedJSON.refuses(digits: digitCount, hasExponent: exponentStart != fractionEnd) { return nil }
      guard let double = Double(text), double.isFinite else { return nil }
      // Under the smallest double (`1e-400`) JSONDecoder refuses a Double: it decides.
      if double == 0 && text.utf8.contains(where: { $0 >= UInt8(ascii: "1") && $0 <= UInt8(ascii: "9") }) {
        guard let exponent = text.utf8.firstIndex(where: { $0 | 0x20 == UInt8(ascii: "e") }),
          !text.utf8[..<exponent].contains(where: { $0 >= UInt8(ascii: "1") && $0 <= UInt8(ascii: "9") })
        else { return nil }
      }
      if asDouble { return .double(double) }
      // A `JSONValue` tries Int64 first, and JSONDecoder's Int64 of a number with a fraction or an exponent is its
      // double when that is a whole number Int64 holds and below 2^53 (`1.0000000000000001` is 1; `0.5` is a double).
      guard double.rounded() == double, Int64(exactly: double) != nil else { return .double(double) }
      if double.magnitude < 0x1p53 { return .integer(Int64(double)) }
      return Self.decimalWhole(
        bytes[start..<integerEnd], integerStart: integerStart, fraction: bytes[integerEnd..<fractionEnd],
        exponent: bytes[exponentStart..<at], double: double)
    }

    /// JSONDecoder's Int64 from 2^53 up: the text read again as a `Decimal` — 38 digits, trailing zeros dropped —
    /// whose fraction is cut off (`9007199254740993.5` is 9007199254740993); a double where that throws (the
    /// mantissa past UInt64, the result past Int64). More than 38 digits: nil (with an exponent the caller
    /// gave up already: ``UntrustedJSON`` refuses those).
    private static func decimalWhole(
      _ integer: UnsafeBufferPointer<UInt8>.SubSequence, integerStart: Int,
      fraction: UnsafeBufferPointer<UInt8>.SubSequence, exponent exponentText: UnsafeBufferPointer<UInt8>.SubSequence,
      double: Double
    ) -> Number? {
      let integerDigits = integer[integerStart...]
      let fractionDigits = fraction.dropFirst()  // the point
      // Past 38 the Decimal parser keeps a 39th digit only when it fits 128 bits: JSONDecoder decides (no exponent
      // here, so nothing it stops the process on).
      guard integerDigits.count + fractionDigits.count <= 38 else { return nil }
      var exponent = 0
      var exponentDigits = exponentText[...]
      let negativeExponent = exponentDigits.first == UInt8(ascii: "-")
      if let sign = exponentDigits.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") {
        exponentDigits = exponentDigits.dropFirst()
      }
      for digit in exponentDigits {
        exponent = exponent * 10 + Int(digit &- UInt8(ascii: "0"))
        guard exponent < 10_000 else { return nil }  // the value is near 2^53..2^63: a long exponent is all zeros
      }
      if negativeExponent { exponent = -exponent }
      exponent -= fractionDigits.count
      var significant = Array(integerDigits) + Array(fractionDigits)
      while significant.count > 1, significant.last == UInt8(ascii: "0") {
        significant.removeLast()
        exponent += 1
      }
      var whole: UInt64 = 0
      for digit in significant {
        let (shifted, o1) = whole.multipliedReportingOverflow(by: 10)
        let (sum, o2) = shifted.addingReportingOverflow(UInt64(digit &- UInt8(ascii: "0")))
        guard !o1 && !o2 else { return .double(double) }
        whole = sum
      }
      if exponent < 0 {
        for _ in 0..<min(-exponent, 20) { whole /= 10 }
      } else {
        for _ in 0..<exponent {
          let (product, overflow) = whole.multipliedReportingOverflow(by: 10)
          guard !overflow else { return .double(double) }
          whole = product
        }
      }
      guard let magnitude = Int64(exactly: whole) else { return .double(double) }
      return .integer(integer.first == UInt8(ascii: "-") ? -magnitude : magnitude)
    }

    /// A number read as a `Double` property reads it (whole or not); nil when not finite or under the smallest double.
    package mutating func double() -> Double? {
      switch number(asDouble: true) {
      case .double(let d)?: return d
      case .integer(let i)?: return Double(i)
      case nil: return nil
      }
    }

    /// A plain integer (no fraction, no exponent) of `T`; nil for anything else (JSONDecoder then decides).
    package mutating func integer<T: FixedWidthInteger>(_ type: T.Type) -> T? {
      skipSpace()
      let start = at
      if at < bytes.count, bytes[at] == UInt8(ascii: "-") { at += 1 }
      let first = at
      while at < bytes.count, bytes[at] &- UInt8(ascii: "0") < 10 { at += 1 }
      guard at > first, at - first == 1 || bytes[first] != UInt8(ascii: "0") else { return nil }
      if at < bytes.count, bytes[at] == UInt8(ascii: ".") || bytes[at] | 0x20 == UInt8(ascii: "e") { return nil }
      return T(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self))
    }
  }

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
