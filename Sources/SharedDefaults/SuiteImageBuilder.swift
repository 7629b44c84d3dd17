import PropertyList
import SystemLayer

// MARK: - Writer

/// Where a builder writes an image: a file (the suite's next snapshot, written where it will be read: a value is
/// never held twice in memory, which for 60 MB values cost gigabytes) or memory (tests, the fuzzer).
enum SuiteImageOutput {
  /// A descriptor the caller owns (and keeps open while the builder writes), and its path.
  case file(Int32, path: String)
  case memory([UInt8])

  /// Writes `bytes` at `offset`; with `inPages`, a page at a time. Why: the page cache keeps what a write brought
  /// in folios as large as the write, and a reader's fault maps a whole folio — an image written a megabyte at a
  /// time cost a process that read 10 keys of 100,000 5 MB of resident memory, one written a page at a time 1.6.
  /// Only large values, which are read whole, are written in one piece.
  mutating func write(_ bytes: [UInt8], at offset: Int, inPages: Bool = true) throws(SharedDefaultsError) {
    guard !bytes.isEmpty else { return }
    switch self {
    case .file(let raw, let path):
      let fd = SystemFD.view(raw, path: path)
      let result = bytes.withUnsafeBytes { raw in
        Result { () throws(FileSystemError) in
          let piece = inPages ? Self.pageBytes : raw.count
          var done = 0
          while done < raw.count {
            let n = min(piece, raw.count - done)
            try fd.writeAll(UnsafeRawBufferPointer(rebasing: raw[done..<(done + n)]), at: Int64(offset + done))
            done += n
          }
        }
      }
      if case .failure(let error) = result { throw .system(error) }
    case .memory(var out):
      self = .memory([])  // out stays unique while it grows
      if out.count < offset + bytes.count { out += [UInt8](repeating: 0, count: offset + bytes.count - out.count) }
      out.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
      self = .memory(out)
    }
  }

  private static let pageBytes = 4096

  /// `count` bytes written at `offset` before.
  func read(at offset: Int, count: Int) throws(SharedDefaultsError) -> [UInt8] {
    switch self {
    case .file(let raw, let path):
      let fd = SystemFD.view(raw, path: path)
      do { return try fd.read(at: Int64(offset), count: count) } catch { throw .system(error) }
    case .memory(let out):
      return Array(out[offset..<(offset + count)])
    }
  }
}

/// Builds an image of exactly `count` entries (known first, so the index's size, and where the values start, are
/// too): values go to `output` at their final offsets as they come, in chunks; the entries and the index, which
/// are small beside them, are gathered in memory and written by `finish()`.
struct SuiteImageBuilder {
  private typealias F = SuiteImageFormat
  private struct StoredValue {
    var offset: Int  // absolute
    var length: Int
    var objects: Int
    var payload: Int
  }
  private struct Pending {
    var hash: UInt32
    var entry: UInt32  // relative to the entries region
  }

  /// What `finish()` wrote.
  struct Built {
    var length: Int
    /// The header's counts (see `SuiteImageFormat`).
    var objects: Int
    var payload: Int
  }

  let generation: UInt64
  let position: UInt64
  private(set) var output: SuiteImageOutput
  private let count: Int
  private let slotCount: Int
  private let valuesOffset: Int
  /// Values not yet written, which start at `valuesOffset + flushed`.
  private var chunk: [UInt8] = []
  private var flushed = 0
  private var entries: [UInt8] = []
  private var pending: [Pending] = []
  private var objects = 1  // the root dictionary
  private var payload = 0
  /// Large values by content (`contentHash`), for dedup.
  private var shared: [UInt64: StoredValue] = [:]
  /// Large values of `source` already copied, by their offset there (a raw copy keeps them shared, unhashed).
  private var copied: [Int: StoredValue] = [:]
  private var source: SuiteImage?
  private static let chunkBytes = 1 << 20

