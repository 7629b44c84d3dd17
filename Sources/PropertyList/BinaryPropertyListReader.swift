/// Reads Apple's binary property list format, `bplist00`.
///
/// Built for untrusted input: every offset, size and count is checked against the file before
/// use, nothing is allocated before its size is known to fit, reference cycles are rejected,
/// and objects shared many times are decoded once (memoized) while their cost is still counted
/// per reference against `PropertyListLimits`, so crafted files cannot blow up time or memory.
///
/// Layout: 8-byte header `bplist00`, the objects, an offset table (one big-endian offset per
/// object), and a 32-byte trailer: 6 unused bytes, offset-int size, object-ref size, then
/// object count, top object index and offset-table offset as big-endian 64-bit integers.
public enum BinaryPropertyListReader {
  /// The eight bytes every binary property list starts with.
  public static let signature: [UInt8] = Array("bplist00".utf8)

  /// Parses a `bplist00` file. Throws `PropertyListError` (never traps) on any malformed input.
  public static func read(_ bytes: some Collection<UInt8>, limits: PropertyListLimits = .default)
    throws(PropertyListError) -> PropertyListValue
  {
    let buffer = try limits.checkedInput(bytes)
    var parser = try BinaryParser(bytes: buffer, limits: limits)
    return try parser.parseDocument()
  }
}

/// One parse of one binary file.
private struct BinaryParser {
  /// A decoded object with the cost of its whole subtree, so a shared object can be reused
  /// by later references while still being charged against the limits each time.
  struct Decoded {
    var value: PropertyListValue
    /// Values in the subtree, the object itself included.
    var nodes: Int
    /// String and data bytes in the subtree.
    var payload: Int
    /// Container nesting of the subtree: 0 for scalars, 1 for an empty array, ...
    var height: Int
  }

  static let headerSize = 8
  static let trailerSize = 32

  let bytes: [UInt8]
  let limits: PropertyListLimits
  let offsetIntSize: Int
  let objectRefSize: Int
  let objectCount: Int
  let topObject: Int
  /// Start of the offset table, which is also the end of the object area.
  let offsetTableOffset: Int

  /// Decoded containers, strings and data by object index: a container referenced again is not decoded again
  /// (nested sharing would otherwise cost exponential time), and a long string or data object referenced by many
  /// keys is one buffer in memory, not a copy per key. Small scalars are not kept: decoding one again costs what
  /// looking it up would, and keeping every one was a third of the time of reading a million-key dictionary.
  var cache: [Int: Decoded] = [:]
  static let sharedPayload = 64
  /// Objects on the current path from the top object; meeting one again means a cycle.
  var onPath: [Bool]

