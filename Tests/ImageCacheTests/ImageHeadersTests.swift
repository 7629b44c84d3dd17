import Foundation
import ImageCache
import TestSupport
import Testing

/// The real files of Fixtures/ (made by Fixtures/make-fixtures.sh), each with its own pixel size.
struct Fixture: Sendable, CustomStringConvertible {
  var name: String
  var format: ImageFormat
  var width: Int
  var height: Int
  var frames: Int
  var description: String { name }

  static let all: [Fixture] = [
    Fixture(name: "still.png", format: .png, width: 37, height: 23, frames: 1),
    Fixture(name: "animated.png", format: .png, width: 19, height: 11, frames: 3),
    Fixture(name: "baseline.jpg", format: .jpeg, width: 41, height: 29, frames: 1),
    Fixture(name: "progressive.jpg", format: .jpeg, width: 43, height: 31, frames: 1),
    // Carries a 16x12 EXIF thumbnail (its own SOF inside APP1).
    Fixture(name: "exif-thumbnail.jpg", format: .jpeg, width: 120, height: 80, frames: 1),
    Fixture(name: "still87a.gif", format: .gif, width: 33, height: 21, frames: 1),
    Fixture(name: "animated89a.gif", format: .gif, width: 27, height: 17, frames: 3),
    Fixture(name: "lossy.webp", format: .webp, width: 45, height: 35, frames: 1),
    Fixture(name: "lossless.webp", format: .webp, width: 47, height: 27, frames: 1),
    Fixture(name: "alpha.webp", format: .webp, width: 49, height: 39, frames: 1),
    Fixture(name: "animated.webp", format: .webp, width: 51, height: 25, frames: 3),
  ]

  static let directory: URL = Bundle.module.url(forResource: "Fixtures", withExtension: nil)!

  func data() throws -> Data { try Data(contentsOf: Fixture.directory.appendingPathComponent(name)) }
}

/// The reason of a `.malformed` error (nil for any other outcome), for assertions on what the parser says.
func malformedReason(_ bytes: [UInt8], format: ImageFormat) -> String? {
  do {
    _ = try ImageHeaders.parse(Data(bytes))
    return nil
  } catch {
    guard error.code == .malformed, error.format == format, let reason = error.reason else { return nil }
    return reason
  }
}

