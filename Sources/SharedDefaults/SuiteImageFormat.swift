import PropertyList
import SystemLayer

/// The suite image format, in one place: an immutable, indexed file holding a whole suite, which a process maps
/// read-only and looks keys up in lazily (a first read is O(1); memory grows with what is read). Read here
/// (`SuiteImage`), written by `SuiteImageBuilder` (SuiteImageBuilder.swift).
///
/// ```
/// header (80 bytes, little-endian)
///    0 magic "GCIMAGE1"     8 bytes
///    8 u64 generation       the journal generation the image belongs to
///   16 u64 position         the journal length it holds (records before it are in it)
///   24 u32 entryCount
///   28 u32 slotCount        a power of two, >= 8, >= 2 * entryCount
///   32 u64 valuesOffset     = 80 + 8 * slotCount (the index ends where the values start)
///   40 u64 entriesOffset    >= valuesOffset
///   48 u64 fileLength       the file's size, at most 4 GiB (every offset is a u32)
///   56 u64 objects          property-list objects of the suite: the root dictionary, each key, each value,
///                           recursively (what DefaultsStore.checkLimits counts)
///   64 u64 payloadBytes     bytes of strings, data and keys (the same count)
///   72 u32 checksum         FNV-1a-32 of bytes 0..<72
///   76 u32 0
/// index at 80: slotCount slots of 8 bytes
///   slot  := u32 hash | u32 entryOffset      entryOffset 0: empty slot
///   hash = FNV-1a-32 of the key's UTF-8 bytes (0 made 1); open addressing, linear probing from hash % slotCount
/// values region [valuesOffset, entriesOffset): values in the journal's value encoding (`JournalFormat`), back to
///   back; a value of 64 bytes or more is stored once however many entries hold it
/// entries region [entriesOffset, fileLength): entryCount entries, back to back
///   entry := u32 keyLength | key (UTF-8) | u32 valueOffset (absolute) | u32 valueLength
/// ```
/// Keys are compared as bytes, and are in NFC: the engine normalizes every key before it reaches an image
/// (KeyNormalization.swift), so an NFC and an NFD spelling find the same entry. Offsets are
/// absolute; a reader checks each one against its region before using it, so a damaged or crafted image throws
/// `SuiteImage.Corruption` and never reads outside the file.
enum SuiteImageFormat {
  static let magic: UInt64 = 0x3145_4741_4d49_4347  // "GCIMAGE1"
  static let headerBytes = 80
  static let slotBytes = 8
  static let minSlots = 8
  /// keyLength + valueOffset + valueLength.
  static let entryFixedBytes = 12
  /// Values this long or longer are deduplicated (smaller ones cost less than the lookup).
  static let dedupMinBytes = 64
  /// u32 offsets: no byte of an image lies past this.
  static let maxFileLength = Int(UInt32.max)

  /// The index hash of a key's bytes (never 0, which marks nothing: an empty slot is told by its offset).
  @inline(__always) static func hash(_ key: UnsafeRawBufferPointer) -> UInt32 {
    let h = StableHash.fnv1a32(key)
    return h == 0 ? 1 : h
  }

  /// The index size for `entries` keys: at most half full, so probes stay short.
  static func slotCount(for entries: Int) -> Int {
    var slots = minSlots
    while slots < 2 * entries { slots <<= 1 }
    return slots
  }

  /// A content hash for dedup: 8 bytes a step (a byte-wise FNV over every 4 KB value was most of a build's time);
  /// equal hashes are confirmed with memcmp, so its quality only decides how often a saving is missed.
  static func contentHash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(bytes.count)
    var i = 0
    while bytes.count - i >= 8 {
      h = (h ^ bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0x0000_0100_0000_01b3
      h ^= h >> 29
      i += 8
    }
    while i < bytes.count {
      h = (h ^ UInt64(bytes[i])) &* 0x0000_0100_0000_01b3
      i += 1
    }
    return h
  }