  init(bytes: [UInt8], limits: PropertyListLimits) throws(PropertyListError) {
    let size = bytes.count
    let minimumSize = Self.headerSize + 1 + Self.trailerSize
    guard bytes.starts(with: BinaryPropertyListReader.signature) else {
      if bytes.starts(with: Array("bplist".utf8)) {
        throw .binary("unsupported binary property list version (only 'bplist00' is supported)", at: 6)
      }
      throw .binary("missing 'bplist00' signature", at: 0)
    }
    guard size >= minimumSize else {
      throw .binary(
        "file of \(size) bytes is too short for a binary property list (at least \(minimumSize) needed)", at: size)
    }
    let trailer = size - Self.trailerSize
    let offsetIntSize = Int(bytes[trailer + 6])
    let objectRefSize = Int(bytes[trailer + 7])
    guard (1...8).contains(offsetIntSize) else {
      throw .binary("trailer offset-int size \(offsetIntSize) is not in 1...8", at: trailer + 6)
    }
    guard (1...8).contains(objectRefSize) else {
      throw .binary("trailer object-ref size \(objectRefSize) is not in 1...8", at: trailer + 7)
    }
    let rawCount = Self.bigEndian(bytes, at: trailer + 8, size: 8)
    let rawTop = Self.bigEndian(bytes, at: trailer + 16, size: 8)
    let rawTable = Self.bigEndian(bytes, at: trailer + 24, size: 8)

    guard rawCount >= 1 else {
      throw .binary("trailer declares no objects", at: trailer + 8)
    }
    // Every object takes at least one byte, so more objects than bytes is impossible.
    guard rawCount <= UInt64(size) else {
      throw .binary("trailer declares \(rawCount) objects, more than the \(size)-byte file can hold", at: trailer + 8)
    }
    guard rawCount <= UInt64(max(limits.maxObjects, 0)) else {
      throw .limit("trailer declares \(rawCount) objects, more than the limit of \(limits.maxObjects)", at: trailer + 8)
    }
    if objectRefSize < 8 {
      let addressable = UInt64(1) << UInt64(8 * objectRefSize)
      guard rawCount <= addressable else {
        throw .binary(
          "\(rawCount) objects cannot be addressed with \(objectRefSize)-byte object references", at: trailer + 7)
      }
    }
    guard rawTop < rawCount else {
      throw .binary("top object index \(rawTop) is out of range (\(rawCount) objects)", at: trailer + 16)
    }
    guard rawTable >= UInt64(Self.headerSize + 1), rawTable < UInt64(trailer) else {
      throw .binary(
        "offset table offset \(rawTable) is outside the file area \(Self.headerSize + 1)..<\(trailer)", at: trailer + 24
      )
    }
    // All three fit in Int now: they are bounded by the file size.
    let count = Int(rawCount)
    let table = Int(rawTable)
    guard count <= (trailer - table) / offsetIntSize else {
      throw .binary(
        "offset table of \(count) \(offsetIntSize)-byte entries at \(table) runs into the trailer", at: trailer + 24)
    }
    self.bytes = bytes
    self.limits = limits
    self.offsetIntSize = offsetIntSize
    self.objectRefSize = objectRefSize
    self.objectCount = count
    self.topObject = Int(rawTop)
    self.offsetTableOffset = table
    self.onPath = Array(repeating: false, count: count)
  }

  mutating func parseDocument() throws(PropertyListError) -> PropertyListValue {
    let decoded = try parseObject(topObject, depth: 0, referencedAt: bytes.count - Self.trailerSize + 16)
    return decoded.value
  }

  // MARK: Raw reads

  /// Big-endian unsigned integer of `size` (1...8) bytes; the caller has checked the range.
  static func bigEndian(_ bytes: [UInt8], at offset: Int, size: Int) -> UInt64 {
    var result: UInt64 = 0
    for index in offset..<(offset + size) {
      result = result << 8 | UInt64(bytes[index])
    }
    return result
  }

  /// Bounds-checked big-endian read within the object area.
  func readUnsigned(at offset: Int, size: Int, what: String) throws(PropertyListError) -> UInt64 {
    guard offset >= 0, offset <= offsetTableOffset, size <= offsetTableOffset - offset else {
      throw .binary("\(what) of \(size) bytes runs past the end of the object area (\(offsetTableOffset))", at: offset)
    }
    return Self.bigEndian(bytes, at: offset, size: size)
  }

  /// File offset of object `ref`, checked to lie inside the object area.
  func objectOffset(_ ref: Int) throws(PropertyListError) -> Int {
    let entry = offsetTableOffset + ref * offsetIntSize  // ref < objectCount: inside the table
    let raw = Self.bigEndian(bytes, at: entry, size: offsetIntSize)
    guard raw >= UInt64(Self.headerSize), raw < UInt64(offsetTableOffset) else {
      throw .binary(
        "object \(ref) has offset \(raw), outside the object area \(Self.headerSize)..<\(offsetTableOffset)", at: entry)
    }
    return Int(raw)
  }

  /// Reads an object reference stored at `offset` and checks it names an existing object.
  func objectReference(at offset: Int) throws(PropertyListError) -> Int {
    let raw = try readUnsigned(at: offset, size: objectRefSize, what: "object reference")
    guard raw < UInt64(objectCount) else {
      throw .binary("object reference \(raw) is out of range (\(objectCount) objects)", at: offset)
    }
    return Int(raw)
  }

