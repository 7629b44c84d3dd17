import Glibc  // memcmp, memcpy
import PropertyList
import SystemLayer

// MARK: - Writer

/// Builds an image: values and entries are gathered in two buffers, the index is laid out by `finish()` once the
/// entry count is known.
struct SuiteImageBuilder {
  private typealias F = SuiteImageFormat
  private struct StoredValue {
    var offset: Int  // relative to the values region
    var length: Int
    var objects: Int
    var payload: Int
  }
  private struct Pending {
    var hash: UInt32
    var entry: UInt32  // relative to the entries region
  }

  let generation: UInt64
  let position: UInt64
  private var values: [UInt8] = []
  private var entries: [UInt8] = []
  private var pending: [Pending] = []
  private var objects = 1  // the root dictionary
  private var payload = 0
  /// Large values by content (`contentHash`), for dedup.
  private var shared: [UInt64: StoredValue] = [:]
  /// Large values of `source` already copied, by their offset there (a raw copy keeps them shared, unhashed).
  private var copied: [Int: StoredValue] = [:]
  private var source: SuiteImage?

  /// A builder for about `capacity` entries (a hint) of the image at (generation, position).
  init(generation: UInt64, position: UInt64, capacity: Int) {
    self.generation = generation
    self.position = position
    pending.reserveCapacity(max(capacity, 0))
    entries.reserveCapacity(max(capacity, 0) * 24)
  }

