/// Writes Apple's binary property list format, `bplist00`, readable by Apple's
/// `PropertyListSerialization` and Python's `plistlib`.
///
/// Output is deterministic: dictionary keys are sorted by their UTF-8 bytes, identical scalars
/// (same encoded bytes) are stored once (integers only within ±65,535, the ones that repeat),
/// integers use the smallest size that holds them (values beyond `Int64` use the 16-byte form, as
/// Apple and Python do), strings are ASCII when possible and UTF-16BE otherwise, and
/// reference/offset widths are the smallest that fit.
public enum BinaryPropertyListWriter {
  /// Encodes `value` as `bplist00`. Throws `.unsupportedValue` for UIDs and `.limitExceeded`
  /// for nesting deeper than `limits.maxDepth`.
  public static func write(_ value: PropertyListValue, limits: PropertyListLimits = .default) throws(PropertyListError)
    -> [UInt8]
  {
    var encoder = BinaryEncoder(maxDepth: limits.maxDepth)
    _ = try encoder.flatten(value, depth: 0)
    return encoder.serialize()
  }

  /// Data and strings of this many encoded bytes or more are written out by `writeDictionary` as they come, and are
  /// not deduplicated (smaller ones are, as `write` does).
  public static let streamedScalarBytes = 64 << 10

  /// Writes a dictionary as `bplist00` through `write` (called with consecutive pieces of the file), asking
  /// `value(i)` for the value of `keys[i]` only when it is its turn: a suite's export is never held whole in
  /// memory, only its keys, its small values and one large value at a time. The same file as `write` would make
  /// for the same dictionary, except that large data and strings (`streamedScalarBytes`) are stored where they
  /// come and never shared. The caller gives each key once.
  public static func writeDictionary(
    keys: [String], limits: PropertyListLimits = .default, value: (Int) throws -> PropertyListValue,
    write: (UnsafeRawBufferPointer) throws -> Void
  ) throws {
    var encoder = BinaryEncoder(maxDepth: limits.maxDepth)
    encoder.streamFrom = streamedScalarBytes
    try BinaryPropertyListReader.signature.withUnsafeBytes(write)
    encoder.written = BinaryPropertyListReader.signature.count
    encoder.objects.append(.dictionary(keys: [], values: []))
    let (utf8, spans) = BinaryEncoder.sortedSpans(keys.lazy.map { $0.utf8 })
    var keyRefs: [Int] = []
    var valueRefs: [Int] = []
    keyRefs.reserveCapacity(spans.count)
    valueRefs.reserveCapacity(spans.count)
    for span in spans {
      keyRefs.append(encoder.unique(BinaryEncoder.encodeString(utf8: utf8[span.start..<(span.start + span.count)])))
    }
    for span in spans {
      valueRefs.append(try encoder.flatten(try value(span.pair), depth: 1))
      if !encoder.stream.isEmpty {
        try encoder.stream.withUnsafeBytes(write)
        encoder.written += encoder.stream.count
        encoder.stream = []
      }
    }
    encoder.objects[0] = .dictionary(keys: keyRefs, values: valueRefs)
    try encoder.serialize().withUnsafeBytes(write)
  }
}

private struct BinaryEncoder {
  enum Object {
    /// A fully encoded scalar (marker and payload).
    case scalar([UInt8])
    case array([Int])
    case dictionary(keys: [Int], values: [Int])
    /// A scalar already written out at this offset of the file (`writeDictionary`).
    case written(offset: Int)
  }

  /// An encoded scalar as a dictionary key, hashed in one call over its bytes (an array of bytes hashes them one
  /// by one: a 4 KB value took 4,096 calls, and dedup dominated the encoding of large suites).
  struct ScalarBytes: Hashable {
    let bytes: [UInt8]
    func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
  }

  let maxDepth: Int
  var objects: [Object] = []
  /// Index of each distinct encoded scalar, so repeated strings, numbers and keys are stored once.
  var scalarIndex: [ScalarBytes: Int] = [:]
  var integerIndex: [Int128: Int] = [:]
  static let sharedIntegerMagnitude: UInt128 = 0xFFFF

  /// Streaming (`writeDictionary`): scalars this long or longer go to `stream`, to be written at `written`.
  var streamFrom = Int.max
  var stream: [UInt8] = []
  /// Bytes of the file written out so far (`stream` comes after them).
  var written = 0

  init(maxDepth: Int) {
    self.maxDepth = maxDepth
  }

