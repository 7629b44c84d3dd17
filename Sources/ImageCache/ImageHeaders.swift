import Foundation

/// Reads format, pixel size and frame count from an image's headers without decoding a pixel.
///
/// ## Behavior
/// - The format is taken from the signature (the first bytes) only: PNG/APNG, JPEG, GIF (87a, 89a), WebP (`VP8 `,
///   `VP8L`, `VP8X`). Anything else is `ImageCacheError.unsupportedFormat(signature:)` with the first bytes in hex.
/// - The whole container structure is walked, not just the first header, so an image cut short anywhere is refused
///   (`.malformed(format, reason:)` naming what is missing): PNG up to `IEND`, JPEG up to `EOI` (the entropy-coded
///   scans are scanned for markers, never decoded), GIF up to its trailer, WebP up to the end its RIFF header
///   announces. Bytes after that end are ignored, as decoders do. Chunk CRCs and compressed data are not checked.
/// - Every offset is bounds-checked before it is read; nothing is allocated from a length read in the file; every
///   step of every walk moves forward by at least one byte, so the work is linear in `data.count` whatever the
///   file claims.
///
/// ## Limits (refused with the reason)
/// - Zero width or height, in every format (a JPEG whose height a later DNL marker would set is refused too).
/// - Sides: what each format can express — JPEG and GIF 65,535 (16-bit fields), WebP `VP8 `/`VP8L` 16,383 and
///   16,384 (14-bit fields), WebP `VP8X` 16,777,216 (24-bit), PNG 2,147,483,647 (2^31 − 1, the PNG specification's
///   limit; larger values are refused).
/// - Pixels: at most ``maxPixelCount`` (2^28 = 268,435,456, e.g. 16,384 × 16,384) per frame in every format: such
///   an image decodes to 1 GiB of RGBA, more than any device this cache serves can hold, so a header claiming more
///   is a lie or an attack (a "decompression bomb") and the cache should not keep it.
/// - Frames: APNG's `acTL` count must equal its number of `fcTL` chunks; an animated GIF or WebP counts its frames
///   by walking them, so the count can never exceed what the file holds.
public enum ImageHeaders {
  /// The largest `pixelWidth × pixelHeight` accepted, in every format: 2^28 (16,384 × 16,384).
  public static let maxPixelCount = 1 << 28
  /// The largest PNG side (the PNG specification: 2^31 − 1).
  public static let maxPNGSide = Int(Int32.max)

  /// Reads an image's format, pixel size and frame count from its headers, without decoding; throws for another format,
  /// damaged headers or a size over the limits.
  public static func parse(_ data: Data) throws(ImageCacheError) -> ImageInfo {
    let result: Result<ImageInfo, ImageCacheError> = data.withUnsafeBytes { raw in
      do throws(ImageCacheError) {
        return .success(try parse(bytes: raw))
      } catch {
        return .failure(error)
      }
    }
    return try result.get()
  }

  /// The same, over bytes the caller already holds (the fuzz harness and the disk tier's mapped files).
  public static func parse(bytes: UnsafeRawBufferPointer) throws(ImageCacheError) -> ImageInfo {
    let reader = ByteReader(bytes)
    if reader.starts(with: pngSignature) { return try parsePNG(reader) }
    if reader.starts(with: jpegSignature) { return try parseJPEG(reader) }
    if reader.starts(with: gif87aSignature) || reader.starts(with: gif89aSignature) {
      return try parseGIF(reader)
    }
    if reader.count >= 12 && reader.tag(at: 0) == Tag.RIFF && reader.tag(at: 8) == Tag.WEBP {
      return try parseWebP(reader)
    }
    // Bytes that are the start of a signature: an image cut short, not an unknown format.
    for (format, signature) in signatures where reader.count > 0 && reader.count < signature.count {
      if (0..<reader.count).allSatisfy({ signature[$0] == nil || signature[$0] == reader.u8($0) }) {
        throw .malformed(
          format, reason: "truncated: \(reader.count) bytes, fewer than the \(signature.count) of the signature")
      }
    }
    throw .unsupportedFormat(signature: signatureHex(reader))
  }

  /// Each format's signature; nil is "any byte" (the RIFF size).
  static let signatures: [(ImageFormat, [UInt8?])] = [
    (.png, pngSignature),
    (.jpeg, jpegSignature),
    (.gif, Array("GIF8".utf8) + [nil, UInt8(ascii: "a")]),
    (.webp, Array("RIFF".utf8) + [nil, nil, nil, nil] + Array("WEBP".utf8)),
  ]