  /// Calls `body` with the UTF-8 bytes of `key`, without copying a native string.
  @inline(__always) static func withBytes<R>(
    of key: String, _ body: (UnsafeRawBufferPointer) throws(SuiteImage.Corruption) -> R
  )
    throws(SuiteImage.Corruption) -> R
  {
    let result: Result<R, SuiteImage.Corruption>? = key.utf8.withContiguousStorageIfAvailable { buffer in
      do throws(SuiteImage.Corruption) { return .success(try body(UnsafeRawBufferPointer(buffer))) } catch {
        return .failure(error)
      }
    }
    if let result { return try result.get() }
    var copy = key
    return try copy.withUTF8 { buffer in
      Result { () throws(SuiteImage.Corruption) in try body(UnsafeRawBufferPointer(buffer)) }
    }.get()
  }

  @inline(__always) static func load32(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
    UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
  }

  @inline(__always) static func load64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
    UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
  }

  @inline(__always) static func store32(_ value: UInt32, _ bytes: UnsafeMutableRawBufferPointer, _ offset: Int) {
    bytes.storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt32.self)
  }

  @inline(__always) static func store64(_ value: UInt64, _ bytes: UnsafeMutableRawBufferPointer, _ offset: Int) {
    bytes.storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt64.self)
  }

  /// What one encoded value counts for the suite's limits: objects (itself and what it holds, dictionary keys
  /// included) and payload bytes (strings, data, dictionary keys). Walks the encoding without building the value,
  /// so a raw copy costs no decoding; checks the structure (tags, lengths, counts, depth) on the way.
  static func measure(_ bytes: UnsafeRawBufferPointer, from start: Int, count: Int) throws(SuiteImage.Corruption)
    -> (objects: Int, payload: Int)
  {
    var walker = Walker(bytes: bytes, position: start, end: start + count)
    try walker.value(depth: 0)
    guard walker.position == walker.end else {
      throw SuiteImage.Corruption(offset: walker.position, reason: "trailing bytes after the value")
    }
    return (walker.objects, walker.payload)
  }

  private struct Walker {
    let bytes: UnsafeRawBufferPointer
    var position: Int
    let end: Int
    var objects = 0
    var payload = 0

    init(bytes: UnsafeRawBufferPointer, position: Int, end: Int) {
      self.bytes = bytes
      self.position = position
      self.end = end
    }

    private func fail(_ reason: String) -> SuiteImage.Corruption {
      SuiteImage.Corruption(offset: position, reason: reason)
    }

    private mutating func skip(_ count: Int) throws(SuiteImage.Corruption) {
      guard count <= end - position else { throw fail("a length of \(count) runs past the value") }
      position += count
    }

    private mutating func u32() throws(SuiteImage.Corruption) -> Int {
      guard end - position >= 4 else { throw fail("unexpected end of value") }
      defer { position += 4 }
      return Int(SuiteImageFormat.load32(bytes, position))
    }

    mutating func value(depth: Int) throws(SuiteImage.Corruption) {
      guard depth < JournalFormat.maxDepth else { throw fail("nesting deeper than \(JournalFormat.maxDepth)") }
      guard position < end else { throw fail("unexpected end of value") }
      let tag = bytes[position]
      position += 1
      objects += 1
      switch tag {
      case 1, 7:
        let length = try u32()
        try skip(length)
        payload += length
      case 2: try skip(16)
      case 3, 6: try skip(8)
      case 4, 5: break
      case 8:
        let count = try u32()
        guard count <= end - position else { throw fail("array count \(count) exceeds the value") }
        for _ in 0..<count { try value(depth: depth + 1) }
      case 9:
        let count = try u32()
        guard count <= (end - position) / 5 else { throw fail("dictionary count \(count) exceeds the value") }
        for _ in 0..<count {
          let length = try u32()
          try skip(length)
          objects += 1
          payload += length
          try value(depth: depth + 1)
        }
      default:
        position -= 1
        throw fail("unknown value tag \(tag)")
      }
    }
  }
}

// MARK: - Reader

