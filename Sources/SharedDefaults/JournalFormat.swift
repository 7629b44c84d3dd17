import PropertyList
import SystemLayer

/// The journal format, in one place: the records a suite appends between snapshots.
///
/// ```
/// record  := u32le payloadLength | u32le checksum(payload) | payload
/// payload := u8 op (1 set, 2 remove) | u32le pid | u32le keyLength | key (UTF-8) | value (set only)
/// value   := u8 tag | body
///   1 string  u32le length | UTF-8        6 date  f64 bits (seconds since 2001), le
///   2 integer 16 bytes, Int128 le          7 data  u32le length | bytes
///   3 real    f64 bits, le                 8 array u32le count | value*
///   4 false   5 true                       9 dict  u32le count | (u32le keyLength | key | value)*
/// ```
/// The checksum is FNV-1a-32 over the payload. A record is valid only if it lies entirely before the committed
/// length published in the suite's header; a torn record beyond it (a writer killed mid-append) is ignored and
/// overwritten by the next writer. Inside the committed length, any malformed record is corruption.
enum JournalFormat {
  static let headerBytes = 8
  static let maxRecordBytes = 64 << 20
  static let maxDepth = 256
  static let maxKeyBytes = 1 << 20

  enum Operation: Sendable, Equatable {
    case set(PropertyListValue)
    case remove
  }

  struct Record: Sendable, Equatable {
    var key: String
    var operation: Operation
    var pid: Int32

    /// A record of `key` in NFC (KeyNormalization.swift): what is written, and what is read back from a journal.
    init(key: String, operation: Operation, pid: Int32) {
      self.key = key.normalizedKey
      self.operation = operation
      self.pid = pid
    }
  }

  struct Corruption: Error, CustomStringConvertible {
    var offset: Int
    var reason: String
    var description: String { "journal record at byte \(offset): \(reason)" }
  }

  // MARK: Encoding

  /// Appends one encoded record to `out` (one buffer for a whole commit: no per-record allocation).
  static func encode(_ record: Record, into out: inout [UInt8]) throws(SharedDefaultsError) {
    let keyBytes = record.key.utf8.count
    guard keyBytes <= maxKeyBytes else {
      throw .invalidKey(String(record.key.prefix(32)) + "…", "it is longer than \(maxKeyBytes) bytes")
    }
    let start = out.count
    // Room for a data or string value too: growing the buffer for a record of a few hundred bytes (an activity's)
    // was a second allocation and a copy. Grown by doubling: `reserveCapacity` gives exactly what is asked, so
    // asking a little more for each record of a large commit copied the whole buffer each time (a 200,000-key
    // import took 4 times as long).
    var valueBytes = 32
    if case .set(let value) = record.operation {
      switch value {
      case .data(let data): valueBytes += data.count
      case .string(let string): valueBytes += string.utf8.count
      default: break
      }
    }
    let needed = start + headerBytes + valueBytes + keyBytes
    if needed > out.capacity { out.reserveCapacity(max(needed, 2 * out.capacity)) }
    append32(0, to: &out)  // length and checksum, patched below
    append32(0, to: &out)
    switch record.operation {
    case .set: out.append(1)
    case .remove: out.append(2)
    }
    append32(UInt32(bitPattern: record.pid), to: &out)
    append32(UInt32(keyBytes), to: &out)
    out.append(contentsOf: record.key.utf8)
    if case .set(let value) = record.operation { try encode(value, into: &out, depth: 0) }
    let length = out.count - start - headerBytes
    guard length <= maxRecordBytes - headerBytes else {
      out.removeSubrange(start...)
      throw .valueTooLarge(record.key, maxRecordBytes)
    }
    let sum = checksum(out[(start + headerBytes)...])
    for i in 0..<4 {
      out[start + i] = UInt8(truncatingIfNeeded: UInt32(length) >> (8 * i))
      out[start + 4 + i] = UInt8(truncatingIfNeeded: sum >> (8 * i))
    }
  }

  static func encode(_ record: Record) throws(SharedDefaultsError) -> [UInt8] {
    var out: [UInt8] = []
    try encode(record, into: &out)
    return out
  }

  /// Appends one encoded value (the `value` production above) to `out`: the suite image stores values this way.
  static func encodeValue(_ value: PropertyListValue, into out: inout [UInt8]) throws(SharedDefaultsError) {
    try encode(value, into: &out, depth: 0)
  }