  /// Element count of a data/string/array/dictionary object whose marker is at `offset`:
  /// the marker's low nibble, or for 0xF a following integer object. Returns the count and
  /// where the content starts.
  func count(marker: UInt8, at offset: Int) throws(PropertyListError) -> (count: Int, start: Int) {
    let nibble = Int(marker & 0x0F)
    if nibble != 0x0F { return (nibble, offset + 1) }
    let intMarkerOffset = offset + 1
    guard intMarkerOffset < offsetTableOffset else {
      throw .binary("object with marker \(hexByte(marker)) is missing its length integer", at: intMarkerOffset)
    }
    let intMarker = bytes[intMarkerOffset]
    guard intMarker >> 4 == 0x1, intMarker & 0x0F <= 3 else {
      throw .binary(
        "length of object with marker \(hexByte(marker)) must be an integer of 1, 2, 4 or 8 bytes, found marker \(hexByte(intMarker))",
        at: intMarkerOffset)
    }
    let size = 1 << Int(intMarker & 0x0F)
    let raw = try readUnsigned(at: intMarkerOffset + 1, size: size, what: "length integer")
    // 8-byte integers are signed in this format, so the top bit means a negative length.
    guard raw <= UInt64(Int64.max) else {
      throw .binary("negative length for object with marker \(hexByte(marker))", at: intMarkerOffset)
    }
    return (Int(raw), intMarkerOffset + 1 + size)
  }

  /// Bytes left in the object area from `offset`.
  func remaining(from offset: Int) -> Int {
    offsetTableOffset - offset
  }

  // MARK: Objects

