/// Reads an old-style ("OpenStep", "NeXT", ASCII) property list: the text `defaults read` prints and macOS
/// `defaults write` accepts as a value.
///
/// ```
/// { name = "Ada Lovelace"; tags = (math, "first program"); raw = <0fbd 7777>; /* a comment */ }
/// ```
///
/// The grammar, as Core Foundation reads it:
/// - a dictionary `{ key = value; … }` (every entry ends with `;`; a repeated key keeps the last value), an array
///   `( a, b, … )` (a trailing comma is allowed), data `<hex digits>` (whitespace between byte pairs allowed);
/// - strings, quoted (`"…"` or `'…'`, escapes `\n \t \r \a \b \f \v \" \' \\`, `\UXXXX` hex UTF-16 units with
///   surrogate pairs, `\ooo` octal up to `\377`, any other `\c` is `c`) or unquoted (`A-Z a-z 0-9 _ $ + / : . -`);
/// - comments `// …` to the end of the line and `/* … */`; a top level of `key = value;` entries without braces
///   (the "strings file" form) is a dictionary.
///
/// Every scalar is a string, as in the format (numbers and booleans have no syntax of their own): `( 1, 2 )` is
/// two strings, as macOS `defaults` stores it. Input is UTF-8. Never traps on malformed input: every failure is a
/// `PropertyListError` of kind `.invalidOpenStep` (or `.limitExceeded`) naming the problem and its byte offset.
public enum OpenStepPropertyListReader {
  /// Parses `bytes` (UTF-8 text) into a value within `limits` (input size, nesting depth, number of values).
  public static func read(_ bytes: some Collection<UInt8>, limits: PropertyListLimits = .default)
    throws(PropertyListError) -> PropertyListValue
  {
    var parser = OpenStepParser(bytes: try limits.checkedInput(bytes), limits: limits)
    return try parser.parseDocument()
  }

  /// Parses `text`; see ``read(_:limits:)``.
  public static func read(_ text: String, limits: PropertyListLimits = .default) throws(PropertyListError)
    -> PropertyListValue
  {
    try read(Array(text.utf8), limits: limits)
  }
}

extension PropertyListError {
  static func openStep(_ message: String, at offset: Int) -> PropertyListError {
    PropertyListError(kind: .invalidOpenStep, message: message, offset: offset)
  }
}

struct OpenStepParser {
  let bytes: [UInt8]
  let limits: PropertyListLimits
  var position = 0
  /// Values read so far (checked against `limits.maxObjects`). Decoded strings and data need no budget of their
  /// own: every escape and hex pair decodes to fewer bytes than it takes, so they never outgrow the input, which
  /// `limits.maxBytes` bounds.
  var valueCount = 0

  init(bytes: [UInt8], limits: PropertyListLimits) {
    self.bytes = bytes
    self.limits = limits
  }

  mutating func parseDocument() throws(PropertyListError) -> PropertyListValue {
    if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    try skipSpace()
    guard position < bytes.count else { throw .openStep("empty property list: expected a value", at: position) }
    let value = try parseValue(depth: 0)
    try skipSpace()
    guard position < bytes.count else { return value }
    // `key = value; …` with no braces: a dictionary (the strings-file form), when the first value was a string.
    if case .string(let firstKey) = value, bytes[position] == UInt8(ascii: "=") {
      return .dictionary(try parseEntries(firstKey: firstKey, closing: nil, depth: 0))
    }
    throw .openStep("unexpected \(describe(bytes[position])) after the property list's value", at: position)
  }

  // MARK: Values

  mutating func parseValue(depth: Int) throws(PropertyListError) -> PropertyListValue {
    let start = position
    valueCount += 1
    guard valueCount <= limits.maxObjects else {
      throw .limit("property list has more than \(limits.maxObjects) values", at: start)
    }
    guard position < bytes.count else { throw .openStep("unexpected end of input: expected a value", at: start) }
    switch bytes[position] {
    case UInt8(ascii: "{"):
      try checkDepth(depth, at: start)
      position += 1
      return .dictionary(try parseEntries(firstKey: nil, closing: UInt8(ascii: "}"), depth: depth))
    case UInt8(ascii: "("):
      try checkDepth(depth, at: start)
      position += 1
      return .array(try parseArray(depth: depth, start: start))
    case UInt8(ascii: "<"):
      position += 1
      return .data(try parseData(start: start))
    case UInt8(ascii: "\""), UInt8(ascii: "'"):
      return .string(try parseQuoted())
    case let byte where Self.isUnquoted(byte):
      return .string(try parseUnquoted())
    case let byte:
      throw .openStep("unexpected \(describe(byte)): expected a value ({ ( < \" or a word)", at: start)
    }
  }