  private static func encode(_ value: PropertyListValue, into out: inout [UInt8], depth: Int)
    throws(SharedDefaultsError)
  {
    guard depth < maxDepth else { throw .unsupportedValue("nesting deeper than \(maxDepth) levels") }
    switch value {
    case .string(let s):
      out.append(1)
      append32(UInt32(s.utf8.count), to: &out)
      out.append(contentsOf: s.utf8)
    case .integer(let i):
      out.append(2)
      let bits = UInt128(bitPattern: i.value)
      for shift in stride(from: 0, to: 128, by: 8) { out.append(UInt8(truncatingIfNeeded: bits >> shift)) }
    case .real(let d):
      out.append(3)
      append64(d.bitPattern, to: &out)
    case .bool(let b):
      out.append(b ? 5 : 4)
    case .date(let d):
      out.append(6)
      append64(d.secondsSinceReferenceDate.bitPattern, to: &out)
    case .data(let bytes):
      out.append(7)
      append32(UInt32(bytes.count), to: &out)
      out += bytes
    case .array(let elements):
      out.append(8)
      append32(UInt32(elements.count), to: &out)
      for element in elements { try encode(element, into: &out, depth: depth + 1) }
    case .dictionary(let dictionary):
      out.append(9)
      append32(UInt32(dictionary.count), to: &out)
      for (key, element) in dictionary {
        append32(UInt32(key.utf8.count), to: &out)
        out.append(contentsOf: key.utf8)
        try encode(element, into: &out, depth: depth + 1)
      }
    case .uid:
      throw .unsupportedValue("UID values (NSKeyedArchiver references) cannot be stored in defaults")
    }
  }

  // MARK: Decoding

  /// Decodes every record of `bytes` (the journal from `base`). Throws at the first malformed record, reporting
  /// its offset; `decoded` keeps the records before it.
  static func decode(
    _ bytes: [UInt8], base: Int, into decoded: inout [Record]
  ) throws(Corruption) {
    var offsets: [Int] = []
    try decode(bytes, base: base, into: &decoded, offsets: &offsets)
  }

  /// The same, also appending each record's journal offset to `offsets`.
  static func decode(
    _ bytes: [UInt8], base: Int, into decoded: inout [Record], offsets: inout [Int]
  ) throws(Corruption) {
    var offset = 0
    while offset < bytes.count {
      guard bytes.count - offset >= headerBytes else {
        throw Corruption(offset: base + offset, reason: "truncated header")
      }
      let length = Int(read32(bytes[...], offset))
      let sum = read32(bytes[...], offset + 4)
      guard length > 0, length <= maxRecordBytes, length <= bytes.count - offset - headerBytes else {
        throw Corruption(offset: base + offset, reason: "length \(length) runs past the committed journal")
      }
      let payload = bytes[(offset + headerBytes)..<(offset + headerBytes + length)]
      guard checksum(payload) == sum else { throw Corruption(offset: base + offset, reason: "checksum mismatch") }
      var reader = Reader(bytes: payload, base: base + offset + headerBytes)
      decoded.append(try reader.record())
      offsets.append(base + offset)
      offset += headerBytes + length
    }
  }

  /// The header's `lastRecord` word after a commit of `bytes` (whole records, as `encode` writes them): the last
  /// record's checksum, with bit 32 set.
  static func lastRecordWord(of bytes: [UInt8]) -> UInt64 {
    var offset = 0
    var last = 0
    while bytes.count - offset >= headerBytes {
      last = offset
      offset += headerBytes + Int(read32(bytes[...], offset))
    }
    guard bytes.count - last >= headerBytes else { return 0 }
    return 1 << 32 | UInt64(read32(bytes[...], last + 4))
  }

  /// Whether `bytes` are intact records, the last of which the header's `lastRecord` word `word` names: the
  /// committed bytes of the journal that header describes (a copy of it, when found under another inode).
  static func areCommitted(_ bytes: [UInt8], lastRecord word: UInt64) -> Bool {
    guard word >> 32 == 1, !bytes.isEmpty else { return false }
    var records: [Record] = []
    do { try decode(bytes, base: 0, into: &records) } catch { return false }
    return lastRecordWord(of: bytes) == word
  }