  mutating func parseObject(_ ref: Int, depth: Int, referencedAt referenceOffset: Int) throws(PropertyListError)
    -> Decoded
  {
    if !cache.isEmpty, let cached = cache[ref] {
      guard depth + cached.height <= limits.maxDepth else {
        throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: referenceOffset)
      }
      return cached
    }
    guard !onPath[ref] else {
      throw .binary("object \(ref) contains itself (reference cycle)", at: referenceOffset)
    }
    let offset = try objectOffset(ref)
    let marker = bytes[offset]
    let decoded: Decoded
    switch marker >> 4 {
    case 0x0:
      switch marker {
      case 0x08: decoded = Decoded(value: .bool(false), nodes: 1, payload: 0, height: 0)
      case 0x09: decoded = Decoded(value: .bool(true), nodes: 1, payload: 0, height: 0)
      case 0x00: throw .binary("null objects (marker 0x00) cannot be represented", at: offset)
      default: throw .binary("unknown object marker \(hexByte(marker))", at: offset)
      }
    case 0x1:
      decoded = scalar(.integer(try integer(marker: marker, at: offset)))
    case 0x2:
      decoded = scalar(.real(try real(marker: marker, at: offset)))
    case 0x3:
      guard marker == 0x33 else {
        throw .binary("date marker \(hexByte(marker)) must be 0x33 (8-byte float)", at: offset)
      }
      let bits = try readUnsigned(at: offset + 1, size: 8, what: "date")
      decoded = scalar(.date(PropertyListDate(secondsSinceReferenceDate: Double(bitPattern: bits))))
    case 0x4:
      let (length, start) = try count(marker: marker, at: offset)
      guard length <= remaining(from: start) else {
        throw .binary("data of \(length) bytes runs past the end of the object area", at: offset)
      }
      decoded = Decoded(value: .data(Array(bytes[start..<(start + length)])), nodes: 1, payload: length, height: 0)
    case 0x5:
      let (length, start) = try count(marker: marker, at: offset)
      guard length <= remaining(from: start) else {
        throw .binary("ASCII string of \(length) bytes runs past the end of the object area", at: offset)
      }
      let slice = bytes[start..<(start + length)]
      if let bad = slice.firstIndex(where: { $0 >= 0x80 }) {
        throw .binary("ASCII string contains non-ASCII byte \(hexByte(bytes[bad]))", at: bad)
      }
      decoded = Decoded(value: .string(String(decoding: slice, as: UTF8.self)), nodes: 1, payload: length, height: 0)
    case 0x6:
      let (units, start) = try count(marker: marker, at: offset)
      guard units <= remaining(from: start) / 2 else {
        throw .binary("UTF-16 string of \(units) code units runs past the end of the object area", at: offset)
      }
      let string = try utf16String(start: start, units: units)
      decoded = Decoded(value: .string(string), nodes: 1, payload: units * 2, height: 0)
    case 0x8:
      let size = Int(marker & 0x0F) + 1
      guard size <= 8 else {
        throw .binary("UID of \(size) bytes is larger than 8 bytes", at: offset)
      }
      decoded = scalar(.uid(try readUnsigned(at: offset + 1, size: size, what: "UID")))
    case 0xA:
      decoded = try array(ref, marker: marker, at: offset, depth: depth)
    case 0xD:
      decoded = try dictionary(ref, marker: marker, at: offset, depth: depth)
    case 0xB, 0xC:
      throw .binary("sets and ordered sets (marker \(hexByte(marker))) are not supported", at: offset)
    default:
      throw .binary("unknown object marker \(hexByte(marker))", at: offset)
    }
    if decoded.height > 0 || decoded.payload >= Self.sharedPayload { cache[ref] = decoded }
    return decoded
  }

  func scalar(_ value: PropertyListValue) -> Decoded {
    Decoded(value: value, nodes: 1, payload: 0, height: 0)
  }

  func integer(marker: UInt8, at offset: Int) throws(PropertyListError) -> PropertyListInteger {
    switch marker & 0x0F {
    case 0, 1, 2:
      // 1, 2 and 4-byte integers are unsigned.
      let raw = try readUnsigned(at: offset + 1, size: 1 << Int(marker & 0x0F), what: "integer")
      return PropertyListInteger(Int128(raw))
    case 3:
      let raw = try readUnsigned(at: offset + 1, size: 8, what: "integer")
      return PropertyListInteger(Int128(Int64(bitPattern: raw)))
    case 4:
      // 16-byte integers are signed two's complement; Apple and Python write unsigned
      // 64-bit values above Int64.max this way.
      let high = try readUnsigned(at: offset + 1, size: 8, what: "128-bit integer")
      let low = try readUnsigned(at: offset + 9, size: 8, what: "128-bit integer")
      return PropertyListInteger(Int128(bitPattern: UInt128(high) << 64 | UInt128(low)))
    default:
      throw .binary("integer marker \(hexByte(marker)) has an invalid size (only 1, 2, 4, 8 or 16 bytes)", at: offset)
    }
  }

  func real(marker: UInt8, at offset: Int) throws(PropertyListError) -> Double {
    switch marker {
    case 0x22:
      let raw = try readUnsigned(at: offset + 1, size: 4, what: "real")
      return Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw)))
    case 0x23:
      return Double(bitPattern: try readUnsigned(at: offset + 1, size: 8, what: "real"))
    default:
      throw .binary("real marker \(hexByte(marker)) has an invalid size (only 4 or 8 bytes)", at: offset)
    }
  }

  /// Decodes big-endian UTF-16, rejecting unpaired surrogates.
  func utf16String(start: Int, units: Int) throws(PropertyListError) -> String {
    var scalars = String.UnicodeScalarView()
    var index = start
    let end = start + 2 * units
    while index < end {
      let unit = UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1])
      if unit < 0xD800 || unit > 0xDFFF {
        // Not a surrogate: always a valid scalar.
        if let scalar = Unicode.Scalar(UInt32(unit)) { scalars.append(scalar) }
        index += 2
        continue
      }
      guard unit <= 0xDBFF, index + 4 <= end else {
        throw .binary("invalid UTF-16 in string: unpaired surrogate \(unit)", at: index)
      }
      let next = UInt16(bytes[index + 2]) << 8 | UInt16(bytes[index + 3])
      guard (0xDC00...0xDFFF).contains(next) else {
        throw .binary("invalid UTF-16 in string: high surrogate not followed by a low surrogate", at: index)
      }
      let value = 0x10000 + (UInt32(unit - 0xD800) << 10 | UInt32(next - 0xDC00))
      guard let scalar = Unicode.Scalar(value) else {
        throw .binary("invalid UTF-16 in string", at: index)
      }
      scalars.append(scalar)
      index += 4
    }
    return String(scalars)
  }

  /// Adds a child's cost to a container's running totals, enforcing the limits.
  func accumulate(_ child: Decoded, into total: inout Decoded, at offset: Int) throws(PropertyListError) {
    let (nodes, nodesOverflow) = total.nodes.addingReportingOverflow(child.nodes)
    guard !nodesOverflow, nodes <= limits.maxObjects else {
      throw .limit(
        "decoded value has more than \(limits.maxObjects) objects (shared objects count once per reference)", at: offset
      )
    }
    let (payload, payloadOverflow) = total.payload.addingReportingOverflow(child.payload)
    guard !payloadOverflow, payload <= limits.maxBytes else {
      throw .limit(
        "decoded strings and data exceed the limit of \(limits.maxBytes) bytes (shared objects count once per reference)",
        at: offset)
    }
    total.nodes = nodes
    total.payload = payload
    total.height = max(total.height, child.height + 1)
  }

  mutating func array(_ ref: Int, marker: UInt8, at offset: Int, depth: Int) throws(PropertyListError) -> Decoded {
    let (count, start) = try count(marker: marker, at: offset)
    guard count <= remaining(from: start) / objectRefSize else {
      throw .binary(
        "array of \(count) elements needs \(objectRefSize)-byte references beyond the end of the object area",
        at: offset)
    }
    guard depth < limits.maxDepth else {
      throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: offset)
    }
    onPath[ref] = true
    defer { onPath[ref] = false }
    var total = Decoded(value: .bool(false), nodes: 1, payload: 0, height: 1)
    var elements: [PropertyListValue] = []
    elements.reserveCapacity(count)
    for index in 0..<count {
      let referenceOffset = start + index * objectRefSize
      let childRef = try objectReference(at: referenceOffset)
      let child = try parseObject(childRef, depth: depth + 1, referencedAt: referenceOffset)
      try accumulate(child, into: &total, at: referenceOffset)
      elements.append(child.value)
    }
    total.value = .array(elements)
    return total
  }

  mutating func dictionary(_ ref: Int, marker: UInt8, at offset: Int, depth: Int) throws(PropertyListError) -> Decoded {
    let (count, start) = try count(marker: marker, at: offset)
    guard count <= remaining(from: start) / objectRefSize / 2 else {
      throw .binary(
        "dictionary of \(count) entries needs \(objectRefSize)-byte references beyond the end of the object area",
        at: offset)
    }
    guard depth < limits.maxDepth else {
      throw .limit("nesting deeper than the limit of \(limits.maxDepth)", at: offset)
    }
    onPath[ref] = true
    defer { onPath[ref] = false }
    var total = Decoded(value: .bool(false), nodes: 1, payload: 0, height: 1)
    var entries: [String: PropertyListValue] = Dictionary(minimumCapacity: count)
    let valuesStart = start + count * objectRefSize
    for index in 0..<count {
      let keyReferenceOffset = start + index * objectRefSize
      let keyRef = try objectReference(at: keyReferenceOffset)
      // Check the key's kind before decoding it, so a container key is never descended into.
      let keyOffset = try objectOffset(keyRef)
      let keyMarker = bytes[keyOffset] >> 4
      guard keyMarker == 0x5 || keyMarker == 0x6 else {
        throw .binary(
          "dictionary key (object \(keyRef), marker \(hexByte(bytes[keyOffset]))) is not a string",
          at: keyReferenceOffset)
      }
      let key = try parseObject(keyRef, depth: depth + 1, referencedAt: keyReferenceOffset)
      guard case .string(let keyString) = key.value else {
        throw .binary("dictionary key (object \(keyRef)) is not a string", at: keyReferenceOffset)
      }
      try accumulate(key, into: &total, at: keyReferenceOffset)

      let valueReferenceOffset = valuesStart + index * objectRefSize
      let valueRef = try objectReference(at: valueReferenceOffset)
      let value = try parseObject(valueRef, depth: depth + 1, referencedAt: valueReferenceOffset)
      try accumulate(value, into: &total, at: valueReferenceOffset)
      // As with Apple's and Python's readers, a repeated key keeps the last value.
      entries[keyString] = value.value
    }
    total.value = .dictionary(entries)
    return total
  }
}