  /// The keys' UTF-8 in one buffer and their spans sorted by it (the file's key order): bytes are compared without
  /// reference counting (comparing through `String.UTF8View` was the largest cost of encoding a million keys).
  static func sortedSpans(_ keys: some Sequence<String.UTF8View>) -> (
    utf8: [UInt8], spans: [(start: Int, count: Int, pair: Int)]
  ) {
    var utf8: [UInt8] = []
    var spans: [(start: Int, count: Int, pair: Int)] = []
    spans.reserveCapacity(keys.underestimatedCount)
    for (i, key) in keys.enumerated() {
      spans.append((utf8.count, key.count, i))
      utf8.append(contentsOf: key)
    }
    utf8.withUnsafeBufferPointer { bytes in
      spans.sort { a, b in
        for i in 0..<min(a.count, b.count) where bytes[a.start + i] != bytes[b.start + i] {
          return bytes[a.start + i] < bytes[b.start + i]
        }
        return a.count < b.count
      }
    }
    return (utf8, spans)
  }

  /// Assigns object indices in pre-order (the top object gets index 0) and returns `value`'s.
  mutating func flatten(_ value: PropertyListValue, depth: Int) throws(PropertyListError) -> Int {
    switch value {
    case .array(let elements):
      guard depth < maxDepth else {
        throw .limit("value is nested deeper than the limit of \(maxDepth)", at: nil)
      }
      let index = objects.count
      objects.append(.array([]))
      var refs: [Int] = []
      refs.reserveCapacity(elements.count)
      for element in elements {
        refs.append(try flatten(element, depth: depth + 1))
      }
      objects[index] = .array(refs)
      return index
    case .dictionary(let entries):
      guard depth < maxDepth else {
        throw .limit("value is nested deeper than the limit of \(maxDepth)", at: nil)
      }
      let index = objects.count
      objects.append(.dictionary(keys: [], values: []))
      if entries.count >= 1024 {
        // One growth for the keys, not twenty rehashes of a table that ends with one entry per key.
        scalarIndex.reserveCapacity(scalarIndex.count + entries.count)
        objects.reserveCapacity(objects.count + 2 * entries.count)
      }
      let pairs = Array(entries)
      let (utf8, spans) = Self.sortedSpans(pairs.lazy.map { $0.key.utf8 })
      var keyRefs: [Int] = []
      var valueRefs: [Int] = []
      keyRefs.reserveCapacity(spans.count)
      valueRefs.reserveCapacity(spans.count)
      for span in spans {
        keyRefs.append(unique(Self.encodeString(utf8: utf8[span.start..<(span.start + span.count)])))
      }
      for span in spans {
        valueRefs.append(try flatten(pairs[span.pair].value, depth: depth + 1))
      }
      objects[index] = .dictionary(keys: keyRefs, values: valueRefs)
      return index
    case .integer(let integer):
      // Integers are most values of a suite: looked up by value, not by encoded bytes, and only small ones (the
      // ones that repeat: counts, flags, enumerations). A table of a million distinct large integers found
      // nothing and cost a fifth of encoding them.
      let small = integer.value.magnitude <= Self.sharedIntegerMagnitude
      if small, let existing = integerIndex[integer.value] { return existing }
      let index = objects.count
      objects.append(.scalar(try Self.encodeScalar(value)))
      if small { integerIndex[integer.value] = index }
      return index
    default:
      let encoded = try Self.encodeScalar(value)
      guard encoded.count >= streamFrom else { return unique(encoded) }
      objects.append(.written(offset: written + stream.count))
      if stream.isEmpty { stream = encoded } else { stream += encoded }
      return objects.count - 1
    }
  }

  /// The index of the scalar `encoded`: an existing one with the same bytes, or a new one.
  mutating func unique(_ encoded: [UInt8]) -> Int {
    let key = ScalarBytes(bytes: encoded)
    if let existing = scalarIndex[key] { return existing }
    let index = objects.count
    objects.append(.scalar(encoded))
    scalarIndex[key] = index
    return index
  }

  /// A string from its UTF-8: ASCII as it is, anything else as UTF-16BE.
  static func encodeString(utf8: ArraySlice<UInt8>) -> [UInt8] {
    guard utf8.allSatisfy({ $0 < 0x80 }) else { return encodeUTF16(String(decoding: utf8, as: UTF8.self)) }
    var out: [UInt8] = []
    out.reserveCapacity(utf8.count + 10)
    appendHeader(0x50, count: utf8.count, to: &out)
    out.append(contentsOf: utf8)
    return out
  }

  static func encodeUTF16(_ string: String) -> [UInt8] {
    var out: [UInt8] = []
    appendHeader(0x60, count: string.utf16.count, to: &out)
    for unit in string.utf16 {
      out.append(UInt8(unit >> 8))
      out.append(UInt8(unit & 0xFF))
    }
    return out
  }

