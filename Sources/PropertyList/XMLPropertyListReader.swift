/// Reads Apple's XML property list format.
///
/// Uses its own small tokenizer (no Foundation `XMLParser`) so it runs anywhere and fails the
/// same way everywhere. Accepts: an optional UTF-8 byte-order mark, `<?xml …?>`, a DOCTYPE,
/// comments, processing instructions, CDATA, the five predefined entities and numeric
/// character references; a `<plist>` root (or a bare value element, as Apple and Python
/// allow). Rejects anything else with an error naming the byte offset.
public enum XMLPropertyListReader {
  /// Parses an XML property list. Throws `PropertyListError` (never traps) on malformed input.
  public static func read(_ bytes: some Collection<UInt8>, limits: PropertyListLimits = .default)
    throws(PropertyListError) -> PropertyListValue
  {
    var parser = XMLPlistParser(bytes: try limits.checkedInput(bytes), limits: limits)
    return try parser.parseDocument()
  }
}

private enum ASCII {
  static let lessThan = UInt8(ascii: "<")
  static let greaterThan = UInt8(ascii: ">")
  static let ampersand = UInt8(ascii: "&")
  static let semicolon = UInt8(ascii: ";")
  static let slash = UInt8(ascii: "/")
  static let equals = UInt8(ascii: "=")
  static let doubleQuote = UInt8(ascii: "\"")
  static let singleQuote = UInt8(ascii: "'")
  static let openBracket = UInt8(ascii: "[")
  static let closeBracket = UInt8(ascii: "]")
  static let hash = UInt8(ascii: "#")
  static let lineFeed: UInt8 = 0x0A
  static let carriageReturn: UInt8 = 0x0D

  static func isSpace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
  }

  static func isNameStart(_ byte: UInt8) -> Bool {
    (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F || byte == 0x3A
      || byte >= 0x80
  }

  static func isNameByte(_ byte: UInt8) -> Bool {
    isNameStart(byte) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x2E
  }
}

private struct XMLPlistParser {
  struct StartTag {
    var name: String
    var selfClosing: Bool
    var offset: Int
  }

  let bytes: [UInt8]
  let limits: PropertyListLimits
  var position = 0
  var valueCount = 0

  init(bytes: [UInt8], limits: PropertyListLimits) {
    self.bytes = bytes
    self.limits = limits
  }

  // MARK: Document structure

