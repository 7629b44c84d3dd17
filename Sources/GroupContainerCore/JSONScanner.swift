/// The one hand-written JSON reader core: white space, literals, strings, numbers, nesting and the walk over objects
/// and arrays. Hot paths read messages and records with it instead of JSONDecoder (a fifth of a presenter's CPU,
/// most of an activity update's cost); each caller maps fields itself and gives up (nil) on anything it is not sure
/// JSONDecoder reads the same way, and then asks JSONDecoder through ``UntrustedJSON``, which decides.
///
/// Every method returns nil (or false) where the caller gives up; only `word` and `digits` read at the cursor
/// without skipping white space first (the presenter registry's own form has none).
package struct JSONScanner: ~Copyable {
  /// Which escapes a string may hold: each caller keeps the set its format's writer uses and JSONDecoder's checks
  /// were run on (an escape outside it: the scanner gives up).
  package enum Escapes {
    /// None (coordination messages: the writer escapes only what JSON requires, rare enough to leave to Foundation).
    case none
    /// Only `\/` (presenter records, as JSONEncoder writes them without `.withoutEscapingSlashes`).
    case solidus
    /// All of RFC 8259; a lone surrogate gives up (JSONDecoder's handling of it is its own).
    case all
  }

  /// A JSON number as read: an integer JSONDecoder reads as `Int64` (also `1.0` and `1e2`), else a double.
  package enum Number: Equatable {
    case integer(Int64)
    case double(Double)
  }

  /// The text being read.
  package let bytes: UnsafeBufferPointer<UInt8>
  /// The cursor: the index of the next byte to read.
  package var at = 0
  /// Objects and arrays open around the cursor (``enter(maxDepth:)``).
  package var depth = 0

  /// A scanner at the start of `bytes`.
  package init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

  // MARK: White space and literals

  /// Skips JSON white space (space, tab, line feed, carriage return).
  package mutating func skipSpace() {
    while at < bytes.count {
      switch bytes[at] {
      case 0x20, 0x09, 0x0A, 0x0D: at += 1
      default: return
      }
    }
  }

  /// Whether only white space is left.
  package mutating func atEnd() -> Bool {
    skipSpace()
    return at == bytes.count
  }

  /// The byte at the cursor, nil at the end (white space not skipped).
  package var next: UInt8? { at < bytes.count ? bytes[at] : nil }

  /// `byte` after white space: true (and read) when it is there.
  package mutating func take(_ byte: UInt8) -> Bool {
    skipSpace()
    guard at < bytes.count, bytes[at] == byte else { return false }
    at += 1
    return true
  }

  /// `text` exactly at the cursor (no white space skipped): true (and read) when it is there.
  package mutating func word(_ text: StaticString) -> Bool {
    let count = text.utf8CodeUnitCount
    guard bytes.count - at >= count else { return false }
    let same = text.withUTF8Buffer { word in (0..<count).allSatisfy { bytes[at + $0] == word[$0] } }
    if same { at += count }
    return same
  }

  /// `null`: true (and read) when the next value is null.
  package mutating func null() -> Bool {
    skipSpace()
    return at < bytes.count && bytes[at] == UInt8(ascii: "n") && word("null")
  }

  /// `true` or `false`.
  package mutating func bool() -> Bool? {
    skipSpace()
    return word("true") ? true : word("false") ? false : nil
  }

  /// Reads ASCII digits at the cursor (no white space skipped) and returns how many.
  package mutating func digits() -> Int {
    let first = at
    while at < bytes.count, bytes[at] &- UInt8(ascii: "0") < 10 { at += 1 }
    return at - first
  }

  // MARK: Objects and arrays

  /// One more level of nesting, false (nothing read) when `maxDepth` levels are open; ``leave()`` closes it.
  package mutating func enter(maxDepth: Int) -> Bool {
    guard depth < maxDepth else { return false }
    depth += 1
    return true
  }

  /// Closes the level ``enter(maxDepth:)`` opened.
  package mutating func leave() { depth -= 1 }

  /// An object: `member` reads each member — its key, the colon and the value (false: give up).
  package mutating func object(_ member: (inout JSONScanner) -> Bool) -> Bool {
    list(UInt8(ascii: "{"), UInt8(ascii: "}"), member)
  }

  /// An object whose keys are strings of any escape: `member` reads the value of each key (false: give up).
  package mutating func members(_ member: (String, inout JSONScanner) -> Bool) -> Bool {
    object { scanner in
      guard let key = scanner.string(), scanner.take(UInt8(ascii: ":")) else { return false }
      return member(key, &scanner)
    }
  }

  /// An array: `element` reads each element (false: give up).
  package mutating func elements(_ element: (inout JSONScanner) -> Bool) -> Bool {
    list(UInt8(ascii: "["), UInt8(ascii: "]"), element)
  }

  /// `open`, items read by `item` separated by commas (none at all allowed), `close`.
  private mutating func list(_ open: UInt8, _ close: UInt8, _ item: (inout JSONScanner) -> Bool) -> Bool {
    guard take(open) else { return false }
    if take(close) { return true }
    repeat {
      guard item(&self) else { return false }
    } while take(UInt8(ascii: ","))
    return take(close)
  }

  // MARK: Strings

  /// The bytes of a string without escapes or control characters, between its quotes (UTF-8 not checked): keys
  /// and enumerations matched without making a `String`.
  package mutating func stringBytes() -> UnsafeBufferPointer<UInt8>? {
    guard take(UInt8(ascii: "\"")) else { return nil }
    let start = at
    while at < bytes.count, bytes[at] != UInt8(ascii: "\"") {
      if bytes[at] == UInt8(ascii: "\\") || bytes[at] < 0x20 { return nil }
      at += 1
    }
    guard at < bytes.count else { return nil }
    at += 1
    return UnsafeBufferPointer(rebasing: bytes[start..<(at - 1)])
  }

  /// A string, the escapes `escapes` allows resolved; nil for any other escape, a control character, invalid UTF-8
  /// or a lone surrogate.
  package mutating func string(escapes: Escapes = .all) -> String? {
    guard take(UInt8(ascii: "\"")) else { return nil }
    let start = at
    var escaped = false
    var ascii = true
    while at < bytes.count {
      let byte = bytes[at]
      if byte == UInt8(ascii: "\"") { break }
      if byte < 0x20 { return nil }
      if byte == UInt8(ascii: "\\") {
        guard escapes != .none else { return nil }
        escaped = true
        at += 2
        continue
      }
      if byte >= 0x80 { ascii = false }
      at += 1
    }
    guard at < bytes.count else { return nil }
    let body = UnsafeBufferPointer(rebasing: bytes[start..<at])
    at += 1
    // ASCII (nearly every string) is valid UTF-8 as it stands; `String(validating:)` is generic over the encoding
    // and was a sixth of decoding a message.
    if !escaped { return ascii ? String(decoding: body, as: UTF8.self) : String(validating: body, as: UTF8.self) }
    return Self.unescaped(body, escapes: escapes)
  }

  /// The string between quotes with escapes resolved and its UTF-8 checked; nil for an escape `escapes` refuses.
  static func unescaped(_ body: UnsafeBufferPointer<UInt8>, escapes: Escapes) -> String? {
    var out: [UInt8] = []
    out.reserveCapacity(body.count)
    var i = 0
    func hex4(_ at: Int) -> UInt32? {
      guard at + 4 <= body.count else { return nil }
      var value: UInt32 = 0
      for byte in body[at..<(at + 4)] {
        guard let digit = HexDigits.value(byte) else { return nil }
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
      let letter = body[i - 1]
      if letter == UInt8(ascii: "/") {
        out.append(UInt8(ascii: "/"))
        continue
      }
      guard escapes == .all else { return nil }
      switch letter {
      case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
      case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
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

  // MARK: Numbers

  /// A plain integer (no fraction, no exponent) of `T`, read without making a string of it; nil for anything else
  /// or out of `T`'s range (JSONDecoder then decides).
  package mutating func integer<T: FixedWidthInteger>(_ type: T.Type) -> T? {
    guard let (negative, magnitude) = plainInteger() else { return nil }
    // As `T(text)` of its text: `-0` is 0 for any `T`.
    guard negative && magnitude != 0 else { return T(exactly: magnitude) }
    guard T.isSigned, magnitude - 1 <= UInt64(T.max) else { return nil }
    return T(truncatingIfNeeded: 0 &- magnitude)
  }

  /// `integer(_:)` of `Int`, not generic: called from another module, the generic one converts through witness
  /// tables, and the three integers of a coordination message were a third of its decoding.
  package mutating func integer(_ type: Int.Type) -> Int? {
    guard let (negative, magnitude) = plainInteger() else { return nil }
    guard negative && magnitude != 0 else { return magnitude <= UInt64(Int.max) ? Int(magnitude) : nil }
    guard magnitude - 1 <= UInt64(Int.max) else { return nil }
    return Int(truncatingIfNeeded: 0 &- magnitude)
  }

  /// `integer(_:)` of `UInt64`, not generic (see the `Int` one).
  package mutating func integer(_ type: UInt64.Type) -> UInt64? {
    guard let (negative, magnitude) = plainInteger() else { return nil }
    return negative && magnitude != 0 ? nil : magnitude
  }

  /// The sign and magnitude of a plain integer, or nil for anything else or past `UInt64`'s range.
  private mutating func plainInteger() -> (negative: Bool, magnitude: UInt64)? {
    skipSpace()
    let negative = at < bytes.count && bytes[at] == UInt8(ascii: "-")
    if negative { at += 1 }
    let first = at
    var magnitude: UInt64 = 0
    while at < bytes.count, case let digit = bytes[at] &- UInt8(ascii: "0"), digit < 10 {
      let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
      let (sum, o2) = times10.addingReportingOverflow(UInt64(digit))
      guard !o1, !o2 else { return nil }
      magnitude = sum
      at += 1
    }
    guard at > first, at - first == 1 || bytes[first] != UInt8(ascii: "0") else { return nil }
    if at < bytes.count, bytes[at] == UInt8(ascii: ".") || bytes[at] | 0x20 == UInt8(ascii: "e") { return nil }
    return (negative, magnitude)
  }

  /// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, read as a `JSONValue`
  /// reads it (an `Int64` when JSONDecoder's does, else a `Double`); nil when it is not one, not finite as a double,
  /// refused by ``UntrustedJSON/refuses(digits:hasExponent:)``, or read by JSONDecoder in a way not copied here.
  package mutating func number() -> Number? { number(asDouble: false) }

  /// A number read as a `Double` property reads it (whole or not); nil when not finite or under the smallest double.
  package mutating func double() -> Double? {
    switch number(asDouble: true) {
    case .double(let d)?: return d
    case .integer(let i)?: return Double(i)
    case nil: return nil
    }
  }

  /// `number()`; with `asDouble`, a whole number past 2^53 is a double rather than left to JSONDecoder (a `Double`
  /// property reads the same value either way).
  mutating func number(asDouble: Bool) -> Number? {
    skipSpace()
    let start = at
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
}