  static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
  static let jpegSignature: [UInt8] = [0xFF, 0xD8, 0xFF]
  static let gif87aSignature = Array("GIF87a".utf8)
  static let gif89aSignature = Array("GIF89a".utf8)

  /// Chunk types (PNG, RIFF) as the big-endian integer of their four bytes.
  enum Tag {
    static let IHDR = ByteReader.tag("IHDR")
    static let acTL = ByteReader.tag("acTL")
    static let fcTL = ByteReader.tag("fcTL")
    static let IDAT = ByteReader.tag("IDAT")
    static let IEND = ByteReader.tag("IEND")
    static let RIFF = ByteReader.tag("RIFF")
    static let WEBP = ByteReader.tag("WEBP")
    static let VP8 = ByteReader.tag("VP8 ")
    static let VP8L = ByteReader.tag("VP8L")
    static let VP8X = ByteReader.tag("VP8X")
    static let ANMF = ByteReader.tag("ANMF")
  }

  /// The first bytes in hex ("89 50 4e 47 …"), or "no bytes" for empty data.
  static func signatureHex(_ reader: ByteReader) -> String {
    if reader.count == 0 { return "no bytes (the data is empty)" }
    let shown = min(reader.count, 12)
    var text = (0..<shown).map { i in
      let byte = reader.u8(i)
      return (byte < 16 ? "0" : "") + String(byte, radix: 16)
    }.joined(separator: " ")
    if reader.count > shown { text += " …" }
    return text
  }

  /// Checks a size against the format's own field limit and ``maxPixelCount``.
  static func checkedInfo(
    _ format: ImageFormat, width: Int, height: Int, frames: Int, maxSide: Int
  ) throws(ImageCacheError) -> ImageInfo {
    if width == 0 || height == 0 {
      throw .malformed(format, reason: "the image is \(width)×\(height) pixels: a side of 0 pixels holds no image")
    }
    if width > maxSide || height > maxSide {
      throw .malformed(format, reason: "the image claims \(width)×\(height) pixels: sides above \(maxSide) are refused")
    }
    let (pixels, overflow) = width.multipliedReportingOverflow(by: height)
    if overflow || pixels > maxPixelCount {
      throw .malformed(
        format,
        reason: "the image claims \(width)×\(height) pixels, more than the \(maxPixelCount) pixels the cache accepts "
          + "(it would decode to more than 1 GiB)")
    }
    return ImageInfo(format: format, pixelWidth: width, pixelHeight: height, frameCount: frames)
  }
}

// MARK: - Reading bytes

/// Bounds-checked reads over a buffer. Every read goes through `need`, which throws `truncated` naming the part.
struct ByteReader {
  let bytes: UnsafeRawBufferPointer
  init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }
  var count: Int { bytes.count }

  func starts(with prefix: [UInt8]) -> Bool {
    guard count >= prefix.count else { return false }
    for (i, byte) in prefix.enumerated() where bytes[i] != byte { return false }
    return true
  }

  /// Throws unless `length` bytes from `offset` are present. `offset` and `length` are never negative here: they
  /// come from unsigned fields; the sum cannot overflow because each is at most 2^32 and Int is 64-bit.
  func need(
    _ offset: Int, _ length: Int, _ format: ImageFormat, _ what: @autoclosure () -> String
  ) throws(ImageCacheError) {
    if offset < 0 || length < 0 || offset > count || length > count - offset {
      throw .malformed(
        format,
        reason: "truncated: \(what()) needs bytes \(offset)..<\(offset &+ length) but the data has only \(count) bytes")
    }
  }

  // Unchecked reads: callers have called `need` for the range first.
  func u8(_ offset: Int) -> UInt8 { bytes[offset] }
  func u16be(_ offset: Int) -> Int { Int(bytes[offset]) << 8 | Int(bytes[offset + 1]) }
  func u16le(_ offset: Int) -> Int { Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 }
  func u24le(_ offset: Int) -> Int { u16le(offset) | Int(bytes[offset + 2]) << 16 }
  func u32be(_ offset: Int) -> Int { u16be(offset) << 16 | u16be(offset + 2) }
  func u32le(_ offset: Int) -> Int { u16le(offset) | u16le(offset + 2) << 16 }
  /// A chunk type as one big-endian integer, to compare with `tag("IHDR")` without making a String.
  func tag(at offset: Int) -> Int { u32be(offset) }
  static func tag(_ name: StaticString) -> Int {
    precondition(name.utf8CodeUnitCount == 4)
    let p = name.utf8Start
    return Int(p[0]) << 24 | Int(p[1]) << 16 | Int(p[2]) << 8 | Int(p[3])
  }
  func fourCC(at offset: Int) -> String {
    String(decoding: (offset..<offset + 4).map { printable(bytes[$0]) }, as: UTF8.self)
  }
  private func printable(_ byte: UInt8) -> UInt8 { (0x20...0x7E).contains(byte) ? byte : UInt8(ascii: "?") }
}

