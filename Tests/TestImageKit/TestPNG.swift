import Foundation

/// Real PNG files for tests and benchmarks, any size, whose pixels depend on a seed: two versions of "the same"
/// image differ in bytes, and any PNG reader accepts them (8-bit grayscale, stored deflate blocks, true CRCs).
/// The seed is also the first 8 pixels (stored blocks keep them at a fixed offset), so a reader can tell which
/// version it got (`seed(of:)`) and whether every byte is that version's (`isIntact`).
public enum TestPNG {
  /// Where the first pixel lies: signature 8 + IHDR 25 + IDAT length and type 8 + zlib 2 + block header 5 + filter 1.
  static let firstPixel = 49

  /// `text`: a `tEXt` chunk ("Comment") after the pixels, whose bytes no header parse looks at.
  public static func make(width: Int, height: Int, seed: UInt64 = 0, text: String? = nil) -> Data {
    precondition(width >= 8 && height >= 1, "a test PNG is at least 8 pixels wide")
    var raw: [UInt8] = []
    raw.reserveCapacity((width + 1) * height)
    var state = seed &+ 0x9e37_79b9_7f4a_7c15
    for row in 0..<height {
      raw.append(0)  // filter: none
      for column in 0..<width {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        raw.append(
          row == 0 && column < 8
            ? UInt8(truncatingIfNeeded: seed >> (8 * column)) : UInt8(truncatingIfNeeded: state >> 56))
      }
    }
    var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    var ihdr: [UInt8] = []
    ihdr += bigEndian(UInt32(width))
    ihdr += bigEndian(UInt32(height))
    ihdr += [8, 0, 0, 0, 0]  // depth 8, grayscale, deflate, filter 0, no interlace
    chunk("IHDR", ihdr, into: &png)
    chunk("IDAT", zlibStored(raw), into: &png)
    if let text { chunk("tEXt", Array("Comment".utf8) + [0] + Array(text.utf8), into: &png) }
    chunk("IEND", [], into: &png)
    return Data(png)
  }

  /// The seed a test PNG was made with (nil for anything else).
  public static func seed(of data: Data) -> UInt64? {
    let bytes = [UInt8](data.prefix(firstPixel + 8))
    guard bytes.count == firstPixel + 8, bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) else { return nil }
    return (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[firstPixel + $1]) << (8 * $1) }
  }

  /// The pixel size from the IHDR chunk.
  public static func size(of data: Data) -> (width: Int, height: Int)? {
    let bytes = [UInt8](data.prefix(24))
    guard bytes.count == 24 else { return nil }
    func be(_ i: Int) -> Int { bytes[i..<(i + 4)].reduce(0) { $0 << 8 | Int($1) } }
    return (be(16), be(20))
  }

  /// Whether `data` is exactly the test PNG its size and seed say: not torn, not mixed with another version.
  public static func isIntact(_ data: Data) -> Bool {
    guard let seed = seed(of: data), let (width, height) = size(of: data), width >= 8, width * height < 1 << 26 else {
      return false
    }
    return make(width: width, height: height, seed: seed) == data
  }

  private static func bigEndian(_ value: UInt32) -> [UInt8] {
    [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
  }

  private static func chunk(_ type: String, _ data: [UInt8], into png: inout [UInt8]) {
    png += bigEndian(UInt32(data.count))
    let typed = Array(type.utf8) + data
    png += typed
    png += bigEndian(crc32(typed))
  }

  private static func zlibStored(_ data: [UInt8]) -> [UInt8] {
    var out: [UInt8] = [0x78, 0x01]
    var offset = 0
    repeat {
      let count = min(65_535, data.count - offset)
      let last: UInt8 = offset + count == data.count ? 1 : 0
      out.append(last)
      out += [UInt8(count & 0xff), UInt8(count >> 8), UInt8(~count & 0xff), UInt8((~count >> 8) & 0xff)]
      out += data[offset..<(offset + count)]
      offset += count
    } while offset < data.count
    var a: UInt32 = 1
    var b: UInt32 = 0
    for byte in data {
      a = (a + UInt32(byte)) % 65_521
      b = (b + a) % 65_521
    }
    return out + bigEndian(b << 16 | a)
  }

  private static let table: [UInt32] = (0..<256).map { n in
    var c = UInt32(n)
    for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
    return c
  }

  private static func crc32(_ bytes: [UInt8]) -> UInt32 {
    var c: UInt32 = 0xffff_ffff
    for byte in bytes { c = table[Int((c ^ UInt32(byte)) & 0xff)] ^ (c >> 8) }
    return c ^ 0xffff_ffff
  }
}
