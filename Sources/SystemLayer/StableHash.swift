/// The one hash the package uses for what must be the same in every process — names on disk, buckets of shared
/// counters, checksums: FNV-1a, 128 or 32 bits. Stable across processes, machines and
/// releases (Swift's `Hasher` is seeded per process, so it can never name a file). Not a defence against someone
/// crafting collisions: every user of it must survive two inputs sharing a name (lock files over-lock; cache
/// entries store their key and treat another key's entry as a miss).
package enum StableHash {  // @inlinable: hot paths (journal records) of other modules specialize them
  @inlinable package static func fnv1a128(_ bytes: some Sequence<UInt8>) -> UInt128 {
    var hash: UInt128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d
    let prime: UInt128 = 0x0000_0000_0100_0000_0000_0000_0000_013B
    for byte in bytes {
      hash ^= UInt128(byte)
      hash = hash &* prime
    }
    return hash
  }

  @inlinable package static func fnv1a32(_ bytes: some Sequence<UInt8>, continuing hash: UInt32 = 0x811c_9dc5) -> UInt32 {
    var hash = hash
    for byte in bytes { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
    return hash
  }

  /// The same over contiguous bytes (no generic iteration: hot paths use these).
  @inlinable package static func fnv1a32(_ bytes: UnsafeRawBufferPointer, continuing hash: UInt32 = 0x811c_9dc5)
    -> UInt32
  {
    var hash = hash
    for index in 0..<bytes.count { hash = (hash ^ UInt32(bytes[index])) &* 0x0100_0193 }
    return hash
  }

  @inlinable package static func fnv1a128(_ bytes: UnsafeRawBufferPointer) -> UInt128 {
    var hash: UInt128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d
    let prime: UInt128 = 0x0000_0000_0100_0000_0000_0000_0000_013B
    for index in 0..<bytes.count {
      hash ^= UInt128(bytes[index])
      hash = hash &* prime
    }
    return hash
  }

  /// 32 lowercase hex digits.
  package static func hex(_ value: UInt128) -> String {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    return String(unsafeUninitializedCapacity: 32) { buffer in
      for index in 0..<32 { buffer[index] = digits[Int(truncatingIfNeeded: value >> UInt128(4 * (31 - index))) & 15] }
      return 32
    }
  }
}