/// A suite image, read in place: a read-only mapping of an image file, or a copy of image bytes.
///
/// `init` checks the header only (O(1)); every lookup checks the offsets it follows, so a damaged image fails
/// the lookups that reach the damage (throwing `Corruption`), never the process. `validate()` checks it all.
/// A mapped file truncated by someone meanwhile reads as zeros and raises `faultCount` (see `MappedFile`).
final class SuiteImage: @unchecked Sendable {  // immutable after init: read-only bytes, owned by `mapping`/`owned`
  /// Why the image cannot be trusted, and at which byte of it.
  struct Corruption: Error, CustomStringConvertible, Sendable {
    /// The byte of the image where the problem was found.
    var offset: Int
    /// What is wrong there.
    var reason: String
    /// "suite image at byte N: reason".
    var description: String { "suite image at byte \(offset): \(reason)" }
  }

  /// Why `init(mapping:)` failed: the file could not be mapped (`system`: not a regular file, over 1 GiB, an
  /// mmap error), or it is not a valid image (`corrupt`: its header is damaged or is not an image's).
  enum OpenError: Error, CustomStringConvertible, Sendable {
    case corrupt(Corruption)
    case system(FileSystemError)

    var description: String {
      switch self {
      case .corrupt(let corruption): corruption.description
      case .system(let error): error.description
      }
    }
  }

  /// One entry's place in the image (from `forEachEntry`): where its key and its value lie.
  struct Entry: Sendable, Equatable {
    /// Where the entry starts (its keyLength field).
    var offset: Int
    /// The key's UTF-8 bytes start at `offset + 4`.
    var keyLength: Int
    /// Where the encoded value starts, and its length.
    var valueOffset: Int
    var valueLength: Int
    /// Where the next entry starts.
    var end: Int { offset + SuiteImageFormat.entryFixedBytes + keyLength }
  }

  /// The journal generation the image belongs to.
  let generation: UInt64
  /// The journal length the image holds (records before it are in it).
  let position: UInt64
  /// How many keys it holds.
  let count: Int
  /// Property-list objects of the suite (root, keys, values, recursively), as the header says.
  let objects: Int
  /// Bytes of strings, data and keys of the suite, as the header says.
  let payloadBytes: Int
  /// The file's identity when mapped (nil for bytes).
  let status: FileStatus?

  let slotCount: Int
  let valuesOffset: Int
  let entriesOffset: Int
  /// The whole image (its length is the header's fileLength).
  let bytes: UnsafeRawBufferPointer
  private let mapping: MappedFile?
  private let owned: UnsafeMutableRawBufferPointer?

  /// SIGBUS faults seen in the mapping (0 for bytes). A caller compares it before and after reads: a change means
  /// the file was truncated under us and what was read is not trustworthy.
  var faultCount: UInt32 { mapping?.faultCount ?? 0 }

  /// Gives back the resident pages of `range` of a mapped image (a value read once, by the export).
  func releaseResidentPages(in range: Range<Int>) { mapping?.releaseResidentPages(in: range) }

  /// Maps the image open as `fd` (which it now owns: it closes with the image, or as the init throws) and checks its
  /// header (O(1)).
  convenience init(mapping fd: consuming SystemFD) throws(OpenError) {
    let file: MappedFile
    do { file = try MappedFile(fd: fd) } catch { throw .system(error) }
    do { try self.init(bytes: file.bytes, mapping: file, owned: nil) } catch { throw .corrupt(error) }
  }