/// Header parsing: real files of every format and variant, every truncation of each, and hostile crafted headers.
///
/// Mutants this suite catches (each tried once, then restored):
/// - `ByteReader.need` bounds check removed: an out-of-bounds trap in `fixturesParse` (the WebP fixtures).
/// - JPEG APPn bodies walked as segments instead of skipped by their length: `jpegSOFInsideAPPnIsNotTaken`,
///   `fixturesParse` (exif-thumbnail.jpg), `everyTruncationIsRefused`, `jpegCrafted`.
/// - DHT (C4) taken as a frame header: `jpegCrafted`, `fixturesParse`, `jpegFillBytesAndStandaloneMarkers`.
/// - The JPEG `length >= 2` check removed: `jpegSegmentLengthBelowTwo`.
/// - GIF sub-block lengths not checked against the data: `gifGiantSubBlockChain`.
/// - WebP RIFF size trusted without checking it against the data: an out-of-bounds trap in
///   `everyTruncationIsRefused` (lossy.webp cut short).
/// - VP8X animated with no ANMF accepted as 0 frames: `webpAnimatedWithoutFrames`.
/// - APNG frame count taken from acTL without comparing it with the fcTL chunks: `apngFrameCountMismatch`.
@Suite(.runSlot(.minutes(10))) struct ImageHeadersTests {
  @Test(arguments: Fixture.all)
  func fixturesParse(_ fixture: Fixture) throws {
    let info = try ImageHeaders.parse(try fixture.data())
    #expect(
      info
        == ImageInfo(
          format: fixture.format, pixelWidth: fixture.width, pixelHeight: fixture.height,
          frameCount: fixture.frames))
    let image = try CachedImage(data: try fixture.data())
    #expect(image.info == info)
  }

  @Test func fixturesAreSmall() throws {
    for fixture in Fixture.all { #expect(try fixture.data().count < 20_000, "\(fixture.name)") }
  }

  /// Every prefix shorter than the file is refused as `.malformed(itsFormat)` saying "truncated" (the empty one as
  /// an unsupported format), and none crashes.
  @Test(arguments: Fixture.all)
  func everyTruncationIsRefused(_ fixture: Fixture) throws {
    let bytes = [UInt8](try fixture.data())
    #expect(throws: ImageCacheError.unsupportedFormat(signature: "no bytes (the data is empty)")) {
      try ImageHeaders.parse(Data())
    }
    for length in 1..<bytes.count {
      let reason = malformedReason(Array(bytes[..<length]), format: fixture.format)
      #expect(reason?.contains("truncated") == true, "\(fixture.name) cut to \(length) bytes: \(reason ?? "accepted")")
    }
  }

  /// Data from a slice (a non-zero start index) parses the same.
  @Test func parsesASliceOfLargerData() throws {
    let bytes = try Fixture.all[2].data()
    let padded = Data([1, 2, 3]) + bytes
    let slice = padded[3...]
    #expect(try ImageHeaders.parse(slice).pixelWidth == 41)
  }

  @Test func unknownSignaturesAreUnsupported() throws {
    #expect(throws: ImageCacheError.unsupportedFormat(signature: "68 65 6c 6c 6f")) {
      try ImageHeaders.parse(Data("hello".utf8))
    }
    // BMP, TIFF, a RIFF that is not WebP (WAVE): unsupported, with the first 12 bytes shown.
    #expect(throws: ImageCacheError.unsupportedFormat(signature: "42 4d 00 00 00 00 00 00 00 00 00 00 …")) {
      try ImageHeaders.parse(Data([0x42, 0x4D] + [UInt8](repeating: 0, count: 30)))
    }
    #expect(throws: ImageCacheError.self) { try ImageHeaders.parse(Data("RIFF\u{4}\0\0\0WAVEfmt ".utf8)) }
    let error = ImageCacheError.unsupportedFormat(signature: "68 65")
    #expect(error.description.contains("PNG, JPEG, GIF or WebP"))
  }

  // MARK: PNG

  func pngChunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
    be32(body.count) + Array(type.utf8) + body + [0, 0, 0, 0]  // CRCs are not checked
  }
  func be32(_ value: Int) -> [UInt8] {
    [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
  }
  func png(width: Int, height: Int, between: [UInt8] = [], idat: Bool = true) -> [UInt8] {
    [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + pngChunk("IHDR", be32(width) + be32(height) + [8, 2, 0, 0, 0])
      + between + (idat ? pngChunk("IDAT", [1, 2, 3]) : []) + pngChunk("IEND", [])
  }

  @Test func pngCrafted() throws {
    #expect(malformedReason(png(width: 5, height: 7), format: .png) == nil)
    #expect(try ImageHeaders.parse(Data(png(width: 5, height: 7))).pixelWidth == 5)
    #expect(malformedReason(png(width: 0, height: 7), format: .png)?.contains("0 pixels") == true)
    #expect(malformedReason(png(width: 7, height: 0), format: .png)?.contains("0 pixels") == true)
    // 2^31 is above the PNG limit; 65,536 × 65,536 is within it per side but above the pixel limit.
    #expect(malformedReason(png(width: 1 << 31, height: 1), format: .png)?.contains("sides above") == true)
    #expect(malformedReason(png(width: 65_536, height: 65_536), format: .png)?.contains("more than") == true)
    // A long thin PNG within both limits is fine.
    #expect(malformedReason(png(width: 1_000_000, height: 2), format: .png) == nil)
    #expect(malformedReason(png(width: 5, height: 7, idat: false), format: .png)?.contains("no image") == true)
  }

  @Test func pngIHDRMustComeFirstAndBe13Bytes() {
    let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    let textFirst = signature + pngChunk("tEXt", [65]) + Array(png(width: 1, height: 1).dropFirst(8))
    #expect(malformedReason(textFirst, format: .png)?.contains("not IHDR") == true)
    let short = signature + pngChunk("IHDR", be32(1) + be32(1)) + pngChunk("IEND", [])
    #expect(malformedReason(short, format: .png)?.contains("not 13") == true)
    let twice = png(width: 2, height: 2, between: pngChunk("IHDR", be32(1) + be32(1) + [8, 2, 0, 0, 0]))
    #expect(malformedReason(twice, format: .png)?.contains("second IHDR") == true)
  }

  @Test func pngChunkLengthsPastTheEnd() throws {
    // A chunk claiming 2^31 − 1 bytes in a 60-byte file; and one claiming 2^32 − 1 (above the PNG limit).
    var lie = png(width: 3, height: 3)
    lie.replaceSubrange(33..<37, with: be32(0x7FFF_FFFF))
    #expect(malformedReason(lie, format: .png)?.contains("truncated") == true)
    lie.replaceSubrange(33..<37, with: be32(0xFFFF_FFFF))
    #expect(malformedReason(lie, format: .png)?.contains("above 2^31") == true)
    // No IEND at all.
    #expect(malformedReason(Array(png(width: 3, height: 3).dropLast(12)), format: .png)?.contains("no IEND") == true)
  }

  @Test func apngFrameCountMismatch() throws {
    let acTL = { (frames: Int) in self.pngChunk("acTL", self.be32(frames) + self.be32(0)) }
    let fcTL = pngChunk("fcTL", [UInt8](repeating: 0, count: 26))
    #expect(try ImageHeaders.parse(Data(png(width: 4, height: 4, between: acTL(2) + fcTL + fcTL))).frameCount == 2)
    // acTL claims a million frames, the file holds two.
    #expect(
      malformedReason(png(width: 4, height: 4, between: acTL(1_000_000) + fcTL + fcTL), format: .png)?
        .contains("announces 1000000 frames but the file has 2") == true)
    #expect(malformedReason(png(width: 4, height: 4, between: acTL(0)), format: .png)?.contains("0 frames") == true)
    let twice = png(width: 4, height: 4, between: acTL(1) + acTL(1) + fcTL)
    #expect(malformedReason(twice, format: .png)?.contains("second acTL") == true)
  }

  // MARK: JPEG

  func segment(_ marker: UInt8, _ body: [UInt8]) -> [UInt8] {
    [0xFF, marker, UInt8((body.count + 2) >> 8), UInt8((body.count + 2) & 0xFF)] + body
  }
  func sof(_ marker: UInt8 = 0xC0, width: Int, height: Int) -> [UInt8] {
    segment(
      marker, [8, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF), 1, 1, 0x11, 0])
  }
  let sos: [UInt8] = [0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]
  func jpeg(_ middle: [UInt8], scan: [UInt8] = [0x12, 0x34]) -> [UInt8] {
    [0xFF, 0xD8] + middle + sos + scan + [0xFF, 0xD9]
  }

  @Test func jpegCrafted() throws {
    #expect(try ImageHeaders.parse(Data(jpeg(sof(width: 300, height: 200)))).pixelWidth == 300)
    // Every SOFn counts (progressive C2, lossless C3, arithmetic C9...); DHT C4, JPG C8, DAC CC do not.
    for marker: UInt8 in [0xC1, 0xC2, 0xC3, 0xC5, 0xC9, 0xCB, 0xCF] {
      #expect(try ImageHeaders.parse(Data(jpeg(sof(marker, width: 9, height: 8)))).pixelHeight == 8)
    }
    for marker: UInt8 in [0xC4, 0xC8, 0xCC] {
      let notAFrame = segment(marker, [8, 0, 5, 0, 5, 1, 1, 0x11, 0])
      #expect(try ImageHeaders.parse(Data(jpeg(notAFrame + sof(width: 7, height: 6)))).pixelWidth == 7)
    }
    #expect(malformedReason(jpeg(sof(width: 0, height: 5)), format: .jpeg)?.contains("0 pixels") == true)
    #expect(malformedReason(jpeg(sof(width: 5, height: 0)), format: .jpeg)?.contains("DNL") == true)
    #expect(malformedReason(jpeg([]), format: .jpeg)?.contains("before any frame header") == true)
    #expect(
      malformedReason([0xFF, 0xD8] + segment(0xE0, [1, 2]) + [0xFF, 0xD9], format: .jpeg)?
        .contains("before any frame header") == true)
    // 65,535 × 65,535 is within the side limit but above the pixel limit.
    #expect(malformedReason(jpeg(sof(width: 65_535, height: 65_535)), format: .jpeg)?.contains("more than") == true)
    let badComponents = segment(0xC0, [8, 0, 5, 0, 5, 3, 1, 0x11, 0])
    #expect(malformedReason(jpeg(badComponents), format: .jpeg)?.contains("components") == true)
    let twoFrames = jpeg(sof(width: 5, height: 5) + sof(width: 6, height: 6))
    #expect(malformedReason(twoFrames, format: .jpeg)?.contains("second frame header") == true)
  }

  /// An SOF inside APP1 (an EXIF thumbnail) is skipped with its segment; a file with no other SOF is refused.
  @Test func jpegSOFInsideAPPnIsNotTaken() throws {
    let thumbnail = [0xFF, 0xD8] + sof(width: 16, height: 12) + [0xFF, 0xD9]
    let app1 = segment(0xE1, Array("Exif\0\0".utf8) + thumbnail)
    #expect(try ImageHeaders.parse(Data(jpeg(app1 + sof(width: 640, height: 480)))).pixelWidth == 640)
    #expect(malformedReason(jpeg(app1), format: .jpeg)?.contains("before any frame header") == true)
  }

  @Test func jpegSegmentLengthBelowTwo() throws {
    for length: UInt8 in [0, 1] {
      let bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, length] + sof(width: 5, height: 5) + sos + [0xFF, 0xD9]
      #expect(malformedReason(bytes, format: .jpeg)?.contains("has length \(length), less than 2") == true)
    }
  }

  @Test func jpegSegmentLengthPastTheEnd() throws {
    let bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF, 1, 2, 3]
    #expect(malformedReason(bytes, format: .jpeg)?.contains("truncated") == true)
  }

  /// Fill bytes (FF FF …) before markers, RSTn and TEM standalone markers, stuffed FF 00 and restart markers in the
  /// scan data: all walked over; 100,000 fill bytes are linear work, not a hang.
  @Test func jpegFillBytesAndStandaloneMarkers() throws {
    // FF FF FF FF FF D0 (RST0 after fill bytes), FF 01 (TEM), then the SOF.
    let middle = [UInt8](repeating: 0xFF, count: 5) + [0xD0, 0xFF, 0x01] + sof(width: 12, height: 10)
    let scan: [UInt8] = [0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD3, 0x56, 0xFF, 0xFF, 0xD4, 0x78]
    #expect(try ImageHeaders.parse(Data(jpeg(middle, scan: scan))).pixelWidth == 12)
    // Another scan after tables (progressive): SOS, data, DHT, SOS, data, EOI.
    let progressive =
      [0xFF, 0xD8] + sof(0xC2, width: 3, height: 4) + sos + [1, 2] + segment(0xC4, [0, 1]) + sos + [3] + [0xFF, 0xD9]
    #expect(try ImageHeaders.parse(Data(progressive)).pixelHeight == 4)
    let manyFills = [0xFF, 0xD8] + [UInt8](repeating: 0xFF, count: 100_000)
    #expect(malformedReason(manyFills, format: .jpeg)?.contains("truncated") == true)
    let scanWithoutEOI = [0xFF, 0xD8] + sof(width: 5, height: 5) + sos + [UInt8](repeating: 0x11, count: 10_000)
    #expect(malformedReason(scanWithoutEOI, format: .jpeg)?.contains("without EOI") == true)
  }

  @Test func jpegGarbageWhereAMarkerShouldBe() throws {
    let bytes = [0xFF, 0xD8] + segment(0xE0, [1]) + [0x00, 0x00] + sof(width: 5, height: 5) + sos + [0xFF, 0xD9]
    #expect(malformedReason(bytes, format: .jpeg)?.contains("expected a marker") == true)
  }

  // MARK: GIF

  func gif(
    width: Int = 10, height: Int = 10, globalTable: Bool = false, blocks: [UInt8], trailer: Bool = true
  ) -> [UInt8] {
    Array("GIF89a".utf8) + [UInt8(width & 0xFF), UInt8(width >> 8), UInt8(height & 0xFF), UInt8(height >> 8)]
      + [globalTable ? 0x80 : 0, 0, 0] + (globalTable ? [UInt8](repeating: 7, count: 6) : []) + blocks
      + (trailer ? [0x3B] : [])
  }
  /// An image descriptor with a 1-sub-block image.
  let frame: [UInt8] = [0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0]
  let graphicControl: [UInt8] = [0x21, 0xF9, 4, 0, 10, 0, 0, 0]

  @Test func gifCrafted() throws {
    #expect(try ImageHeaders.parse(Data(gif(blocks: frame))).frameCount == 1)
    #expect(try ImageHeaders.parse(Data(gif(globalTable: true, blocks: graphicControl + frame))).pixelWidth == 10)
    // 2,000 frames are counted by walking them.
    let many = gif(blocks: Array([[UInt8]](repeating: graphicControl + frame, count: 2_000).joined()))
    #expect(try ImageHeaders.parse(Data(many)).frameCount == 2_000)
    #expect(malformedReason(gif(blocks: []), format: .gif)?.contains("no frame") == true)
    #expect(malformedReason(gif(blocks: frame, trailer: false), format: .gif)?.contains("no trailer") == true)
    #expect(malformedReason(gif(blocks: [0x99] + frame), format: .gif)?.contains("unknown block 0x99") == true)
    #expect(malformedReason(gif(width: 0, blocks: frame), format: .gif)?.contains("0 pixels") == true)
    #expect(
      malformedReason(gif(width: 65_535, height: 65_535, blocks: frame), format: .gif)?.contains("more than") == true)
    // A global colour table of 3 × 256 bytes announced in a 20-byte file.
    var table = gif(blocks: frame)
    table[10] = 0x87
    #expect(malformedReason(table, format: .gif)?.contains("global colour table") == true)
  }

  /// A chain of 256 KB of 255-byte sub-blocks with no terminator: refused as truncated after linear work;
  /// with its terminator it is one (large) extension and parses.
  @Test func gifGiantSubBlockChain() throws {
    let chain = Array([[UInt8]](repeating: [255] + [UInt8](repeating: 0x41, count: 255), count: 1_000).joined())
    #expect(
      malformedReason(gif(blocks: [0x21, 0xFE] + chain, trailer: false), format: .gif)?.contains("no 0 terminator")
        == true)
    // Without the terminator, the trailer byte is read as one more sub-block length: still refused.
    #expect(malformedReason(gif(blocks: [0x21, 0xFE] + chain), format: .gif) != nil)
    #expect(try ImageHeaders.parse(Data(gif(blocks: [0x21, 0xFE] + chain + [0] + frame))).frameCount == 1)
    // A sub-block claiming more bytes than are left.
    #expect(
      malformedReason(gif(blocks: [0x21, 0xFE, 200, 1, 2, 3], trailer: false), format: .gif)?.contains(
        "sub-block of 200")
        == true)
  }

  // MARK: WebP

  func le32(_ value: Int) -> [UInt8] {
    [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 24 & 0xFF)]
  }
  func riffChunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
    Array(type.utf8) + le32(body.count) + body + (body.count % 2 == 1 ? [0] : [])
  }
  func webp(_ chunks: [UInt8], riffSize: Int? = nil) -> [UInt8] {
    Array("RIFF".utf8) + le32(riffSize ?? (chunks.count + 4)) + Array("WEBP".utf8) + chunks
  }
  func vp8(width: Int, height: Int, keyFrame: Bool = true, startCode: [UInt8] = [0x9D, 0x01, 0x2A]) -> [UInt8] {
    riffChunk(
      "VP8 ",
      [keyFrame ? 0x10 : 0x11, 0, 0] + startCode + [UInt8(width & 0xFF), UInt8(width >> 8)]
        + [UInt8(height & 0xFF), UInt8(height >> 8), 0, 0])
  }
  func vp8x(flags: UInt8, width: Int, height: Int) -> [UInt8] {
    let w = width - 1
    let h = height - 1
    return riffChunk(
      "VP8X",
      [
        flags, 0, 0, 0, UInt8(w & 0xFF), UInt8(w >> 8 & 0xFF), UInt8(w >> 16), UInt8(h & 0xFF), UInt8(h >> 8 & 0xFF),
        UInt8(h >> 16),
      ])
  }
  let anmf: [UInt8] = Array("ANMF".utf8) + [16, 0, 0, 0] + [UInt8](repeating: 0, count: 16)

  @Test func webpCrafted() throws {
    #expect(try ImageHeaders.parse(Data(webp(vp8(width: 300, height: 200)))).pixelWidth == 300)
    // The 2 scale bits above the 14-bit size are not part of it.
    #expect(try ImageHeaders.parse(Data(webp(vp8(width: 0xC000 | 300, height: 200)))).pixelWidth == 300)
    #expect(malformedReason(webp(vp8(width: 0, height: 5)), format: .webp)?.contains("0 pixels") == true)
    #expect(
      malformedReason(webp(vp8(width: 5, height: 5, keyFrame: false)), format: .webp)?.contains("key frame") == true)
    #expect(
      malformedReason(webp(vp8(width: 5, height: 5, startCode: [0x9D, 0x01, 0x2B])), format: .webp)?.contains(
        "start code") == true)
    let lossless = { (signature: UInt8, bits: Int) in self.webp(self.riffChunk("VP8L", [signature] + self.le32(bits))) }
    #expect(try ImageHeaders.parse(Data(lossless(0x2F, (99 << 14) | 199))).pixelHeight == 100)
    #expect(malformedReason(lossless(0x2E, 0), format: .webp)?.contains("signature 2F") == true)
    #expect(malformedReason(lossless(0x2F, 1 << 29), format: .webp)?.contains("version 1") == true)
    let unknownFirst = webp(riffChunk("ICCP", [1, 2]) + vp8(width: 3, height: 3))
    #expect(malformedReason(unknownFirst, format: .webp)?.contains("not VP8, VP8L or VP8X") == true)
    // An extended file with alpha: the canvas size (24-bit + 1), image in a VP8 chunk after ALPH.
    let alpha = webp(
      vp8x(flags: 0x10, width: 70_000, height: 2) + riffChunk("ALPH", [0, 1, 2]) + vp8(width: 5, height: 5))
    #expect(try ImageHeaders.parse(Data(alpha)).pixelWidth == 70_000)
    #expect(
      malformedReason(webp(vp8x(flags: 0x10, width: 16_384, height: 16_385) + vp8(width: 5, height: 5)), format: .webp)?
        .contains("more than") == true)
    #expect(
      malformedReason(webp(vp8x(flags: 0x10, width: 5, height: 5) + riffChunk("ALPH", [0])), format: .webp)?.contains(
        "no image data") == true)
  }

  @Test func webpAnimatedWithoutFrames() throws {
    let animated = vp8x(flags: 0x02, width: 20, height: 10) + riffChunk("ANIM", [0, 0, 0, 0, 0, 0])
    #expect(malformedReason(webp(animated), format: .webp)?.contains("no ANMF frame") == true)
    #expect(try ImageHeaders.parse(Data(webp(animated + anmf + anmf + anmf + anmf))).frameCount == 4)
    let shortFrame = Array("ANMF".utf8) + [4, 0, 0, 0, 0, 0, 0, 0]
    #expect(
      malformedReason(webp(animated + shortFrame), format: .webp)?.contains("less than its 16-byte header") == true)
  }

  @Test func webpRIFFSizeLies() throws {
    let body = vp8(width: 5, height: 5)
    // Larger than the data: truncated. Smaller than one chunk: refused. Cutting a chunk: past the RIFF end.
    #expect(malformedReason(webp(body, riffSize: 0xFFFF_FFF0), format: .webp)?.contains("truncated") == true)
    #expect(malformedReason(webp(body, riffSize: 4), format: .webp)?.contains("too small") == true)
    #expect(malformedReason(webp(body, riffSize: 4 + 12), format: .webp)?.contains("past the RIFF end") == true)
    // Trailing bytes after the RIFF end are ignored.
    #expect(malformedReason(webp(body) + [1, 2, 3], format: .webp) == nil)
    // A chunk after the image claiming 2^32 − 1 bytes.
    let huge = body + Array("EXIF".utf8) + le32(0xFFFF_FFFF)
    #expect(malformedReason(webp(huge), format: .webp)?.contains("past the RIFF end") == true)
  }
}