// MARK: - PNG

extension ImageHeaders {
  /// PNG: the signature, `IHDR` first (13 bytes: width, height), then chunks up to `IEND`. APNG: an `acTL` chunk
  /// (before the first `IDAT`) gives the frame count, which must equal the number of `fcTL` chunks.
  static func parsePNG(_ r: ByteReader) throws(ImageCacheError) -> ImageInfo {
    var offset = 8
    try r.need(offset, 8, .png, "the IHDR chunk header")
    guard r.tag(at: offset + 4) == Tag.IHDR else {
      throw .malformed(.png, reason: "the first chunk is '\(r.fourCC(at: offset + 4))', not IHDR")
    }
    guard r.u32be(offset) == 13 else {
      throw .malformed(.png, reason: "the IHDR chunk is \(r.u32be(offset)) bytes long, not 13")
    }
    try r.need(offset + 8, 13 + 4, .png, "the IHDR chunk")
    let width = r.u32be(offset + 8)
    let height = r.u32be(offset + 12)
    offset += 8 + 13 + 4

    var announcedFrames: Int?
    var frameControls = 0
    var sawImageData = false
    while true {
      try r.need(offset, 8, .png, "a chunk header (no IEND chunk yet)")
      let length = r.u32be(offset)
      let type = r.tag(at: offset + 4)
      guard length <= Int(Int32.max) else {
        throw .malformed(
          .png, reason: "chunk '\(r.fourCC(at: offset + 4))' at offset \(offset) claims \(length) bytes, above 2^31 − 1"
        )
      }
      try r.need(
        offset + 8, length + 4, .png,
        "the '\(r.fourCC(at: offset + 4))' chunk at offset \(offset) (\(length) bytes + CRC)")
      switch type {
      case Tag.IHDR:
        throw .malformed(.png, reason: "a second IHDR chunk at offset \(offset)")
      case Tag.acTL:
        guard length == 8 else { throw .malformed(.png, reason: "the acTL chunk is \(length) bytes long, not 8") }
        guard announcedFrames == nil else { throw .malformed(.png, reason: "a second acTL chunk at offset \(offset)") }
        guard !sawImageData else { throw .malformed(.png, reason: "the acTL chunk comes after the image data") }
        let frames = r.u32be(offset + 8)
        guard frames > 0 else { throw .malformed(.png, reason: "the acTL chunk announces 0 frames") }
        announcedFrames = frames
      case Tag.fcTL:
        frameControls += 1
      case Tag.IDAT:
        sawImageData = true
      case Tag.IEND:
        guard sawImageData else { throw .malformed(.png, reason: "IEND before any IDAT chunk: the PNG has no image") }
        var frames = 1
        if let announced = announcedFrames {
          guard announced == frameControls else {
            throw .malformed(
              .png, reason: "the acTL chunk announces \(announced) frames but the file has \(frameControls) fcTL chunks"
            )
          }
          frames = announced
        }
        return try checkedInfo(.png, width: width, height: height, frames: frames, maxSide: maxPNGSide)
      default:
        break
      }
      offset += 8 + length + 4
    }
  }
}

// MARK: - JPEG