  func checkDepth(_ depth: Int, at offset: Int) throws(PropertyListError) {
    guard depth < limits.maxDepth else {
      throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: offset)
    }
  }

  /// `key = value;` entries up to `closing` (or the end of input when nil); `firstKey` was already read.
  mutating func parseEntries(firstKey: String?, closing: UInt8?, depth: Int) throws(PropertyListError)
    -> [String: PropertyListValue]
  {
    var entries: [String: PropertyListValue] = [:]
    var pendingKey = firstKey
    while true {
      let key: String
      if let pending = pendingKey {
        key = pending
        pendingKey = nil
      } else {
        try skipSpace()
        guard position < bytes.count else {
          if closing == nil { return entries }
          throw .openStep("unexpected end of input: a dictionary is not closed with '}'", at: position)
        }
        if let closing, bytes[position] == closing {
          position += 1
          return entries
        }
        let keyStart = position
        let parsedKey = try parseValue(depth: depth + 1)
        guard case .string(let text) = parsedKey else {
          throw .openStep("a dictionary key must be a string", at: keyStart)
        }
        key = text
      }
      try skipSpace()
      try expect(UInt8(ascii: "="), "'=' after the key '\(key)'")
      try skipSpace()
      entries[key] = try parseValue(depth: depth + 1)
      try skipSpace()
      try expect(UInt8(ascii: ";"), "';' after the value of '\(key)'")
    }
  }

  mutating func parseArray(depth: Int, start: Int) throws(PropertyListError) -> [PropertyListValue] {
    var items: [PropertyListValue] = []
    while true {
      try skipSpace()
      guard position < bytes.count else {
        throw .openStep("unexpected end of input: the array opened here is not closed with ')'", at: start)
      }
      if bytes[position] == UInt8(ascii: ")") {
        position += 1
        return items
      }
      items.append(try parseValue(depth: depth + 1))
      try skipSpace()
      guard position < bytes.count else {
        throw .openStep("unexpected end of input: the array opened here is not closed with ')'", at: start)
      }
      switch bytes[position] {
      case UInt8(ascii: ","): position += 1
      case UInt8(ascii: ")"): break
      case let byte: throw .openStep("unexpected \(describe(byte)) in an array: expected ',' or ')'", at: position)
      }
    }
  }

  mutating func parseData(start: Int) throws(PropertyListError) -> [UInt8] {
    var data: [UInt8] = []
    var high: UInt8?
    while true {
      try skipSpace()
      guard position < bytes.count else { throw .openStep("unexpected end of input in <data>", at: start) }
      let byte = bytes[position]
      if byte == UInt8(ascii: ">") {
        guard high == nil else { throw .openStep("<data> has an odd number of hex digits", at: position) }
        position += 1
        return data
      }
      guard let digit = Self.hexValue(byte) else {
        throw .openStep("unexpected \(describe(byte)) in <data>: expected hex digits or '>'", at: position)
      }
      position += 1
      if let h = high {
        data.append(h << 4 | digit)
        high = nil
      } else {
        high = digit
      }
    }
  }

  mutating func parseUnquoted() throws(PropertyListError) -> String {
    let start = position
    while position < bytes.count, Self.isUnquoted(bytes[position]) { position += 1 }
    return String(decoding: bytes[start..<position], as: UTF8.self)  // ASCII only
  }

  mutating func parseQuoted() throws(PropertyListError) -> String {
    let start = position
    let quote = bytes[position]
    position += 1
    var utf8: [UInt8] = []
    while true {
      guard position < bytes.count else {
        throw .openStep("unexpected end of input: the string opened here has no closing quote", at: start)
      }
      let byte = bytes[position]
      if byte == quote {
        position += 1
        break
      }
      if byte != UInt8(ascii: "\\") {
        utf8.append(byte)
        position += 1
        continue
      }
      position += 1
      guard position < bytes.count else {
        throw .openStep("unexpected end of input after '\\' in a string", at: position - 1)
      }
      let escapeStart = position - 1
      let escape = bytes[position]
      position += 1
      switch escape {
      case UInt8(ascii: "n"): utf8.append(0x0A)
      case UInt8(ascii: "t"): utf8.append(0x09)
      case UInt8(ascii: "r"): utf8.append(0x0D)
      case UInt8(ascii: "a"): utf8.append(0x07)
      case UInt8(ascii: "b"): utf8.append(0x08)
      case UInt8(ascii: "f"): utf8.append(0x0C)
      case UInt8(ascii: "v"): utf8.append(0x0B)
      case UInt8(ascii: "U"): try appendUnicodeEscape(to: &utf8)
      case UInt8(ascii: "0")...UInt8(ascii: "7"):
        var value = UInt32(escape - UInt8(ascii: "0"))
        for _ in 0..<2 {
          guard position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(bytes[position]) else {
            break
          }
          value = value * 8 + UInt32(bytes[position] - UInt8(ascii: "0"))
          position += 1
        }
        // Three octal digits reach \777, past a byte: refused (found by fuzzing, a trap in UInt8(_:) before).
        guard value <= 0o377 else {
          throw .openStep("the escape \\\(String(value, radix: 8)) is above \\377 (one byte)", at: escapeStart)
        }
        // The byte's Latin-1 scalar, as Core Foundation maps the upper half for a UTF-8 document.
        utf8.append(contentsOf: Array(String(Unicode.Scalar(UInt8(value))).utf8))
      default: utf8.append(escape)  // \" \' \\ and any other character stand for themselves
      }
    }
    guard let text = String(validating: utf8, as: UTF8.self) else {
      throw .openStep("the string is not valid UTF-8", at: start)
    }
    return text
  }

  /// `\UXXXX` (the `\U` read): one UTF-16 unit; a high surrogate must be followed by `\U` and a low one.
  mutating func appendUnicodeEscape(to utf8: inout [UInt8]) throws(PropertyListError) {
    let start = position - 2
    let unit = try hexUnit(escapeStart: start)
    var scalar: Unicode.Scalar?
    if (0xD800...0xDBFF).contains(unit) {
      guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "U")
      else { throw .openStep("\\U\(hex4(unit)) is a high surrogate without a following \\U low surrogate", at: start) }
      position += 2
      let low = try hexUnit(escapeStart: position - 2)
      guard (0xDC00...0xDFFF).contains(low) else {
        throw .openStep("\\U\(hex4(unit)) is followed by \\U\(hex4(low)), not a low surrogate", at: start)
      }
      scalar = Unicode.Scalar(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
    } else {
      scalar = Unicode.Scalar(unit)
    }
    guard let scalar else { throw .openStep("\\U\(hex4(unit)) is a lone low surrogate", at: start) }
    utf8.append(contentsOf: Array(String(scalar).utf8))
  }

  /// Exactly four hex digits at `position`.
  mutating func hexUnit(escapeStart: Int) throws(PropertyListError) -> UInt32 {
    var value: UInt32 = 0
    for _ in 0..<4 {
      guard position < bytes.count, let digit = Self.hexValue(bytes[position]) else {
        throw .openStep("\\U must be followed by four hex digits", at: escapeStart)
      }
      value = value << 4 | UInt32(digit)
      position += 1
    }
    return value
  }

  func hex4(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
  }

  // MARK: Lexing

  mutating func expect(_ byte: UInt8, _ what: String) throws(PropertyListError) {
    guard position < bytes.count else { throw .openStep("unexpected end of input: expected \(what)", at: position) }
    guard bytes[position] == byte else {
      throw .openStep("unexpected \(describe(bytes[position])): expected \(what)", at: position)
    }
    position += 1
  }

  /// Skips whitespace and comments.
  mutating func skipSpace() throws(PropertyListError) {
    while position < bytes.count {
      switch bytes[position] {
      case 0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C:
        position += 1
      case UInt8(ascii: "/") where position + 1 < bytes.count && bytes[position + 1] == UInt8(ascii: "/"):
        while position < bytes.count, bytes[position] != 0x0A, bytes[position] != 0x0D { position += 1 }
      case UInt8(ascii: "/") where position + 1 < bytes.count && bytes[position + 1] == UInt8(ascii: "*"):
        let start = position
        position += 2
        while true {
          guard position + 1 < bytes.count else {
            throw .openStep("unexpected end of input: the comment opened here has no '*/'", at: start)
          }
          if bytes[position] == UInt8(ascii: "*"), bytes[position + 1] == UInt8(ascii: "/") {
            position += 2
            break
          }
          position += 1
        }
      default:
        return
      }
    }
  }

  /// Characters of an unquoted string, as Core Foundation allows them.
  static func isUnquoted(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      return true
    case UInt8(ascii: "_"), UInt8(ascii: "$"), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: ":"),
      UInt8(ascii: "."), UInt8(ascii: "-"):
      return true
    default:
      return false
    }
  }

  static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
    default: return nil
    }
  }

  func describe(_ byte: UInt8) -> String {
    (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte \(hexByte(byte))"
  }
}
