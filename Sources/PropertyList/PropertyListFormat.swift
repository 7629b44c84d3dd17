/// The on-disk encodings this module reads and writes.
public enum PropertyListFormat: Sendable, Hashable, CaseIterable {
  /// Apple's binary format, `bplist00`: compact and fast, used by most system files.
  case binary
  /// Apple's XML format (`<plist version="1.0">`): human-readable and diffable.
  case xml

  /// Guesses the format from the first bytes: `bplist` means binary, a leading `<` (after an
  /// optional UTF-8 byte-order mark and whitespace) means XML; `nil` otherwise.
  public static func detect(_ bytes: some Collection<UInt8>) -> PropertyListFormat? {
    var index = bytes.startIndex
    let bplist = Array("bplist".utf8)
    if bytes.starts(with: bplist) { return .binary }
    if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
      index = bytes.index(index, offsetBy: 3)
    }
    while index != bytes.endIndex {
      switch bytes[index] {
      case 0x20, 0x09, 0x0A, 0x0D: index = bytes.index(after: index)
      case UInt8(ascii: "<"): return .xml
      default: return nil
      }
    }
    return nil
  }
}

/// Bounds applied while reading (and writing) so hostile input cannot exhaust memory, time or
/// stack. The defaults suit configuration-sized files; lower them for untrusted sources.
public struct PropertyListLimits: Sendable, Hashable {
  /// Largest accepted input, and largest total of string/data bytes in the decoded value
  /// (binary plists can share one object many times, so the decoded value can be bigger
  /// than the file).
  public var maxBytes: Int
  /// Deepest nesting of arrays and dictionaries; a top-level array has depth 1.
  public var maxDepth: Int
  /// Most values in the decoded tree, counting a shared object once per reference.
  public var maxObjects: Int

  /// Creates limits; every parameter defaults to the value in `.default`.
  public init(maxBytes: Int = 64 << 20, maxDepth: Int = 512, maxObjects: Int = 1_000_000) {
    self.maxBytes = maxBytes
    self.maxDepth = maxDepth
    self.maxObjects = maxObjects
  }

  /// 64 MiB, depth 512, one million values.
  public static let `default` = PropertyListLimits()

  /// Copies the input into an array after checking its size against `maxBytes`.
  func checkedInput(_ bytes: some Collection<UInt8>) throws(PropertyListError) -> [UInt8] {
    let count = bytes.count
    guard count <= maxBytes else {
      throw .limit("input of \(count) bytes exceeds the limit of \(maxBytes) bytes", at: 0)
    }
    return Array(bytes)
  }
}

extension PropertyListValue {
  /// Parses a property list, detecting whether it is binary (`bplist00`) or XML.
  ///
  /// Never traps on malformed input: every failure is a `PropertyListError` naming the
  /// problem and its byte offset.
  public init(bytes: some Collection<UInt8>, limits: PropertyListLimits = .default) throws(PropertyListError) {
    guard let format = PropertyListFormat.detect(bytes) else {
      throw PropertyListError(
        kind: .unknownFormat,
        message: "not a property list: expected 'bplist00' or an XML document starting with '<'",
        offset: 0)
    }
    try self.init(bytes: bytes, format: format, limits: limits)
  }

  /// Parses a property list in a known format, for callers that must not accept the other one.
  public init(bytes: some Collection<UInt8>, format: PropertyListFormat, limits: PropertyListLimits = .default)
    throws(PropertyListError)
  {
    switch format {
    case .binary: self = try BinaryPropertyListReader.read(bytes, limits: limits)
    case .xml: self = try XMLPropertyListReader.read(bytes, limits: limits)
    }
  }

  /// Serializes this value. Throws `.unsupportedValue` for values the format cannot hold
  /// (UIDs; for XML also non-finite dates, years outside 1...9999 and control characters in
  /// strings) and `.limitExceeded` when nesting is deeper than `limits.maxDepth`.
  public func encoded(as format: PropertyListFormat, limits: PropertyListLimits = .default) throws(PropertyListError)
    -> [UInt8]
  {
    switch format {
    case .binary: return try BinaryPropertyListWriter.write(self, limits: limits)
    case .xml: return try XMLPropertyListWriter.write(self, limits: limits)
    }
  }
}