extension ImageHeaders {
  /// JPEG: from `SOI`, segment by segment (APPn, COM, tables... skipped by their length, so an EXIF thumbnail's own
  /// SOF inside APP1 is never seen) to the frame header SOFn (C0–CF except DHT C4, JPG C8, DAC CC); then on, through
  /// the entropy-coded scans (a byte scan for markers: FF 00 is a stuffed byte, FF D0–D7 restart markers) up to `EOI`.
  /// Fill bytes (FF FF …) before a marker are skipped; standalone markers (RSTn, TEM, SOI) have no length. Any other
  /// byte where a marker should start is refused (libjpeg skips such bytes with a "corrupt data" warning; a cache
  /// that checks what it is given should not).
  static func parseJPEG(_ r: ByteReader) throws(ImageCacheError) -> ImageInfo {
    var offset = 2
    var size: (width: Int, height: Int)?
    while true {
      // A marker: FF, any number of fill FFs, then the marker code.
      try r.need(offset, 1, .jpeg, size == nil ? "a marker before the frame header (SOF)" : "a marker (no EOI yet)")
      guard r.u8(offset) == 0xFF else {
        throw .malformed(.jpeg, reason: "expected a marker (FF) at offset \(offset), found 0x\(hex(r.u8(offset)))")
      }
      while offset < r.count && r.u8(offset) == 0xFF { offset += 1 }
      try r.need(offset, 1, .jpeg, "the code of the marker at offset \(offset - 1)")
      let marker = r.u8(offset)
      let markerOffset = offset - 1
      offset += 1
      switch marker {
      case 0x01, 0xD0...0xD8:
        continue  // TEM, RSTn, SOI: standalone, no length
      case 0xD9:
        guard let size else {
          throw .malformed(
            .jpeg, reason: "the image ends (EOI at offset \(markerOffset)) before any frame header (SOF)")
        }
        return try checkedInfo(.jpeg, width: size.width, height: size.height, frames: 1, maxSide: 65_535)
      case 0x00:
        throw .malformed(.jpeg, reason: "invalid marker FF 00 at offset \(markerOffset) outside scan data")
      default:
        break
      }
      try r.need(offset, 2, .jpeg, "the length of the FF \(hex(marker)) segment at offset \(markerOffset)")
      let length = r.u16be(offset)
      guard length >= 2 else {
        throw .malformed(
          .jpeg, reason: "the FF \(hex(marker)) segment at offset \(markerOffset) has length \(length), less than 2")
      }
      try r.need(offset, length, .jpeg, "the FF \(hex(marker)) segment at offset \(markerOffset) (\(length) bytes)")
      let body = offset + 2
      let end = offset + length
      switch marker {
      case 0xC0...0xCF where marker != 0xC4 && marker != 0xC8 && marker != 0xCC:
        guard size == nil else {
          throw .malformed(.jpeg, reason: "a second frame header (SOF) at offset \(markerOffset)")
        }
        // P (1), Y (2), X (2), Nf (1), then 3 bytes per component.
        guard length >= 8 else {
          throw .malformed(
            .jpeg, reason: "the frame header (SOF) at offset \(markerOffset) is \(length) bytes, less than 8")
        }
        let components = Int(r.u8(body + 5))
        guard components > 0, length == 8 + 3 * components else {
          throw .malformed(
            .jpeg,
            reason: "the frame header (SOF) at offset \(markerOffset) is \(length) bytes for \(components) components")
        }
        let height = r.u16be(body + 1)
        let width = r.u16be(body + 3)
        if height == 0 {
          throw .malformed(.jpeg, reason: "the frame header gives height 0 (set later by a DNL marker): not supported")
        }
        size = (width, height)
        offset = end
      case 0xDA:
        guard size != nil else {
          throw .malformed(.jpeg, reason: "scan data (SOS at offset \(markerOffset)) before any frame header (SOF)")
        }
        offset = try skipEntropyCodedData(r, from: end)
      default:
        offset = end
      }
    }
  }

  /// The offset of the first marker after entropy-coded data: the next FF not followed by 00 (a stuffed byte), by
  /// a restart marker D0–D7, or by a fill byte FF.
  static func skipEntropyCodedData(_ r: ByteReader, from start: Int) throws(ImageCacheError) -> Int {
    var offset = start
    while true {
      guard let ff = r.bytes[offset...].firstIndex(of: 0xFF) else {
        throw .malformed(.jpeg, reason: "truncated: the scan data from offset \(start) runs to the end without EOI")
      }
      var next = ff + 1
      while next < r.count && r.u8(next) == 0xFF { next += 1 }
      guard next < r.count else {
        throw .malformed(.jpeg, reason: "truncated: the scan data from offset \(start) runs to the end without EOI")
      }
      switch r.u8(next) {
      case 0x00, 0xD0...0xD7:
        offset = next + 1
      default:
        return ff
      }
    }
  }