  /// Adds a key with a value given as a PropertyListValue (encoded here). The caller never adds a key twice.
  mutating func add(key: String, value: PropertyListValue) throws(SharedDefaultsError) {
    let start = values.count
    do throws(SharedDefaultsError) {
      try JournalFormat.encodeValue(value, into: &values)
    } catch {
      values.removeSubrange(start...)
      throw error
    }
    let stored = try keep(from: start)
    try appendEntry(key: key, value: stored)
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
      let start = values.count
      values.append(contentsOf: value)
      stored = try keep(from: start)
      if value.count >= F.dedupMinBytes { copied[valueOffset] = stored }
    }
    try appendEntry(rawKey: rawKey, value: stored)
  }

  /// Measures the value just appended at `start`, and drops it for an identical large one already stored.
  private mutating func keep(from start: Int) throws(SharedDefaultsError) -> StoredValue {
    let length = values.count - start
    let measured = values.withUnsafeBytes { all in
      Result { () throws(SuiteImage.Corruption) in try F.measure(all, from: start, count: length) }
    }
    let counts: (objects: Int, payload: Int)
    switch measured {
    case .success(let value): counts = value
    case .failure(let error):
      values.removeSubrange(start...)
      throw Self.damaged(error)
    }
    let stored = StoredValue(offset: start, length: length, objects: counts.objects, payload: counts.payload)
    guard length >= F.dedupMinBytes else { return stored }
    let hash = values.withUnsafeBytes { F.contentHash(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    if let known = shared[hash], known.length == length {
      let same = values.withUnsafeBytes { memcmp($0.baseAddress! + known.offset, $0.baseAddress! + start, length) == 0 }
      if same {
        values.removeSubrange(start...)
        return known
      }
      return stored  // a hash collision: stored twice, which is only a missed saving
    }
    shared[hash] = stored
    return stored
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
    // Checked as it grows, so a huge suite fails at the entry that passes 4 GiB, not after building it all.
    let data = values.count + entries.count + F.entryFixedBytes + key.count
    // 8 x slotCount <= 64 + 32 x entries: the exact index size only near the limit.
    if F.headerBytes + 64 + 32 * (pending.count + 1) + data > F.maxFileLength {
      let total = F.headerBytes + F.slotBytes * F.slotCount(for: pending.count + 1) + data
      guard total <= F.maxFileLength else {
        throw .suiteTooLarge("suite image", "it would be over 4 GiB (\(total) bytes at \(pending.count + 1) keys)")
      }
    }
    pending.append(Pending(hash: F.hash(key), entry: UInt32(entries.count)))
    JournalFormat.append32(UInt32(key.count), to: &entries)
    entries.append(contentsOf: key)
    JournalFormat.append32(UInt32(value.offset), to: &entries)  // relative: `finish()` adds valuesOffset
    JournalFormat.append32(UInt32(value.length), to: &entries)
    objects += 1 + value.objects
    payload += key.count + value.payload
  }

  private static func damaged(_ error: SuiteImage.Corruption) -> SharedDefaultsError {
    .system(FileSystemError("read", "suite image", .badMessage, reason: "the image is damaged: \(error)"))
  }

  /// The whole image file's bytes.
  func finish() throws(SharedDefaultsError) -> [UInt8] {
    let slotCount = F.slotCount(for: pending.count)
    let valuesOffset = F.headerBytes + F.slotBytes * slotCount
    let entriesOffset = valuesOffset + values.count
    let fileLength = entriesOffset + entries.count
    guard fileLength <= F.maxFileLength else {
      throw .suiteTooLarge("suite image", "it would be \(fileLength) bytes; an image holds at most 4 GiB")
    }
    var out = [UInt8](repeating: 0, count: fileLength)
    out.withUnsafeMutableBytes { out in
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
      values.withUnsafeBytes { if !$0.isEmpty { memcpy(out.baseAddress! + valuesOffset, $0.baseAddress!, $0.count) } }
      entries.withUnsafeBytes {
        if !$0.isEmpty { memcpy(out.baseAddress! + entriesOffset, $0.baseAddress!, $0.count) }
      }
      let mask = slotCount - 1
      for item in pending {
        let entry = entriesOffset + Int(item.entry)
        // The value offset becomes absolute.
        let field = entry + 4 + Int(F.load32(UnsafeRawBufferPointer(out), entry))
        F.store32(F.load32(UnsafeRawBufferPointer(out), field) + UInt32(valuesOffset), out, field)
        var slot = Int(item.hash) & mask
        while F.load32(UnsafeRawBufferPointer(out), F.headerBytes + F.slotBytes * slot + 4) != 0 { slot = (slot + 1) & mask }
        F.store32(item.hash, out, F.headerBytes + F.slotBytes * slot)
        F.store32(UInt32(entry), out, F.headerBytes + F.slotBytes * slot + 4)
      }
    }
    return out
  }
}

// MARK: - Merge

extension SuiteImage {
  /// The image of `base` (nil: empty) with `changes` applied (a nil value removes the key), at (generation,
  /// position). Entries of `base` whose keys are not in `changes` are copied as raw bytes (no value is decoded,
  /// no key becomes a String). Keys match by bytes (see `SuiteImageFormat`; they are in NFC).
  static func merged(
    base: SuiteImage?, changes: [String: PropertyListValue?], generation: UInt64, position: UInt64
  ) throws(SharedDefaultsError) -> [UInt8] {
    var builder = SuiteImageBuilder(
      generation: generation, position: position, capacity: (base?.count ?? 0) + changes.count)
    if let base {
      let changed = ChangedKeys(changes.keys)
      let corruption = try base.forEachRawEntry { (entry, key) throws(SharedDefaultsError) in
        if changed.contains(key) { return }
        let value = UnsafeRawBufferPointer(
          rebasing: base.bytes[entry.valueOffset..<(entry.valueOffset + entry.valueLength)])
        try builder.add(rawKey: key, value: value, at: entry.valueOffset, of: base)
      }
      if let corruption {
        throw .system(FileSystemError("read", "suite image", .badMessage, reason: "the image is damaged: \(corruption)"))
      }
    }
    for (key, value) in changes {
      if let value { try builder.add(key: key, value: value) }
    }
    return try builder.finish()
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
        && candidate.withUnsafeBytes { key.count == 0 || memcmp($0.baseAddress!, key.baseAddress!, key.count) == 0 }
    }
  }
}