  static func encodeScalar(_ value: PropertyListValue) throws(PropertyListError) -> [UInt8] {
    var out: [UInt8] = []
    switch value {
    case .bool(let flag):
      out.append(flag ? 0x09 : 0x08)
    case .integer(let integer):
      appendInteger(integer.value, to: &out)
    case .real(let real):
      out.append(0x23)
      appendBigEndian(real.bitPattern, size: 8, to: &out)
    case .date(let date):
      out.append(0x33)
      appendBigEndian(date.secondsSinceReferenceDate.bitPattern, size: 8, to: &out)
    case .data(let bytes):
      appendHeader(0x40, count: bytes.count, to: &out)
      out.append(contentsOf: bytes)
    case .string(let string):
      return encodeString(utf8: ArraySlice(string.utf8))
    case .uid:
      throw .unsupported("UID values cannot be written; they only appear in keyed archives read from elsewhere")
    case .array, .dictionary:
      preconditionFailure("containers are flattened, not encoded as scalars")
    }
    return out
  }

  /// Smallest integer encoding: unsigned 1/2/4 bytes for 0...UInt32.max, signed 8 bytes for
  /// the rest of Int64 (negatives included), signed 16 bytes beyond.
  static func appendInteger(_ value: Int128, to out: inout [UInt8]) {
    if value >= 0 && value <= 0xFF {
      out.append(0x10)
      appendBigEndian(UInt64(value), size: 1, to: &out)
    } else if value >= 0 && value <= 0xFFFF {
      out.append(0x11)
      appendBigEndian(UInt64(value), size: 2, to: &out)
    } else if value >= 0 && value <= 0xFFFF_FFFF {
      out.append(0x12)
      appendBigEndian(UInt64(value), size: 4, to: &out)
    } else if let small = Int64(exactly: value) {
      out.append(0x13)
      appendBigEndian(UInt64(bitPattern: small), size: 8, to: &out)
    } else {
      let bits = UInt128(bitPattern: value)
      out.append(0x14)
      appendBigEndian(UInt64(truncatingIfNeeded: bits >> 64), size: 8, to: &out)
      appendBigEndian(UInt64(truncatingIfNeeded: bits), size: 8, to: &out)
    }
  }

  /// Marker with the count in its low nibble, or nibble 0xF followed by an integer object.
  static func appendHeader(_ marker: UInt8, count: Int, to out: inout [UInt8]) {
    if count < 15 {
      out.append(marker | UInt8(count))
    } else {
      out.append(marker | 0x0F)
      appendInteger(Int128(count), to: &out)
    }
  }

  static func appendBigEndian(_ value: UInt64, size: Int, to out: inout [UInt8]) {
    for shift in stride(from: (size - 1) * 8, through: 0, by: -8) {
      out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
    }
  }

  /// Bytes (1, 2, 4 or 8) of an unsigned field that can hold `value`; used with the object
  /// count and the table offset, which bound every reference and offset (Python's rule).
  static func width(toHold value: Int) -> Int {
    if value < 1 << 8 { return 1 }
    if value < 1 << 16 { return 2 }
    if value < 1 << 32 { return 4 }
    return 8
  }

  /// The file (or, streaming, the rest of it: every object not written yet, the offset table and the trailer).
  func serialize() -> [UInt8] {
    let refSize = Self.width(toHold: objects.count)
    let streaming = streamFrom != Int.max
    var out = streaming ? [] : BinaryPropertyListReader.signature
    let base = streaming ? written : 0
    var size = 40
    for object in objects {
      switch object {
      case .scalar(let bytes): size += bytes.count + 8
      case .array(let refs): size += 10 + (refSize + 8) * refs.count
      case .dictionary(let keys, let values): size += 10 + (refSize + 8) * (keys.count + values.count)
      case .written: size += 8
      }
    }
    out.reserveCapacity(size)
    var offsets: [Int] = []
    offsets.reserveCapacity(objects.count)
    for object in objects {
      if case .written(let offset) = object {
        offsets.append(offset)
        continue
      }
      offsets.append(base + out.count)
      switch object {
      case .scalar(let bytes):
        out.append(contentsOf: bytes)
      case .array(let refs):
        Self.appendHeader(0xA0, count: refs.count, to: &out)
        for ref in refs { Self.appendBigEndian(UInt64(ref), size: refSize, to: &out) }
      case .dictionary(let keys, let values):
        Self.appendHeader(0xD0, count: keys.count, to: &out)
        for ref in keys { Self.appendBigEndian(UInt64(ref), size: refSize, to: &out) }
        for ref in values { Self.appendBigEndian(UInt64(ref), size: refSize, to: &out) }
      case .written:
        break
      }
    }
    let tableOffset = base + out.count
    // Sized by the table offset (as Python does), so every object offset fits.
    let offsetSize = Self.width(toHold: tableOffset)
    for offset in offsets { Self.appendBigEndian(UInt64(offset), size: offsetSize, to: &out) }
    out.append(contentsOf: [0, 0, 0, 0, 0, 0])  // unused, sort version
    out.append(UInt8(offsetSize))
    out.append(UInt8(refSize))
    Self.appendBigEndian(UInt64(objects.count), size: 8, to: &out)
    Self.appendBigEndian(0, size: 8, to: &out)  // top object
    Self.appendBigEndian(UInt64(tableOffset), size: 8, to: &out)
    return out
  }
}