  /// A builder for an image of `count` entries at (generation, position), written to `output`.
  init(generation: UInt64, position: UInt64, count: Int, output: SuiteImageOutput = .memory([])) {
    self.generation = generation
    self.position = position
    self.output = output
    self.count = max(count, 0)
    slotCount = F.slotCount(for: self.count)
    valuesOffset = F.headerBytes + F.slotBytes * slotCount
    pending.reserveCapacity(self.count)
    entries.reserveCapacity(self.count * 24)
  }

  /// Where the next value starts.
  private var valuesEnd: Int { valuesOffset + flushed + chunk.count }

  /// Adds a key with a value given as a PropertyListValue (encoded here). The caller never adds a key twice.
  mutating func add(key: String, value: PropertyListValue) throws(SharedDefaultsError) {
    let start = chunk.count
    do throws(SharedDefaultsError) {
      try JournalFormat.encodeValue(value, into: &chunk)
    } catch {
      chunk.removeSubrange(start...)
      throw error
    }
    let stored = try keep(from: start)
    try appendEntry(key: key, value: stored)
    try flushIfFull()
  }

  /// Adds `entry` of `image` by copying its key and value bytes without decoding them; values shared by several
  /// entries of `image` stay shared here. A damaged entry throws (as a `.system` error naming the image).
  mutating func add(_ entry: SuiteImage.Entry, of image: SuiteImage) throws(SharedDefaultsError) {
    let raw: (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)
    do { raw = try image.raw(entry) } catch { throw Self.damaged(error) }
    try add(rawKey: raw.key, value: raw.value, at: entry.valueOffset, of: image)
  }

  /// The raw copy, with the key's bytes at hand (merges).
  fileprivate mutating func add(
    rawKey: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, at valueOffset: Int, of image: SuiteImage
  ) throws(SharedDefaultsError) {
    if source !== image {
      source = image
      copied = [:]
    }
    let stored: StoredValue
    if value.count >= F.dedupMinBytes, let known = copied[valueOffset], known.length == value.count {
      stored = known
    } else {
      let start = chunk.count
      chunk.append(contentsOf: value)
      stored = try keep(from: start)
      if value.count >= F.dedupMinBytes { copied[valueOffset] = stored }
    }
    try appendEntry(rawKey: rawKey, value: stored)
    try flushIfFull()
  }

