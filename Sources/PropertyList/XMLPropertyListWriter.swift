/// Writes Apple's XML property list format, in the layout Apple's tools produce (tab
/// indentation, sorted keys for deterministic diffs), readable by Apple's
/// `PropertyListSerialization` and Python's `plistlib`.
public enum XMLPropertyListWriter {
  /// Encodes `value` as an XML property list (UTF-8).
  ///
  /// Throws `.unsupportedValue` for what XML plists cannot hold: UIDs, dates that are not
  /// finite or fall outside years 1...9999 (XML dates also drop fractional seconds), and
  /// strings with control characters other than tab, line feed and carriage return (XML 1.0
  /// forbids them; use `.data`). Throws `.limitExceeded` past `limits.maxDepth`.
  public static func write(_ value: PropertyListValue, limits: PropertyListLimits = .default) throws(PropertyListError)
    -> [UInt8]
  {
    var writer = XMLWriter(maxDepth: limits.maxDepth)
    writer.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
    writer.append(
      "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n")
    writer.append("<plist version=\"1.0\">\n")
    try writer.write(value, depth: 0)
    writer.append("</plist>\n")
    return writer.output
  }
}

private struct XMLWriter {
  let maxDepth: Int
  var output: [UInt8] = []

  init(maxDepth: Int) {
    self.maxDepth = maxDepth
  }

  mutating func append(_ text: String) {
    output.append(contentsOf: text.utf8)
  }

  mutating func indent(_ depth: Int) {
    output.append(contentsOf: repeatElement(0x09, count: depth))
  }

  mutating func element(_ name: String, _ content: String, depth: Int) {
    indent(depth)
    append("<\(name)>\(content)</\(name)>\n")
  }

  mutating func write(_ value: PropertyListValue, depth: Int) throws(PropertyListError) {
    switch value {
    case .string(let string):
      element("string", try Self.escape(string), depth: depth)
    case .integer(let integer):
      element("integer", integer.description, depth: depth)
    case .real(let real):
      element("real", Self.format(real), depth: depth)
    case .bool(let flag):
      indent(depth)
      append(flag ? "<true/>\n" : "<false/>\n")
    case .date(let date):
      element("date", try Self.format(date), depth: depth)
    case .data(let bytes):
      indent(depth)
      if bytes.isEmpty {
        append("<data></data>\n")
        return
      }
      append("<data>\n")
      let encoded = Self.base64(bytes)
      var start = 0
      while start < encoded.count {
        let end = min(start + 68, encoded.count)
        indent(depth)
        output.append(contentsOf: encoded[start..<end])
        output.append(0x0A)
        start = end
      }
      indent(depth)
      append("</data>\n")
    case .array(let elements):
      guard depth < maxDepth else {
        throw .limit("value is nested deeper than the limit of \(maxDepth)", at: nil)
      }
      indent(depth)
      if elements.isEmpty {
        append("<array/>\n")
        return
      }
      append("<array>\n")
      for element in elements {
        try write(element, depth: depth + 1)
      }
      indent(depth)
      append("</array>\n")
    case .dictionary(let entries):
      guard depth < maxDepth else {
        throw .limit("value is nested deeper than the limit of \(maxDepth)", at: nil)
      }
      indent(depth)
      if entries.isEmpty {
        append("<dict/>\n")
        return
      }
      append("<dict>\n")
      let sortedKeys = entries.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
      for key in sortedKeys {
        guard let element = entries[key] else { continue }
        self.element("key", try Self.escape(key), depth: depth + 1)
        try write(element, depth: depth + 1)
      }
      indent(depth)
      append("</dict>\n")
    case .uid:
      throw .unsupported("UID values cannot be written; they only appear in keyed archives read from elsewhere")
    }
  }

  /// Escapes markup characters; carriage returns become `&#13;` so readers do not fold them
  /// into line feeds. Characters XML 1.0 cannot carry at all are refused.
  static func escape(_ string: String) throws(PropertyListError) -> String {
    var result = ""
    result.reserveCapacity(string.utf8.count)
    for scalar in string.unicodeScalars {
      switch scalar {
      case "&": result += "&amp;"
      case "<": result += "&lt;"
      case ">": result += "&gt;"
      case "\r": result += "&#13;"
      case "\t", "\n": result.unicodeScalars.append(scalar)
      default:
        guard scalar.value >= 0x20, scalar.value != 0xFFFE, scalar.value != 0xFFFF else {
          throw .unsupported(
            "string contains U+\(String(scalar.value, radix: 16, uppercase: true)), which XML property lists cannot hold; store it as data instead"
          )
        }
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// Shortest text that reads back to the same Double; non-finite values are spelled the
  /// way both Apple's and Python's readers accept.
  static func format(_ real: Double) -> String {
    if real.isNaN { return "nan" }
    if real == .infinity { return "+infinity" }
    if real == -.infinity { return "-infinity" }
    return real.description
  }

  /// `YYYY-MM-DDTHH:MM:SSZ`, fractional seconds dropped (as Apple and Python do).
  static func format(_ date: PropertyListDate) throws(PropertyListError) -> String {
    guard let text = date.iso8601 else {
      throw .unsupported(
        "date \(date.secondsSinceReferenceDate) (seconds since 2001) is not finite or outside years 1...9999, so XML cannot hold it"
      )
    }
    return text
  }

  static func base64(_ bytes: [UInt8]) -> [UInt8] {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    var output: [UInt8] = []
    output.reserveCapacity((bytes.count + 2) / 3 * 4)
    var index = 0
    while index < bytes.count {
      let remaining = bytes.count - index
      let b0 = UInt32(bytes[index])
      let b1 = remaining > 1 ? UInt32(bytes[index + 1]) : 0
      let b2 = remaining > 2 ? UInt32(bytes[index + 2]) : 0
      let group = b0 << 16 | b1 << 8 | b2
      output.append(alphabet[Int(group >> 18 & 0x3F)])
      output.append(alphabet[Int(group >> 12 & 0x3F)])
      output.append(remaining > 1 ? alphabet[Int(group >> 6 & 0x3F)] : UInt8(ascii: "="))
      output.append(remaining > 2 ? alphabet[Int(group & 0x3F)] : UInt8(ascii: "="))
      index += 3
    }
    return output
  }
}
