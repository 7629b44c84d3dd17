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

  @inlinable package static func fnv1a32(_ bytes: some Sequence<UInt8>, continuing hash: UInt32 = 0x811c_9dc5) -> UInt32
  {
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

  /// A 64-bit checksum of large contents (a cache entry's image), about as fast as copying the bytes: FNV's one
  /// multiply per byte would cost more than reading a 64 kB file. wyhash's mixing — a 64×64→128-bit multiply
  /// folded to 64 bits per 16 bytes — in four independent lanes (so the multiplies overlap), each lane chained, so
  /// an edit, a swap or a shift of bytes changes the result. For corruption, not for adversaries (see above).
  @inlinable package static func checksum64(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    @inline(__always) func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
      let product = a.multipliedFullWidth(by: b)
      return product.high ^ product.low
    }
    let k0: UInt64 = 0xa076_1d64_78bd_642f, k1: UInt64 = 0xe703_7ed1_a0b4_28db
    let k2: UInt64 = 0x8ebc_6af0_9c88_c6e3, k3: UInt64 = 0x5899_65cc_7537_4cc3
    var (a0, a1, a2, a3) = (k0, k1, k2, k3)
    let count = bytes.count
    var offset = 0
    @inline(__always) func word(_ at: Int) -> UInt64 {
      UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self))
    }
    while offset + 64 <= count {
      a0 = mix(word(offset) ^ k0, word(offset + 8) ^ a0)
      a1 = mix(word(offset + 16) ^ k1, word(offset + 24) ^ a1)
      a2 = mix(word(offset + 32) ^ k2, word(offset + 40) ^ a2)
      a3 = mix(word(offset + 48) ^ k3, word(offset + 56) ^ a3)
      offset += 64
    }
    var hash = mix(a0 ^ k1, a1 ^ UInt64(count)) ^ mix(a2 ^ k3, a3 ^ k0)
    while offset + 8 <= count {
      hash = mix(hash ^ word(offset), k2)
      offset += 8
    }
    while offset < count {
      hash = mix(hash ^ UInt64(bytes[offset]), k3)
      offset += 1
    }
    return mix(hash ^ k0, UInt64(count) ^ k1)
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