  /// The same over image bytes in memory (tests, the fuzzer, the builder's self-check); they are copied.
  convenience init(bytes: [UInt8]) throws(Corruption) {
    let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
    bytes.withUnsafeBytes {
      if let source = $0.baseAddress { copy.baseAddress!.copyMemory(from: source, byteCount: $0.count) }
    }
    let view = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(copy)[0..<bytes.count])
    do { try self.init(bytes: view, mapping: nil, owned: copy) } catch {
      copy.deallocate()
      throw error
    }
  }

  private init(bytes: UnsafeRawBufferPointer, mapping: MappedFile?, owned: UnsafeMutableRawBufferPointer?)
    throws(Corruption)
  {
    typealias F = SuiteImageFormat
    func fail(_ offset: Int, _ reason: String) -> Corruption { Corruption(offset: offset, reason: reason) }
    guard bytes.count >= F.headerBytes else { throw fail(0, "\(bytes.count) bytes is shorter than the header") }
    guard F.load64(bytes, 0) == F.magic else { throw fail(0, "not a suite image (bad magic)") }
    let sum = StableHash.fnv1a32(UnsafeRawBufferPointer(rebasing: bytes[0..<72]))
    guard F.load32(bytes, 72) == sum else { throw fail(72, "header checksum mismatch") }
    guard F.load32(bytes, 76) == 0 else { throw fail(76, "reserved word is not 0") }
    let fileLength = F.load64(bytes, 48)
    guard fileLength == UInt64(bytes.count), fileLength <= UInt64(F.maxFileLength) else {
      throw fail(48, "fileLength \(fileLength) but the file has \(bytes.count) bytes")
    }
    let entryCount = Int(F.load32(bytes, 24))
    let slotCount = Int(F.load32(bytes, 28))
    guard slotCount >= F.minSlots, slotCount & (slotCount - 1) == 0, slotCount >= 2 * entryCount else {
      throw fail(28, "slotCount \(slotCount) is not a power of two >= 8 and >= 2 x \(entryCount) entries")
    }
    let valuesOffset = F.load64(bytes, 32)
    let entriesOffset = F.load64(bytes, 40)
    guard valuesOffset == UInt64(F.headerBytes + F.slotBytes * slotCount), valuesOffset <= fileLength else {
      throw fail(32, "valuesOffset \(valuesOffset) is not where the index of \(slotCount) slots ends")
    }
    guard entriesOffset >= valuesOffset, entriesOffset <= fileLength,
      UInt64(entryCount) * UInt64(F.entryFixedBytes) <= fileLength - entriesOffset
    else { throw fail(40, "entriesOffset \(entriesOffset) leaves no room for \(entryCount) entries") }
    // Each entry is a key (1 object) and a value of at most the whole values region (1 object per byte at most);
    // payload is at most that many bytes per entry. Exact counts: `validate()`.
    let objects = F.load64(bytes, 56)
    let payloadBytes = F.load64(bytes, 64)
    let valuesBytes = entriesOffset - valuesOffset
    let entriesBytes = fileLength - entriesOffset
    guard objects >= 1 + 2 * UInt64(entryCount), objects <= UInt64(Int.max), payloadBytes <= UInt64(Int.max),
      objects <= 1 + UInt64(entryCount) * (1 + valuesBytes)
    else {
      throw fail(56, "objects \(objects) is impossible for \(entryCount) entries")
    }
    guard payloadBytes <= UInt64(entryCount) * (valuesBytes + entriesBytes) else {
      throw fail(64, "payloadBytes \(payloadBytes) is impossible for \(entryCount) entries")
    }
    self.generation = F.load64(bytes, 8)
    self.position = F.load64(bytes, 16)
    self.count = entryCount
    self.slotCount = slotCount
    self.valuesOffset = Int(valuesOffset)
    self.entriesOffset = Int(entriesOffset)
    self.objects = Int(objects)
    self.payloadBytes = Int(payloadBytes)
    self.bytes = bytes
    self.mapping = mapping
    self.owned = owned
    self.status = mapping?.status
  }

  deinit { owned?.deallocate() }

  // MARK: Entries

  /// The entry at `offset`, every field checked against its region.
  func entry(at offset: Int) throws(Corruption) -> Entry {
    typealias F = SuiteImageFormat
    guard offset >= entriesOffset, bytes.count - offset >= F.entryFixedBytes else {
      throw Corruption(offset: offset, reason: "an entry at \(offset) is outside the entries region")
    }
    let keyLength = Int(F.load32(bytes, offset))
    guard keyLength <= bytes.count - offset - F.entryFixedBytes else {
      throw Corruption(offset: offset, reason: "key length \(keyLength) runs past the end of the image")
    }
    let at = offset + 4 + keyLength
    let valueOffset = Int(F.load32(bytes, at))
    let valueLength = Int(F.load32(bytes, at + 4))
    try checkValue(valueOffset, valueLength, entry: offset)
    return Entry(offset: offset, keyLength: keyLength, valueOffset: valueOffset, valueLength: valueLength)
  }

  private func checkValue(_ valueOffset: Int, _ valueLength: Int, entry: Int) throws(Corruption) {
    guard valueOffset >= valuesOffset, valueOffset < entriesOffset, valueLength >= 1,
      valueLength <= entriesOffset - valueOffset
    else {
      throw Corruption(
        offset: entry, reason: "value at \(valueOffset) (\(valueLength) bytes) is outside the values region")
    }
  }

  /// The key and value bytes of `entry`, checked again against this image (an entry of another image fails).
  func raw(_ entry: Entry) throws(Corruption) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    guard entry.offset >= entriesOffset, entry.keyLength >= 0,
      entry.keyLength <= bytes.count - entry.offset - SuiteImageFormat.entryFixedBytes
    else { throw Corruption(offset: entry.offset, reason: "not an entry of this image") }
    try checkValue(entry.valueOffset, entry.valueLength, entry: entry.offset)
    let key = UnsafeRawBufferPointer(rebasing: bytes[(entry.offset + 4)..<(entry.offset + 4 + entry.keyLength)])
    let value = UnsafeRawBufferPointer(rebasing: bytes[entry.valueOffset..<(entry.valueOffset + entry.valueLength)])
    return (key, value)
  }

  /// Visits every entry in file order without building its key (merges that copy most entries as they are).
  func forEachRawEntry<E: Error>(_ body: (Entry, UnsafeRawBufferPointer) throws(E) -> Void) throws(E)
    -> Corruption?
  {
    var offset = entriesOffset
    for _ in 0..<count {
      let entry: Entry
      do { entry = try self.entry(at: offset) } catch { return error }
      try body(entry, UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + entry.keyLength)]))
      offset = entry.end
    }
    guard offset == bytes.count else {
      return Corruption(offset: offset, reason: "\(bytes.count - offset) bytes after the last entry")
    }
    return nil
  }

  /// Visits every entry in file order with its key (values are decoded on demand with `value(of:)`). Throws
  /// `Corruption` for an unreadable entry or a key that is not valid UTF-8, or what `body` throws.
  func forEachEntry(_ body: (Entry, String) throws -> Void) throws {
    let corruption = try forEachRawEntry { (entry, key) throws in
      guard let string = key.withMemoryRebound(to: UInt8.self, { String(validating: $0, as: UTF8.self) }) else {
        throw Corruption(offset: entry.offset + 4, reason: "key is not valid UTF-8")
      }
      try body(entry, string)
    }
    if let corruption { throw corruption }
  }

  /// The value of `entry`, decoded.
  func value(of entry: Entry) throws(Corruption) -> PropertyListValue {
    let raw = try raw(entry).value
    do { return try JournalFormat.decodeValue(Array(raw)[...]) } catch {
      throw Corruption(offset: entry.valueOffset + error.offset, reason: error.reason)
    }
  }

  // MARK: Lookup

  /// The value of `key`, or nil when the image does not hold it: hash the key, probe the index (at most
  /// `slotCount` slots), compare key bytes, decode the value. Only what the probe reaches is read.
  func value(forKey key: String) throws(Corruption) -> PropertyListValue? {
    guard let entry = try find(key) else { return nil }
    return try value(of: entry)
  }

  /// The entry of `key`, or nil.
  func find(_ key: String) throws(Corruption) -> Entry? {
    try SuiteImageFormat.withBytes(of: key) { (keyBytes) throws(Corruption) in try find(keyBytes) }
  }

  /// The entry whose key is `key`'s bytes, or nil.
  func find(_ key: UnsafeRawBufferPointer) throws(Corruption) -> Entry? {
    typealias F = SuiteImageFormat
    let hash = F.hash(key)
    let mask = slotCount - 1
    var slot = Int(hash) & mask
    // A full index (crafted: slotCount >= 2 x entries holds for ours) must not loop forever.
    for _ in 0..<slotCount {
      let at = F.headerBytes + F.slotBytes * slot
      let offset = Int(F.load32(bytes, at + 4))
      if offset == 0 { return nil }
      if F.load32(bytes, at) == hash {
        let entry = try self.entry(at: offset)
        if entry.keyLength == key.count,
          RawMemory.equal(bytes.baseAddress! + offset + 4, key.baseAddress, count: key.count)
        {
          return entry
        }
      } else if offset < entriesOffset || offset >= bytes.count {
        throw Corruption(offset: at, reason: "index slot \(slot) points at \(offset), outside the entries region")
      }
      slot = (slot + 1) & mask
    }
    return nil
  }

  // MARK: Validation

  /// O(n) (O(n x probe length)): every entry readable and its value well formed, every key findable through the
  /// index exactly once and at its own entry, no duplicate keys, no other index slot in use, and the header's
  /// counts right. For tests, the fuzzer, and an image adopted without a record of who wrote it.
  func validate() throws(Corruption) {
    typealias F = SuiteImageFormat
    var objects = 1
    var payload = 0
    var measured: [Int: (length: Int, objects: Int, payload: Int)] = [:]  // shared (large) values: measured once
    let corruption = try forEachRawEntry { (entry, key) throws(Corruption) in
      guard key.withMemoryRebound(to: UInt8.self, { String(validating: $0, as: UTF8.self) }) != nil else {
        throw Corruption(offset: entry.offset + 4, reason: "key is not valid UTF-8")
      }
      // Found through the index, at this very entry (an equal key met first is a duplicate).
      let hash = F.hash(key)
      var slot = Int(hash) & (slotCount - 1)
      var found = false
      for _ in 0..<slotCount {
        let at = F.headerBytes + F.slotBytes * slot
        let offset = Int(F.load32(bytes, at + 4))
        if offset == 0 { break }
        if offset == entry.offset {
          guard F.load32(bytes, at) == hash else { throw Corruption(offset: at, reason: "index slot has a wrong hash") }
          found = true
          break
        }
        if F.load32(bytes, at) == hash {
          let other = try self.entry(at: offset)
          if other.keyLength == key.count,
            RawMemory.equal(bytes.baseAddress! + offset + 4, key.baseAddress, count: key.count)
          {
            throw Corruption(offset: entry.offset, reason: "duplicate key (also at \(offset))")
          }
        }
        slot = (slot + 1) & (slotCount - 1)
      }
      guard found else { throw Corruption(offset: entry.offset, reason: "key not reachable through the index") }
      let counts: (objects: Int, payload: Int)
      if entry.valueLength >= F.dedupMinBytes, let known = measured[entry.valueOffset],
        known.length == entry.valueLength
      {
        counts = (known.objects, known.payload)
      } else {
        counts = try F.measure(bytes, from: entry.valueOffset, count: entry.valueLength)
        _ = try value(of: entry)  // strings and keys valid UTF-8
        if entry.valueLength >= F.dedupMinBytes {
          measured[entry.valueOffset] = (entry.valueLength, counts.objects, counts.payload)
        }
      }
      objects += 1 + counts.objects
      payload += key.count + counts.payload
    }
    if let corruption { throw corruption }
    // Every entry owns one slot: any other slot in use is a stray.
    var used = 0
    for slot in 0..<slotCount where F.load32(bytes, F.headerBytes + F.slotBytes * slot + 4) != 0 { used += 1 }
    guard used == count else {
      throw Corruption(offset: F.headerBytes, reason: "\(used) index slots in use for \(count) entries")
    }
    guard objects == self.objects else {
      throw Corruption(offset: 56, reason: "header says \(self.objects) objects, entries hold \(objects)")
    }
    guard payload == payloadBytes else {
      throw Corruption(offset: 64, reason: "header says \(payloadBytes) payload bytes, entries hold \(payload)")
    }
  }
}