  mutating func parseDocument() throws(PropertyListError) -> PropertyListValue {
    if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
      position = 3
    } else if bytes.count >= 2,
      bytes[0] == 0 || bytes[1] == 0 || (bytes[0] == 0xFE && bytes[1] == 0xFF) || (bytes[0] == 0xFF && bytes[1] == 0xFE)
    {
      throw .xml("UTF-16 and UTF-32 encoded XML property lists are not supported (only UTF-8)", at: 0)
    }
    try skipProlog()
    let root = try parseStartTag()
    let value: PropertyListValue
    if root.name == "plist" {
      guard !root.selfClosing else {
        throw .xml("empty <plist/> element holds no value", at: root.offset)
      }
      try skipMisc()
      if isAtEndTag {
        throw .xml("<plist> element holds no value", at: position)
      }
      let tag = try parseStartTag()
      value = try parseValue(tag, depth: 0)
      try skipMisc()
      try parseEndTag("plist")
    } else {
      value = try parseValue(root, depth: 0)
    }
    try skipMisc()
    guard position == bytes.count else {
      throw .xml("unexpected content after the root element", at: position)
    }
    return value
  }

  func hasPrefix(_ prefix: StaticString) -> Bool {
    let count = prefix.utf8CodeUnitCount
    guard count <= bytes.count - position else { return false }
    return prefix.withUTF8Buffer { buffer in
      for index in 0..<count where bytes[position + index] != buffer[index] {
        return false
      }
      return true
    }
  }

  var isAtEndTag: Bool { hasPrefix("</") }

  /// Index of the first occurrence of `pattern` at or after `start`, if any.
  func find(_ pattern: StaticString, from start: Int) -> Int? {
    let count = pattern.utf8CodeUnitCount
    return pattern.withUTF8Buffer { buffer -> Int? in
      guard count <= bytes.count else { return nil }
      var index = start
      while index <= bytes.count - count {
        var matched = true
        for offset in 0..<count where bytes[index + offset] != buffer[offset] {
          matched = false
          break
        }
        if matched { return index }
        index += 1
      }
      return nil
    }
  }

  mutating func skipSpaces() {
    while position < bytes.count, ASCII.isSpace(bytes[position]) { position += 1 }
  }

  mutating func skipComment() throws(PropertyListError) {
    let start = position
    guard let end = find("-->", from: position + 4) else {
      throw .xml("unterminated comment", at: start)
    }
    position = end + 3
  }

  mutating func skipProcessingInstruction() throws(PropertyListError) {
    let start = position
    guard let end = find("?>", from: position + 2) else {
      throw .xml("unterminated processing instruction", at: start)
    }
    position = end + 2
  }

  /// Skips `<!DOCTYPE …>`, including an internal subset in brackets and quoted literals.
  mutating func skipDoctype() throws(PropertyListError) {
    let start = position
    position += 9
    var quote: UInt8? = nil
    var bracketDepth = 0
    while position < bytes.count {
      let byte = bytes[position]
      position += 1
      if let open = quote {
        if byte == open { quote = nil }
      } else if byte == ASCII.doubleQuote || byte == ASCII.singleQuote {
        quote = byte
      } else if byte == ASCII.openBracket {
        bracketDepth += 1
      } else if byte == ASCII.closeBracket {
        bracketDepth = max(0, bracketDepth - 1)
      } else if byte == ASCII.greaterThan && bracketDepth == 0 {
        return
      }
    }
    throw .xml("unterminated DOCTYPE declaration", at: start)
  }

  /// Whitespace, the XML declaration, processing instructions, comments and one DOCTYPE.
  mutating func skipProlog() throws(PropertyListError) {
    var sawDoctype = false
    while true {
      skipSpaces()
      if hasPrefix("<?") {
        try skipProcessingInstruction()
      } else if hasPrefix("<!--") {
        try skipComment()
      } else if hasPrefix("<!DOCTYPE") {
        guard !sawDoctype else { throw .xml("second DOCTYPE declaration", at: position) }
        sawDoctype = true
        try skipDoctype()
      } else {
        return
      }
    }
  }

  /// Whitespace, comments and processing instructions between elements.
  mutating func skipMisc() throws(PropertyListError) {
    while true {
      skipSpaces()
      if hasPrefix("<!--") {
        try skipComment()
      } else if hasPrefix("<?") {
        try skipProcessingInstruction()
      } else {
        return
      }
    }
  }

  mutating func parseName() throws(PropertyListError) -> String {
    let start = position
    guard position < bytes.count, ASCII.isNameStart(bytes[position]) else {
      throw .xml("expected an element or attribute name", at: position)
    }
    position += 1
    while position < bytes.count, ASCII.isNameByte(bytes[position]) { position += 1 }
    return String(decoding: bytes[start..<position], as: UTF8.self)
  }

  /// Parses `<name attr="…" …>` or `<name …/>`; attributes are checked for well-formedness
  /// and ignored (only `<plist version>` has any, and every version is read the same way).
  mutating func parseStartTag() throws(PropertyListError) -> StartTag {
    let start = position
    guard position < bytes.count else {
      throw .xml("unexpected end of document; expected an element", at: position)
    }
    guard bytes[position] == ASCII.lessThan else {
      throw .xml("unexpected text; expected an element", at: position)
    }
    position += 1
    guard position < bytes.count else {
      throw .xml("unexpected end of document inside a tag", at: position)
    }
    if bytes[position] == ASCII.slash {
      throw .xml("unexpected end tag; expected an element", at: start)
    }
    if bytes[position] == UInt8(ascii: "!") {
      throw .xml("unexpected markup declaration or CDATA; expected an element", at: start)
    }
    let name = try parseName()
    while true {
      let beforeSpace = position
      skipSpaces()
      guard position < bytes.count else {
        throw .xml("unterminated <\(name)> tag", at: start)
      }
      if bytes[position] == ASCII.greaterThan {
        position += 1
        return StartTag(name: name, selfClosing: false, offset: start)
      }
      if bytes[position] == ASCII.slash {
        guard position + 1 < bytes.count, bytes[position + 1] == ASCII.greaterThan else {
          throw .xml("expected '>' after '/' in <\(name)> tag", at: position)
        }
        position += 2
        return StartTag(name: name, selfClosing: true, offset: start)
      }
      guard position > beforeSpace else {
        throw .xml("expected whitespace, '>' or '/>' in <\(name)> tag", at: position)
      }
      _ = try parseName()
      skipSpaces()
      guard position < bytes.count, bytes[position] == ASCII.equals else {
        throw .xml("expected '=' after attribute name in <\(name)> tag", at: position)
      }
      position += 1
      skipSpaces()
      guard position < bytes.count, bytes[position] == ASCII.doubleQuote || bytes[position] == ASCII.singleQuote else {
        throw .xml("expected a quoted attribute value in <\(name)> tag", at: position)
      }
      let quote = bytes[position]
      position += 1
      while position < bytes.count, bytes[position] != quote {
        guard bytes[position] != ASCII.lessThan else {
          throw .xml("'<' is not allowed in an attribute value", at: position)
        }
        position += 1
      }
      guard position < bytes.count else {
        throw .xml("unterminated attribute value in <\(name)> tag", at: start)
      }
      position += 1
    }
  }

  /// Parses `</name>` and checks it closes `expected`.
  mutating func parseEndTag(_ expected: String) throws(PropertyListError) {
    let start = position
    guard hasPrefix("</") else {
      if position >= bytes.count {
        throw .xml("unexpected end of document; expected </\(expected)>", at: position)
      }
      throw .xml("expected </\(expected)>", at: position)
    }
    position += 2
    let name = try parseName()
    skipSpaces()
    guard position < bytes.count, bytes[position] == ASCII.greaterThan else {
      throw .xml("expected '>' to end </\(name)>", at: position)
    }
    position += 1
    guard name == expected else {
      throw .xml("mismatched end tag </\(name)>; expected </\(expected)>", at: start)
    }
  }

  /// Character content of a text-only element up to and including its end tag, with
  /// references resolved, CDATA included, comments dropped and line ends normalized.
  mutating func readText(_ element: String) throws(PropertyListError) -> String {
    let start = position
    var text: [UInt8] = []
    while true {
      guard position < bytes.count else {
        throw .xml("unterminated <\(element)> element", at: start)
      }
      let byte = bytes[position]
      if byte == ASCII.lessThan {
        if hasPrefix("</") {
          try parseEndTag(element)
          break
        } else if hasPrefix("<![CDATA[") {
          let cdataStart = position
          guard let end = find("]]>", from: position + 9) else {
            throw .xml("unterminated CDATA section", at: cdataStart)
          }
          appendNormalized(bytes[(position + 9)..<end], to: &text)
          position = end + 3
        } else if hasPrefix("<!--") {
          try skipComment()
        } else if hasPrefix("<?") {
          try skipProcessingInstruction()
        } else {
          throw .xml("unexpected element inside <\(element)>", at: position)
        }
      } else if byte == ASCII.ampersand {
        try appendReference(to: &text)
      } else {
        let runStart = position
        while position < bytes.count, bytes[position] != ASCII.lessThan, bytes[position] != ASCII.ampersand {
          position += 1
        }
        appendNormalized(bytes[runStart..<position], to: &text)
      }
    }
    guard let string = String(validating: text, as: UTF8.self) else {
      throw .xml("<\(element)> text is not valid UTF-8", at: start)
    }
    return string
  }

  /// Appends raw text, turning CR LF and lone CR into LF as XML requires.
  func appendNormalized(_ slice: ArraySlice<UInt8>, to text: inout [UInt8]) {
    var previousWasCR = false
    for byte in slice {
      if byte == ASCII.carriageReturn {
        text.append(ASCII.lineFeed)
        previousWasCR = true
      } else {
        if !(byte == ASCII.lineFeed && previousWasCR) { text.append(byte) }
        previousWasCR = false
      }
    }
  }

  /// Resolves `&name;`, `&#NN;` or `&#xNN;` at `position`.
  mutating func appendReference(to text: inout [UInt8]) throws(PropertyListError) {
    let start = position
    var end = position + 1
    while end < bytes.count, end - start <= 12, bytes[end] != ASCII.semicolon { end += 1 }
    guard end < bytes.count, bytes[end] == ASCII.semicolon else {
      throw .xml("unterminated or overlong entity reference", at: start)
    }
    let body = bytes[(start + 1)..<end]
    position = end + 1
    switch String(decoding: body, as: UTF8.self) {
    case "lt": text.append(ASCII.lessThan)
    case "gt": text.append(ASCII.greaterThan)
    case "amp": text.append(ASCII.ampersand)
    case "quot": text.append(ASCII.doubleQuote)
    case "apos": text.append(ASCII.singleQuote)
    default:
      guard body.first == ASCII.hash else {
        throw .xml("unknown entity '&\(String(decoding: body, as: UTF8.self));'", at: start)
      }
      var digits = body.dropFirst()
      var radix: UInt32 = 10
      if digits.first == UInt8(ascii: "x") {
        radix = 16
        digits = digits.dropFirst()
      }
      guard !digits.isEmpty else {
        throw .xml("empty character reference", at: start)
      }
      var value: UInt32 = 0
      for digit in digits {
        guard let digitValue = Self.digitValue(digit, radix: radix) else {
          throw .xml("invalid digit in character reference", at: start)
        }
        value = value * radix + digitValue
        guard value <= 0x10FFFF else {
          throw .xml("character reference beyond U+10FFFF", at: start)
        }
      }
      guard Self.isXMLCharacter(value), let scalar = Unicode.Scalar(value) else {
        throw .xml(
          "character reference to U+\(String(value, radix: 16, uppercase: true)), which XML does not allow", at: start)
      }
      text.append(contentsOf: String(Character(scalar)).utf8)
    }
  }

  static func digitValue(_ byte: UInt8, radix: UInt32) -> UInt32? {
    let value: UInt32
    switch byte {
    case 0x30...0x39: value = UInt32(byte - 0x30)
    case 0x41...0x46: value = UInt32(byte - 0x41 + 10)
    case 0x61...0x66: value = UInt32(byte - 0x61 + 10)
    default: return nil
    }
    return value < radix ? value : nil
  }

  /// XML 1.0 `Char` production.
  static func isXMLCharacter(_ value: UInt32) -> Bool {
    value == 0x9 || value == 0xA || value == 0xD || (0x20...0xD7FF).contains(value)
      || (0xE000...0xFFFD).contains(value) || (0x10000...0x10FFFF).contains(value)
  }

  // MARK: Values

  mutating func countValue(at offset: Int) throws(PropertyListError) {
    valueCount += 1
    guard valueCount <= limits.maxObjects else {
      throw .limit("document has more than \(limits.maxObjects) values", at: offset)
    }
  }

  /// Text of a scalar element (empty for `<name/>`).
  mutating func scalarText(_ tag: StartTag) throws(PropertyListError) -> String {
    tag.selfClosing ? "" : try readText(tag.name)
  }

  mutating func parseValue(_ tag: StartTag, depth: Int) throws(PropertyListError) -> PropertyListValue {
    try countValue(at: tag.offset)
    switch tag.name {
    case "dict":
      guard depth < limits.maxDepth else {
        throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: tag.offset)
      }
      if tag.selfClosing { return .dictionary([:]) }
      var entries: [String: PropertyListValue] = [:]
      while true {
        try skipMisc()
        if isAtEndTag {
          try parseEndTag("dict")
          return .dictionary(entries)
        }
        let keyTag = try parseStartTag()
        guard keyTag.name == "key" else {
          throw .xml("expected <key> in <dict>, found <\(keyTag.name)>", at: keyTag.offset)
        }
        let key = try scalarText(keyTag)
        try skipMisc()
        if isAtEndTag || position >= bytes.count {
          throw .xml("<key>\(key)</key> has no value", at: keyTag.offset)
        }
        let valueTag = try parseStartTag()
        // As with Apple's and Python's readers, a repeated key keeps the last value.
        entries[key] = try parseValue(valueTag, depth: depth + 1)
      }
    case "array":
      guard depth < limits.maxDepth else {
        throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: tag.offset)
      }
      if tag.selfClosing { return .array([]) }
      var elements: [PropertyListValue] = []
      while true {
        try skipMisc()
        if isAtEndTag {
          try parseEndTag("array")
          return .array(elements)
        }
        let elementTag = try parseStartTag()
        elements.append(try parseValue(elementTag, depth: depth + 1))
      }
    case "string":
      return .string(try scalarText(tag))
    case "integer":
      let text = try scalarText(tag)
      return .integer(try Self.parseInteger(text, at: tag.offset))
    case "real":
      let text = try scalarText(tag)
      return .real(try Self.parseReal(text, at: tag.offset))
    case "true", "false":
      let text = try scalarText(tag)
      guard text.utf8.allSatisfy(ASCII.isSpace) else {
        throw .xml("<\(tag.name)> must be empty", at: tag.offset)
      }
      return .bool(tag.name == "true")
    case "date":
      let text = try scalarText(tag)
      return .date(try Self.parseDate(text, at: tag.offset))
    case "data":
      let text = try scalarText(tag)
      return .data(try Self.decodeBase64(text, at: tag.offset))
    case "key":
      throw .xml("<key> outside of a <dict>", at: tag.offset)
    case "plist":
      throw .xml("nested <plist> element", at: tag.offset)
    default:
      throw .xml("unknown element <\(tag.name)>", at: tag.offset)
    }
  }

  static func trimmed(_ text: String) -> ArraySlice<UInt8> {
    var bytes = ArraySlice(text.utf8)
    while let first = bytes.first, ASCII.isSpace(first) { bytes.removeFirst() }
    while let last = bytes.last, ASCII.isSpace(last) { bytes.removeLast() }
    return bytes
  }

  /// Decimal or `0x` hexadecimal, optionally signed, within the Int128 range.
  static func parseInteger(_ text: String, at offset: Int) throws(PropertyListError) -> PropertyListInteger {
    var digits = trimmed(text)
    var negative = false
    if let sign = digits.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") {
      negative = sign == UInt8(ascii: "-")
      digits = digits.dropFirst()
    }
    var radix: UInt32 = 10
    if digits.count > 2, digits.first == UInt8(ascii: "0"),
      digits[digits.startIndex + 1] == UInt8(ascii: "x") || digits[digits.startIndex + 1] == UInt8(ascii: "X")
    {
      radix = 16
      digits = digits.dropFirst(2)
    }
    guard !digits.isEmpty else {
      throw .xml("<integer> '\(text)' has no digits", at: offset)
    }
    var value: Int128 = 0
    for digit in digits {
      guard let digitValue = digitValue(digit, radix: radix) else {
        throw .xml("<integer> '\(text)' is not a valid integer", at: offset)
      }
      let (shifted, overflow1) = value.multipliedReportingOverflow(by: Int128(radix))
      let (next, overflow2) =
        negative
        ? shifted.subtractingReportingOverflow(Int128(digitValue))
        : shifted.addingReportingOverflow(Int128(digitValue))
      guard !overflow1, !overflow2 else {
        throw .xml("<integer> '\(text)' is out of the 128-bit range", at: offset)
      }
      value = next
    }
    return PropertyListInteger(value)
  }

  /// Decimal or scientific notation, or nan/inf/infinity in any case with an optional sign.
  static func parseReal(_ text: String, at offset: Int) throws(PropertyListError) -> Double {
    let bytes = trimmed(text)
    // Only the characters of decimal numbers and of nan/inf/infinity; this keeps the
    // standard library parser away from hex floats and other exotic spellings.
    let allowed = Array("0123456789+-.eEnNaAiIfFtTyY".utf8)
    guard !bytes.isEmpty, bytes.allSatisfy({ allowed.contains($0) }),
      let value = Double(String(decoding: bytes, as: UTF8.self))
    else {
      throw .xml("<real> '\(text)' is not a valid number", at: offset)
    }
    return value
  }

  /// `YYYY[-MM[-DD[THH[:MM[:SS]]]]]Z` in UTC, the forms Apple and Python write and read.
  static func parseDate(_ text: String, at offset: Int) throws(PropertyListError) -> PropertyListDate {
    let bytes = Array(trimmed(text))
    let invalid = PropertyListError.xml("<date> '\(text)' is not of the form YYYY-MM-DDTHH:MM:SSZ", at: offset)
    func number(_ start: Int, _ count: Int) -> Int? {
      guard start >= 0, start + count <= bytes.count else { return nil }
      var value = 0
      for byte in bytes[start..<(start + count)] {
        guard byte >= 0x30, byte <= 0x39 else { return nil }
        value = value * 10 + Int(byte - 0x30)
      }
      return value
    }
    func byte(_ index: Int) -> UInt8? { index < bytes.count ? bytes[index] : nil }

    guard let year = number(0, 4) else { throw invalid }
    var fields = [year, 1, 1, 0, 0, 0]
    var index = 4
    let separators: [UInt8] = Array("--T::".utf8)
    for field in 1..<6 {
      guard byte(index) == separators[field - 1] else { break }
      guard let value = number(index + 1, 2) else { throw invalid }
      fields[field] = value
      index += 3
    }
    guard index == bytes.count - 1, bytes[index] == UInt8(ascii: "Z") else { throw invalid }
    guard
      let date = PropertyListDate(
        year: fields[0], month: fields[1], day: fields[2],
        hour: fields[3], minute: fields[4], second: fields[5])
    else {
      throw .xml("<date> '\(text)' has a field out of range", at: offset)
    }
    return date
  }

  /// Standard base64; whitespace anywhere, padding optional, nothing after padding.
  static func decodeBase64(_ text: String, at offset: Int) throws(PropertyListError) -> [UInt8] {
    var output: [UInt8] = []
    output.reserveCapacity(text.utf8.count / 4 * 3 + 3)
    var accumulator: UInt32 = 0
    var pending = 0
    var padding = 0
    for byte in text.utf8 {
      let value: UInt32
      switch byte {
      case 0x41...0x5A: value = UInt32(byte - 0x41)
      case 0x61...0x7A: value = UInt32(byte - 0x61 + 26)
      case 0x30...0x39: value = UInt32(byte - 0x30 + 52)
      case UInt8(ascii: "+"): value = 62
      case UInt8(ascii: "/"): value = 63
      case UInt8(ascii: "="):
        padding += 1
        continue
      case 0x20, 0x09, 0x0A, 0x0D, 0x0C:
        continue
      default:
        throw .xml("<data> contains '\(Character(Unicode.Scalar(byte)))', which is not base64", at: offset)
      }
      guard padding == 0 else {
        throw .xml("<data> has base64 characters after '=' padding", at: offset)
      }
      accumulator = accumulator << 6 | value
      pending += 1
      if pending == 4 {
        output.append(UInt8(truncatingIfNeeded: accumulator >> 16))
        output.append(UInt8(truncatingIfNeeded: accumulator >> 8))
        output.append(UInt8(truncatingIfNeeded: accumulator))
        accumulator = 0
        pending = 0
      }
    }
    switch pending {
    case 0:
      guard padding == 0 else { throw .xml("<data> has misplaced base64 padding", at: offset) }
    case 2:
      guard padding == 0 || padding == 2 else { throw .xml("<data> has wrong base64 padding", at: offset) }
      output.append(UInt8(truncatingIfNeeded: accumulator >> 4))
    case 3:
      guard padding == 0 || padding == 1 else { throw .xml("<data> has wrong base64 padding", at: offset) }
      output.append(UInt8(truncatingIfNeeded: accumulator >> 10))
      output.append(UInt8(truncatingIfNeeded: accumulator >> 2))
    default:
      throw .xml("<data> base64 length is not valid (one character left over)", at: offset)
    }
    return output
  }
}