  /// Measures the value just appended to `chunk` at `start`, and drops it for an identical large one already
  /// stored (compared byte for byte, read back when already written).
  private mutating func keep(from start: Int) throws(SharedDefaultsError) -> StoredValue {
    let length = chunk.count - start
    let measured = chunk.withUnsafeBytes { all in
      Result { () throws(SuiteImage.Corruption) in try F.measure(all, from: start, count: length) }
    }
    let counts: (objects: Int, payload: Int)
    switch measured {
    case .success(let value): counts = value
    case .failure(let error):
      chunk.removeSubrange(start...)
      throw Self.damaged(error)
    }
    let stored = StoredValue(
      offset: valuesOffset + flushed + start, length: length, objects: counts.objects, payload: counts.payload)
    guard length >= F.dedupMinBytes else { return stored }
    let hash = chunk.withUnsafeBytes { F.contentHash(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    if let known = shared[hash], known.length == length {
      let inChunk = known.offset - valuesOffset - flushed
      let earlier =
        inChunk >= 0 ? Array(chunk[inChunk..<(inChunk + length)]) : try output.read(at: known.offset, count: length)
      let same = earlier.withUnsafeBytes { a in
        chunk.withUnsafeBytes { RawMemory.equal(a.baseAddress, $0.baseAddress! + start, count: length) }
      }
      if same {
        chunk.removeSubrange(start...)
        return known
      }
      return stored  // a hash collision: stored twice, which is only a missed saving
    }
    shared[hash] = stored
    return stored
  }

  /// Writes the values gathered once they pass a chunk (a large value right away), and lets a large buffer go.
  private mutating func flushIfFull(force: Bool = false) throws(SharedDefaultsError) {
    guard chunk.count >= Self.chunkBytes || (force && !chunk.isEmpty) else { return }
    let at = valuesOffset + flushed
    let large = chunk.count > 2 * Self.chunkBytes
    var taken = chunk
    chunk = []
    try output.write(taken, at: at, inPages: !large)
    flushed += taken.count
    if large {
      chunk.reserveCapacity(Self.chunkBytes)
    } else {
      taken.removeAll(keepingCapacity: true)
      chunk = taken
    }
  }

  private mutating func appendEntry(key: String, value: StoredValue) throws(SharedDefaultsError) {
    // Copied out first: the key's buffer cannot be lent while `self` is mutated.
    let bytes = Array(key.utf8)
    try bytes.withUnsafeBytes { raw in
      Result { () throws(SharedDefaultsError) in try appendEntry(rawKey: raw, value: value) }
    }.get()
  }

  private mutating func appendEntry(rawKey key: UnsafeRawBufferPointer, value: StoredValue)
    throws(SharedDefaultsError)
  {
    guard pending.count < count else {
      throw .system(
        FileSystemError("build", "suite image", .invalidArgument, reason: "more entries than the \(count) announced"))
    }
    // Checked as it grows, so a huge suite fails at the entry that passes 4 GiB, not after building it all.
    let total = valuesEnd + entries.count + F.entryFixedBytes + key.count
    guard total <= F.maxFileLength else {
      throw .suiteTooLarge("suite image", "it would be over 4 GiB (\(total) bytes at \(pending.count + 1) keys)")
    }
    pending.append(Pending(hash: F.hash(key), entry: UInt32(entries.count)))
    JournalFormat.append32(UInt32(key.count), to: &entries)
    entries.append(contentsOf: key)
    JournalFormat.append32(UInt32(value.offset), to: &entries)
    JournalFormat.append32(UInt32(value.length), to: &entries)
    objects += 1 + value.objects
    payload += key.count + value.payload
  }

  fileprivate static func damaged(_ error: SuiteImage.Corruption) -> SharedDefaultsError {
    .system(FileSystemError("read", "suite image", .badMessage, reason: "the image is damaged: \(error)"))
  }

  /// Writes the rest (the last values, the entries, the index, the header last).
  mutating func finish() throws(SharedDefaultsError) -> Built {
    try flushIfFull(force: true)
    let entriesOffset = valuesOffset + flushed
    let fileLength = entriesOffset + entries.count
    guard fileLength <= F.maxFileLength else {
      throw .suiteTooLarge("suite image", "it would be \(fileLength) bytes; an image holds at most 4 GiB")
    }
    try output.write(entries, at: entriesOffset)
    var index = [UInt8](repeating: 0, count: F.slotBytes * slotCount)
    index.withUnsafeMutableBytes { index in
      let mask = slotCount - 1
      for item in pending {
        var slot = Int(item.hash) & mask
        while F.load32(UnsafeRawBufferPointer(index), F.slotBytes * slot + 4) != 0 { slot = (slot + 1) & mask }
        F.store32(item.hash, index, F.slotBytes * slot)
        F.store32(UInt32(entriesOffset + Int(item.entry)), index, F.slotBytes * slot + 4)
      }
    }
    try output.write(index, at: F.headerBytes)
    var header = [UInt8](repeating: 0, count: F.headerBytes)
    header.withUnsafeMutableBytes { out in
      F.store64(F.magic, out, 0)
      F.store64(generation, out, 8)
      F.store64(position, out, 16)
      F.store32(UInt32(pending.count), out, 24)
      F.store32(UInt32(slotCount), out, 28)
      F.store64(UInt64(valuesOffset), out, 32)
      F.store64(UInt64(entriesOffset), out, 40)
      F.store64(UInt64(fileLength), out, 48)
      F.store64(UInt64(objects), out, 56)
      F.store64(UInt64(payload), out, 64)
      F.store32(StableHash.fnv1a32(UnsafeRawBufferPointer(rebasing: out[0..<72])), out, 72)
    }
    try output.write(header, at: 0)
    return Built(length: fileLength, objects: objects, payload: payload)
  }
}

// MARK: - Merge

extension SuiteImage {
  /// Writes to `output` the image of `base` (nil: empty) with `changes` applied (a nil value removes the key), at
  /// (generation, position). Entries of `base` whose keys are not in `changes` are copied as raw bytes (no value
  /// is decoded, no key becomes a String). Keys match by bytes (see `SuiteImageFormat`; they are in NFC).
  static func merge(
    base: SuiteImage?, changes: [String: PropertyListValue?], generation: UInt64, position: UInt64,
    into output: SuiteImageOutput
  ) throws(SharedDefaultsError) -> (built: SuiteImageBuilder.Built, output: SuiteImageOutput) {
    // The entry count first (it sizes the index, which comes before the values): the base's, less the changed
    // keys it holds, plus the changed keys that keep a value.
    var count = base?.count ?? 0
    for (key, value) in changes {
      if let base {
        do { if try base.find(key) != nil { count -= 1 } } catch { throw SuiteImageBuilder.damaged(error) }
      }
      if value != nil { count += 1 }
    }
    var builder = SuiteImageBuilder(generation: generation, position: position, count: count, output: output)
    if let base {
      let changed = ChangedKeys(changes.keys)
      let corruption = try base.forEachRawEntry { (entry, key) throws(SharedDefaultsError) in
        if changed.contains(key) { return }
        let value = UnsafeRawBufferPointer(
          rebasing: base.bytes[entry.valueOffset..<(entry.valueOffset + entry.valueLength)])
        try builder.add(rawKey: key, value: value, at: entry.valueOffset, of: base)
      }
      if let corruption { throw SuiteImageBuilder.damaged(corruption) }
    }
    for (key, value) in changes {
      if let value { try builder.add(key: key, value: value) }
    }
    let built = try builder.finish()
    return (built, builder.output)
  }

  /// `merge` into memory: the image's bytes.
  static func merged(
    base: SuiteImage?, changes: [String: PropertyListValue?], generation: UInt64, position: UInt64
  ) throws(SharedDefaultsError) -> [UInt8] {
    let (_, output) = try merge(
      base: base, changes: changes, generation: generation, position: position, into: .memory([]))
    guard case .memory(let bytes) = output else { return [] }
    return bytes
  }
}

/// The keys of a change set, by bytes, with a bit filter in front: most base keys are not among them and are
/// rejected by one hash and one bit test.
private struct ChangedKeys {
  private var filter: [UInt64]
  private var keys: [UInt32: [[UInt8]]] = [:]

  init(_ changed: some Collection<String>) {
    var bits = 4096
    while bits < 64 * changed.count { bits <<= 1 }
    filter = [UInt64](repeating: 0, count: bits / 64)
    for key in changed {
      let bytes = Array(key.utf8)
      let hash = bytes.withUnsafeBytes { SuiteImageFormat.hash($0) }
      let bit = Int(hash) & (bits - 1)
      filter[bit >> 6] |= 1 << UInt64(bit & 63)
      keys[hash, default: []].append(bytes)
    }
  }

  func contains(_ key: UnsafeRawBufferPointer) -> Bool {
    if keys.isEmpty { return false }
    let hash = SuiteImageFormat.hash(key)
    let bit = Int(hash) & (filter.count * 64 - 1)
    guard filter[bit >> 6] & (1 << UInt64(bit & 63)) != 0, let candidates = keys[hash] else { return false }
    return candidates.contains { candidate in
      candidate.count == key.count
        && candidate.withUnsafeBytes { RawMemory.equal($0.baseAddress, key.baseAddress, count: key.count) }
    }
  }
}