  /// Walks the records in `start..<end` of mapped journal bytes at `base`, reading only each header and key (no
  /// checksum, no value): `body` gets each record's offset, payload length and key bytes, and returns false to stop.
  /// False when the bytes are not records (a length that runs past `end`): the caller reads them properly instead.
  /// For scans that must not decode (observers' keys, a lazy tail's lookup).
  static func forEachKey(
    in base: UnsafeRawPointer, from start: Int, to end: Int,
    _ body: (_ offset: Int, _ length: Int, _ key: UnsafeRawBufferPointer) -> Bool
  ) -> Bool {
    var offset = start
    // A record: u32 length, u32 checksum, then op (1 byte), pid (4), key length (4), key.
    while offset < end {
      guard end - offset >= headerBytes + 9 else { return false }
      let length = Int(base.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
      let keyLength = Int(base.loadUnaligned(fromByteOffset: offset + headerBytes + 5, as: UInt32.self).littleEndian)
      guard length >= 9 + keyLength, length <= end - offset - headerBytes else { return false }
      guard body(offset, length, UnsafeRawBufferPointer(start: base + offset + headerBytes + 9, count: keyLength))
      else { return true }
      offset += headerBytes + length
    }
    return true
  }

  /// Decodes one value that must fill `bytes` exactly (offsets in errors are relative to `bytes.startIndex`).
  static func decodeValue(_ bytes: ArraySlice<UInt8>) throws(Corruption) -> PropertyListValue {
    var reader = Reader(bytes: bytes, base: 0)
    let value = try reader.value(depth: 0)
    guard reader.position == bytes.endIndex else {
      throw Corruption(offset: reader.position - bytes.startIndex, reason: "trailing bytes after the value")
    }
    return value
  }

  struct Reader {
    let bytes: ArraySlice<UInt8>
    let base: Int
    var position: Int

    init(bytes: ArraySlice<UInt8>, base: Int) {
      self.bytes = bytes
      self.base = base
      position = bytes.startIndex
    }

    private func fail(_ reason: String) -> Corruption {
      Corruption(offset: base + (position - bytes.startIndex), reason: reason)
    }

    mutating func byte() throws(Corruption) -> UInt8 {
      guard position < bytes.endIndex else { throw fail("unexpected end of record") }
      defer { position += 1 }
      return bytes[position]
    }

    mutating func u32() throws(Corruption) -> UInt32 {
      guard bytes.endIndex - position >= 4 else { throw fail("unexpected end of record") }
      defer { position += 4 }
      return JournalFormat.read32(bytes, position)
    }

    mutating func u64() throws(Corruption) -> UInt64 {
      let low = UInt64(try u32())
      return low | UInt64(try u32()) << 32
    }

    mutating func take(_ count: Int) throws(Corruption) -> ArraySlice<UInt8> {
      guard count >= 0, bytes.endIndex - position >= count else {
        throw fail("a length of \(count) runs past the record")
      }
      defer { position += count }
      return bytes[position..<(position + count)]
    }

    mutating func string() throws(Corruption) -> String {
      let raw = try take(Int(try u32()))
      guard let s = String(validating: raw, as: UTF8.self) else { throw fail("invalid UTF-8") }
      return s
    }

    mutating func record() throws(Corruption) -> Record {
      let op = try byte()
      let pid = Int32(bitPattern: try u32())
      let key = try string()
      switch op {
      case 1:
        let value = try self.value(depth: 0)
        guard position == bytes.endIndex else { throw fail("trailing bytes after the value") }
        return Record(key: key, operation: .set(value), pid: pid)
      case 2:
        guard position == bytes.endIndex else { throw fail("trailing bytes after a remove") }
        return Record(key: key, operation: .remove, pid: pid)
      default:
        throw fail("unknown operation \(op)")
      }
    }

    mutating func value(depth: Int) throws(Corruption) -> PropertyListValue {
      guard depth < JournalFormat.maxDepth else { throw fail("nesting deeper than \(JournalFormat.maxDepth)") }
      let tag = try byte()
      switch tag {
      case 1: return .string(try string())
      case 2:
        let raw = try take(16)
        var bits: UInt128 = 0
        for (i, b) in raw.enumerated() { bits |= UInt128(b) << (8 * i) }
        return .integer(PropertyListInteger(Int128(bitPattern: bits)))
      case 3: return .real(Double(bitPattern: try u64()))
      case 4: return .bool(false)
      case 5: return .bool(true)
      case 6: return .date(PropertyListDate(secondsSinceReferenceDate: Double(bitPattern: try u64())))
      case 7: return .data(Array(try take(Int(try u32()))))
      case 8:
        let count = Int(try u32())
        // Each element takes at least one byte: a count beyond what is left is a lie, not a big array.
        guard count <= bytes.endIndex - position else { throw fail("array count \(count) exceeds the record") }
        var elements: [PropertyListValue] = []
        elements.reserveCapacity(count)
        for _ in 0..<count { elements.append(try value(depth: depth + 1)) }
        return .array(elements)
      case 9:
        let count = Int(try u32())
        guard count <= (bytes.endIndex - position) / 5 else {
          throw fail("dictionary count \(count) exceeds the record")
        }
        var dictionary: [String: PropertyListValue] = [:]
        dictionary.reserveCapacity(count)
        for _ in 0..<count {
          let key = try string()
          dictionary[key] = try value(depth: depth + 1)
        }
        return .dictionary(dictionary)
      default:
        throw fail("unknown value tag \(tag)")
      }
    }
  }

  // MARK: Helpers

  /// Over the contiguous bytes: the generic `Sequence` form was not specialized across modules, and iterating an
  /// `ArraySlice` generically was most of a set's cost.
  static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
    bytes.withUnsafeBytes { StableHash.fnv1a32($0) }
  }

  @inline(__always) static func append32(_ v: UInt32, to out: inout [UInt8]) {
    out.append(UInt8(truncatingIfNeeded: v))
    out.append(UInt8(truncatingIfNeeded: v >> 8))
    out.append(UInt8(truncatingIfNeeded: v >> 16))
    out.append(UInt8(truncatingIfNeeded: v >> 24))
  }

  @inline(__always) static func append64(_ v: UInt64, to out: inout [UInt8]) {
    append32(UInt32(truncatingIfNeeded: v), to: &out)
    append32(UInt32(truncatingIfNeeded: v >> 32), to: &out)
  }

  /// A little-endian u32 at absolute index `at` (slices share their base's indices).
  @inline(__always) static func read32(_ bytes: ArraySlice<UInt8>, _ at: Int) -> UInt32 {
    UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
  }
}
