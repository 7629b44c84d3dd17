// The content of `/gen/<size>?seed=S`. This one file is compiled into two targets: gc-file-server, which serves it,
// and TestSupport (Tests/TestSupport/GeneratedContent.swift is a symbolic link to it), whose
// `FileServer.expectedBytes(size:seed:range:)` checks what a client received without storing a copy.

/// Byte `i` of the entity with seed `S` is byte `i % 8` (little-endian) of the `i / 8`-th output of a SplitMix64
/// generator seeded with `S`: any range can be produced without producing what comes before it.
enum GeneratedContent {
  /// The `index`-th output of SplitMix64 seeded with `seed` (Steele, Lea, Flood 2014; the generator of
  /// java.util.SplittableRandom).
  @inline(__always)
  static func word(seed: UInt64, index: UInt64) -> UInt64 {
    var z = seed &+ (index &+ 1) &* 0x9E37_79B9_7F4A_7C15
    z = (z ^ (z &>> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z &>> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z &>> 31)
  }

  /// Byte `offset` of the entity.
  @inline(__always)
  static func byte(seed: UInt64, at offset: UInt64) -> UInt8 {
    UInt8(truncatingIfNeeded: word(seed: seed, index: offset &>> 3) &>> ((offset & 7) &<< 3))
  }

  // Shifts are the masking `&>>`: the smart `>>` is generic and slow in debug builds, which tests use.

  /// Fills `buffer` with the entity's bytes from `offset` on.
  static func fill(_ buffer: UnsafeMutableRawBufferPointer, seed: UInt64, from offset: UInt64) {
    var position = 0
    var i = offset
    let count = buffer.count
    // Up to the next multiple of 8, byte by byte; then whole words; then the tail.
    while position < count && i & 7 != 0 {
      buffer[position] = byte(seed: seed, at: i)
      position += 1
      i += 1
    }
    while count - position >= 8 {
      buffer.storeBytes(of: word(seed: seed, index: i &>> 3).littleEndian, toByteOffset: position, as: UInt64.self)
      position += 8
      i += 8
    }
    while position < count {
      buffer[position] = byte(seed: seed, at: i)
      position += 1
      i += 1
    }
  }
}