  static func hex(_ byte: UInt8) -> String { (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true) }
}

// MARK: - GIF

extension ImageHeaders {
  /// GIF 87a/89a: the logical screen (width, height LE 16-bit, optional global colour table), then blocks to the
  /// trailer 3B: image descriptors 2C (9 bytes, optional local colour table, LZW code size, sub-blocks) counted as
  /// frames, extensions 21 (label, sub-blocks).
  static func parseGIF(_ r: ByteReader) throws(ImageCacheError) -> ImageInfo {
    try r.need(6, 7, .gif, "the logical screen descriptor")
    let width = r.u16le(6)
    let height = r.u16le(8)
    let packed = r.u8(10)
    var offset = 13
    if packed & 0x80 != 0 {
      let tableBytes = 3 << (Int(packed & 0x07) + 1)
      try r.need(offset, tableBytes, .gif, "the global colour table (\(tableBytes) bytes)")
      offset += tableBytes
    }
    var frames = 0
    while true {
      try r.need(offset, 1, .gif, "a block (no trailer 3B yet)")
      let introducer = r.u8(offset)
      switch introducer {
      case 0x3B:
        guard frames > 0 else {
          throw .malformed(.gif, reason: "the trailer comes before any image: the GIF has no frame")
        }
        return try checkedInfo(.gif, width: width, height: height, frames: frames, maxSide: 65_535)
      case 0x2C:
        try r.need(offset, 10, .gif, "the image descriptor at offset \(offset)")
        let local = r.u8(offset + 9)
        offset += 10
        if local & 0x80 != 0 {
          let tableBytes = 3 << (Int(local & 0x07) + 1)
          try r.need(offset, tableBytes, .gif, "the local colour table (\(tableBytes) bytes) at offset \(offset)")
          offset += tableBytes
        }
        try r.need(offset, 1, .gif, "the LZW code size of frame \(frames + 1)")
        offset = try skipSubBlocks(r, from: offset + 1, what: "the image data of frame \(frames + 1)")
        frames += 1
      case 0x21:
        try r.need(offset, 2, .gif, "the extension label at offset \(offset)")
        offset = try skipSubBlocks(r, from: offset + 2, what: "the extension at offset \(offset)")
      default:
        throw .malformed(.gif, reason: "unknown block 0x\(hex(introducer)) at offset \(offset) (expected 2C, 21 or 3B)")
      }
    }
  }

  /// Skips a chain of sub-blocks (a length byte, that many bytes) up to its 0 terminator; each step moves ≥ 1 byte.
  static func skipSubBlocks(
    _ r: ByteReader, from start: Int, what: @autoclosure () -> String
  ) throws(ImageCacheError) -> Int {
    var offset = start
    while true {
      try r.need(offset, 1, .gif, "\(what()): a sub-block (no 0 terminator yet)")
      let length = Int(r.u8(offset))
      if length == 0 { return offset + 1 }
      try r.need(offset + 1, length, .gif, "\(what()): a sub-block of \(length) bytes at offset \(offset)")
      offset += 1 + length
    }
  }
}

// MARK: - WebP

