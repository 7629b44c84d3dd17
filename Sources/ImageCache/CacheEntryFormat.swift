import Foundation
import GroupContainerCore
import SystemLayer

/// The on-disk format of one cache entry, in one place.
///
/// An entry is one file in `Library/Caches/<name>/`, named `<32 hex digits>.entry` from the FNV-1a-128 hash of
/// its key (`StableHash`), published by an atomic replace: a reader sees the old entry or the new one, never a
/// part. The name is a hash, so no key — a URL, `../../x`, 10 kB of anything — can reach another directory; the
/// key itself is stored in the entry, so two keys sharing a name (a collision) each see the other's entry as a
/// miss, never as their image.
///
///     offset  size  field
///          0     8  magic "GCIMGv2\n"
///          8     4  key length K (UInt32, little-endian)
///         12     4  format (ImageFormat's index in allCases)
///         16     8  image length N (UInt64)
///         24     8  stored at (nanoseconds since 1970, Int64)
///         32     8  expires at (nanoseconds since 1970; 0 = never)
///         40     4  pixel width      44  4  pixel height      48  4  frame count
///         52     4  FNV-1a-32 of bytes 0..<52, 56..<64 and the key (the header's checksum)
///         56     8  `StableHash.checksum64` of the image's bytes (the image's checksum)
///         64     K  key (UTF-8)
///       64+K     N  the image's bytes, as stored
///
/// The file's size must be exactly 64 + K + N. Both checksums cover every byte of the entry but their own fields:
/// a truncated or edited file — 100 bytes changed in a PNG's text chunk, which the image's header parse would not
/// notice — is a miss. A reader checks both; a trim, which reads only headers, checks the header's. Entries of the
/// first format (`GCIMGv1`, whose checksum covered the header and key only) are misses, removed without a logged
/// error. The modification time is the entry's last use, kept coarse (see
/// `SharedImageCache.Limits.recencyGranularity`): trimming removes the least recently used first.
enum CacheEntryFormat {
  static let magic: [UInt8] = Array("GCIMGv2\n".utf8)
  /// The first format's magic: its entries are misses, removed quietly (an upgrade is no corruption).
  static let previousMagic: [UInt8] = Array("GCIMGv1\n".utf8)
  static let headerSize = 64
  static let fileExtension = ".entry"
  /// Keys are any strings; this bounds what one entry's key can cost a reader.
  static let maximumKeyBytes = 16 * 1024

  struct Header: Equatable {
    var keyLength: Int
    var info: ImageInfo
    var imageLength: Int
    var storedAt: Int64
    var expiresAt: Int64
    /// `StableHash.checksum64` of the image's bytes.
    var imageChecksum: UInt64

    var fileSize: Int { CacheEntryFormat.headerSize + keyLength + imageLength }

    func isExpired(now: Int64) -> Bool { expiresAt != 0 && expiresAt <= now }
  }

  /// The file name for `key`.
  static func fileName(forKey key: String) -> String {
    var key = key
    return StableHash.hex(key.withUTF8 { StableHash.fnv1a128(UnsafeRawBufferPointer($0)) }) + fileExtension
  }

  /// Whether `name` is an entry's name (anything else in the directory is not ours to read as an entry).
  static func isEntryName(_ name: some StringProtocol) -> Bool {
    let utf8 = name.utf8
    guard utf8.count == 32 + fileExtension.utf8.count, name.hasSuffix(fileExtension) else { return false }
    return utf8.prefix(32).allSatisfy { HexDigits.lowercaseValue($0) != nil }
  }

  /// The shard (0..<256) whose generation guards `name`'s entry: the first byte of the hash.
  static func shard(ofName name: some StringProtocol) -> Int {
    let utf8 = Array(name.utf8.prefix(2))
    guard utf8.count == 2, let high = HexDigits.lowercaseValue(utf8[0]), let low = HexDigits.lowercaseValue(utf8[1])
    else { return 0 }
    return Int(high) << 4 | Int(low)
  }

  /// The header and key of a new entry (the image's bytes follow them in the file).
  static func encodeHeader(
    key: String, info: ImageInfo, imageLength: Int, storedAt: Int64, expiresAt: Int64, imageChecksum: UInt64
  ) -> [UInt8] {
    var out: [UInt8] = magic
    out.reserveCapacity(headerSize + key.utf8.count)
    func append<T: FixedWidthInteger>(_ value: T) {
      withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }
    append(UInt32(key.utf8.count))
    append(UInt32(ImageFormat.allCases.firstIndex(of: info.format)!))
    append(UInt64(imageLength))
    append(storedAt)
    append(expiresAt)
    append(UInt32(clamping: info.pixelWidth))
    append(UInt32(clamping: info.pixelHeight))
    append(UInt32(clamping: info.frameCount))
    append(UInt32(0))  // the header checksum's place, filled below (not covered by it)
    append(imageChecksum)
    out.append(contentsOf: key.utf8)
    let sum = out.withUnsafeBytes { Self.checksum($0, keyLength: key.utf8.count) }
    for index in 0..<4 { out[52 + index] = UInt8(truncatingIfNeeded: sum >> (8 * index)) }
    return out
  }

  /// Decodes the fixed header from the first `headerSize` bytes; nil with a reason when they are not a header
  /// this version wrote.
  static func decodeHeader(_ bytes: UnsafeRawBufferPointer) -> Result<Header, Corruption> {
    guard bytes.count >= headerSize else { return .failure(.init("shorter than the 56-byte header")) }
    guard (0..<8).allSatisfy({ bytes[$0] == magic[$0] }) else {
      if (0..<8).allSatisfy({ bytes[$0] == previousMagic[$0] }) {
        return .failure(.init("an entry of the previous format", isPreviousFormat: true))
      }
      return .failure(.init("no entry magic number"))
    }
    func read<T: FixedWidthInteger>(_ offset: Int, _: T.Type) -> T {
      T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }
    let keyLength = Int(read(8, UInt32.self))
    let formatIndex = Int(read(12, UInt32.self))
    let imageLength = read(16, UInt64.self)
    guard keyLength <= maximumKeyBytes else { return .failure(.init("key length \(keyLength) over the limit")) }
    guard formatIndex < ImageFormat.allCases.count else { return .failure(.init("unknown format \(formatIndex)")) }
    guard imageLength <= UInt64(Int32.max) else { return .failure(.init("image length \(imageLength) too large")) }
    let info = ImageInfo(
      format: ImageFormat.allCases[formatIndex], pixelWidth: Int(read(40, UInt32.self)),
      pixelHeight: Int(read(44, UInt32.self)), frameCount: Int(read(48, UInt32.self)))
    return .success(
      Header(
        keyLength: keyLength, info: info, imageLength: Int(imageLength), storedAt: read(24, Int64.self),
        expiresAt: read(32, Int64.self), imageChecksum: read(56, UInt64.self)))
  }

  /// Checks the header's checksum against the stored key bytes (which follow the header in `bytes`).
  static func checksumMatches(_ bytes: UnsafeRawBufferPointer, keyLength: Int) -> Bool {
    guard bytes.count >= headerSize + keyLength else { return false }
    let stored = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 52, as: UInt32.self))
    return stored == checksum(bytes, keyLength: keyLength)
  }

  /// FNV-1a-32 of the header bytes 0..<52 and 56..<64 and the key, from an entry's bytes (the key starts at
  /// `headerSize`; the checksum field itself is not covered).
  private static func checksum(_ bytes: UnsafeRawBufferPointer, keyLength: Int) -> UInt32 {
    let key = UnsafeRawBufferPointer(rebasing: bytes[headerSize..<(headerSize + keyLength)])
    let fields = StableHash.fnv1a32(UnsafeRawBufferPointer(rebasing: bytes[0..<52]))
    let imageSum = StableHash.fnv1a32(UnsafeRawBufferPointer(rebasing: bytes[56..<64]), continuing: fields)
    return StableHash.fnv1a32(key, continuing: imageSum)
  }

  /// Whether the image's bytes (`image`, as read) match the image checksum of `header`.
  static func imageMatches(_ image: UnsafeRawBufferPointer, _ header: Header) -> Bool {
    StableHash.checksum64(image) == header.imageChecksum
  }

  /// Whether the key stored at `headerSize` is `key`, byte for byte.
  static func storedKey(_ bytes: UnsafeRawBufferPointer, keyLength: Int, equals key: String) -> Bool {
    var key = key
    return key.withUTF8 { wanted in
      wanted.count == keyLength
        && UnsafeRawBufferPointer(wanted).elementsEqual(
          UnsafeRawBufferPointer(rebasing: bytes[headerSize..<(headerSize + keyLength)]))
    }
  }

  struct Corruption: Error, CustomStringConvertible {
    var description: String
    /// An entry of the first format: a miss, but nothing to log.
    var isPreviousFormat = false
    init(_ description: String, isPreviousFormat: Bool = false) {
      self.description = description
      self.isPreviousFormat = isPreviousFormat
    }
  }
}