extension ImageHeaders {
  /// WebP: `RIFF`, a size (the bytes after it; must fit the data and hold at least one chunk), `WEBP`, then chunks
  /// (FourCC, LE size, payload padded to even) to the RIFF end. The first chunk says which kind:
  /// - `VP8 ` (lossy): a 3-byte frame tag (key frame), start code 9D 01 2A, 14-bit width and height (+2 scale bits).
  /// - `VP8L` (lossless): signature 2F, then 14-bit width − 1, 14-bit height − 1, alpha bit, 3-bit version 0.
  /// - `VP8X` (extended): flags (animation 0x02), 24-bit canvas width − 1 and height − 1; when animated the frames
  ///   are the `ANMF` chunks, counted, and there must be at least one; otherwise a `VP8 ` or `VP8L` chunk must follow.
  static func parseWebP(_ r: ByteReader) throws(ImageCacheError) -> ImageInfo {
    let riffSize = r.u32le(4)
    guard riffSize >= 4 + 8 else {
      throw .malformed(.webp, reason: "the RIFF size \(riffSize) is too small to hold a chunk")
    }
    try r.need(8, riffSize, .webp, "the RIFF body (\(riffSize) bytes, as the RIFF header says)")
    let end = 8 + riffSize
    try r.need(12, 8, .webp, "the first chunk header")
    let first = r.tag(at: 12)
    let firstName = r.fourCC(at: 12)
    let firstSize = r.u32le(16)
    guard firstSize <= end - 20 else {
      throw .malformed(.webp, reason: "the '\(firstName)' chunk claims \(firstSize) bytes, past the RIFF end \(end)")
    }
    let payload = 20
    switch first {
    case Tag.VP8:
      guard firstSize >= 10 else {
        throw .malformed(.webp, reason: "the VP8 chunk is \(firstSize) bytes, too short for a frame header (10)")
      }
      guard r.u8(payload) & 0x01 == 0 else {
        throw .malformed(.webp, reason: "the VP8 frame is not a key frame")
      }
      guard r.u8(payload + 3) == 0x9D, r.u8(payload + 4) == 0x01, r.u8(payload + 5) == 0x2A else {
        throw .malformed(.webp, reason: "the VP8 start code 9D 01 2A is missing")
      }
      try checkChunks(r, from: 12, to: end)
      return try checkedInfo(
        .webp, width: r.u16le(payload + 6) & 0x3FFF, height: r.u16le(payload + 8) & 0x3FFF, frames: 1,
        maxSide: 16_383)
    case Tag.VP8L:
      guard firstSize >= 5 else {
        throw .malformed(.webp, reason: "the VP8L chunk is \(firstSize) bytes, too short for its header (5)")
      }
      guard r.u8(payload) == 0x2F else {
        throw .malformed(.webp, reason: "the VP8L signature 2F is missing (found \(hex(r.u8(payload))))")
      }
      let bits = r.u32le(payload + 1)
      guard bits >> 29 == 0 else { throw .malformed(.webp, reason: "unknown VP8L version \(bits >> 29)") }
      try checkChunks(r, from: 12, to: end)
      return try checkedInfo(
        .webp, width: (bits & 0x3FFF) + 1, height: (bits >> 14 & 0x3FFF) + 1, frames: 1, maxSide: 16_384)
    case Tag.VP8X:
      guard firstSize >= 10 else {
        throw .malformed(.webp, reason: "the VP8X chunk is \(firstSize) bytes, too short for its header (10)")
      }
      let animated = r.u8(payload) & 0x02 != 0
      let width = r.u24le(payload + 4) + 1
      let height = r.u24le(payload + 7) + 1
      let counts = try checkChunks(r, from: 12, to: end)
      let frames: Int
      if animated {
        guard counts.frames > 0 else {
          throw .malformed(.webp, reason: "the VP8X header says animated but the file has no ANMF frame")
        }
        frames = counts.frames
      } else {
        guard counts.images > 0 else {
          throw .malformed(.webp, reason: "the extended (VP8X) file has no image data (no VP8 or VP8L chunk)")
        }
        frames = 1
      }
      return try checkedInfo(.webp, width: width, height: height, frames: frames, maxSide: 1 << 24)
    default:
      throw .malformed(.webp, reason: "the first chunk is '\(firstName)', not VP8, VP8L or VP8X")
    }
  }

  /// Walks the chunks from `start` to `end` (the RIFF end): each must fit. Counts `ANMF` frames (each at least its
  /// 16-byte header) and top-level `VP8 `/`VP8L` image chunks.
  @discardableResult
  static func checkChunks(_ r: ByteReader, from start: Int, to end: Int) throws(ImageCacheError) -> (
    frames: Int, images: Int
  ) {
    var offset = start
    var frames = 0
    var images = 0
    while offset < end {
      guard end - offset >= 8 else {
        throw .malformed(
          .webp, reason: "truncated: \(end - offset) bytes at offset \(offset) cannot hold a chunk header")
      }
      let type = r.tag(at: offset)
      let size = r.u32le(offset + 4)
      let padded = size + (size & 1)
      guard padded <= end - offset - 8 else {
        throw .malformed(
          .webp,
          reason:
            "the '\(r.fourCC(at: offset))' chunk at offset \(offset) claims \(size) bytes, past the RIFF end \(end)")
      }
      switch type {
      case Tag.ANMF:
        guard size >= 16 else {
          throw .malformed(
            .webp, reason: "the ANMF chunk at offset \(offset) is \(size) bytes, less than its 16-byte header")
        }
        frames += 1
      case Tag.VP8, Tag.VP8L:
        images += 1
      default:
        break
      }
      offset += 8 + padded
    }
    return (frames, images)
  }
}
