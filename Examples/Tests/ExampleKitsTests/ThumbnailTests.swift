import Foundation
import GroupContainer
import TestImageKit
import Testing
import VideoWidgetKit

/// The video widget's thumbnails: PNG and JPEG decoded by libpng and libjpeg-turbo through the C shim, scaled while
/// decoding, drawn as half blocks; damaged and oversized images give errors, never a crash.
///
/// Mutants this suite catches (each tried once):
/// - the C shim without the pixel bound (`check_bounds` comparing only the sides): `oversizedImagesAreRefusedUnread`
///   fails (the 72 Mpx PNG and JPEG are decoded as far as their data goes and come back `corrupt`, not `tooLarge`).
/// - the half block with foreground and background swapped: `halfBlocksPutTheUpperPixelInTheForeground` fails.
/// - `VideoWidget.slide(at:)` returning nil instead of a placeholder on a cache miss: `aMissingImageGivesAPlaceholder`
///   fails.
@Suite(.timeLimit(.minutes(3))) struct ThumbnailTests {
  let decoding = ThumbnailDecoding()

  @Test func decodesATestImageKitPNG() throws {
    // TestImageKit's PNG comes from its own writer (grayscale, stored deflate): not from the libpng we decode with.
    let png = TestPNG.make(width: 40, height: 10, seed: 0x0807_0605_0403_0201)
    let image = try decoding.decode(png)
    #expect(image.width == 40 && image.height == 10)
    // Its first 8 pixels are the seed's bytes; gray comes out as r = g = b.
    for x in 0..<8 {
      let p = image.pixel(x: x, y: 0)
      #expect(p.r == UInt8(x + 1) && p.g == p.r && p.b == p.r, "pixel \(x): \(p)")
    }
    let gray = (0..<(image.width * image.height)).allSatisfy { (i: Int) -> Bool in
      let p = image.pixel(x: i % image.width, y: i / image.width)
      return p.r == p.g && p.r == p.b
    }
    #expect(gray)
  }

  /// The image cache's fixtures, made by other encoders (make-fixtures.sh): a progressive JPEG too, which libjpeg
  /// decodes through its whole-image coefficient buffer.
  @Test(arguments: ["baseline.jpg", "progressive.jpg", "exif-thumbnail.jpg", "still.png", "animated.png"])
  func decodesTheImageCacheFixtures(_ name: String) throws {
    // Examples/Tests/ExampleKitsTests/ThumbnailTests.swift → the repository's Tests/ImageCacheTests/Fixtures.
    let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Tests/ImageCacheTests/Fixtures")
    let data = try Data(contentsOf: fixtures.appendingPathComponent(name))
    let info = try ImageHeaders.parse(data)
    let image = try decoding.decode(data)
    #expect(image.width == info.pixelWidth && image.height == info.pixelHeight)
    let thumbnail = try decoding.thumbnail(data, maxWidth: 4, maxHeight: 4)
    #expect(thumbnail.width <= 4 && thumbnail.height <= 4 && thumbnail.width >= 1)
  }

  @Test func pngRoundTripsExactly() throws {
    let scene = DemoImages.scene(1, width: 96, height: 54)
    let decoded = try decoding.decode(try ImageEncoding.png(scene))
    #expect(decoded == scene)
  }

  @Test func jpegDecodesCloseToItsSource() throws {
    let scene = DemoImages.scene(0, width: 120, height: 80)
    let jpeg = try ImageEncoding.jpeg(scene, quality: 95)
    #expect(ThumbnailDecoding.format(of: jpeg) == "JPEG")
    let decoded = try decoding.decode(jpeg)
    #expect(decoded.width == 120 && decoded.height == 80)
    #expect(Self.meanDifference(decoded, scene) < 8, "lossy, but close")
  }

  @Test func scalingIsTheBoxFilterOfTheWholeImage() throws {
    let scene = DemoImages.scene(2, width: 200, height: 90)
    let png = try ImageEncoding.png(scene)
    // PNG: the shim's row-by-row box filter equals the reference over the whole bitmap, exactly.
    #expect(try decoding.decode(png, width: 32, height: 14) == scene.boxScaled(width: 32, height: 14))
    // JPEG: libjpeg's 1/2..1/8 IDCT scaling first, then the box: close to the reference.
    let jpeg = try ImageEncoding.jpeg(scene, quality: 95)
    let small = try decoding.decode(jpeg, width: 20, height: 9)
    #expect(small.width == 20 && small.height == 9 && small.sourceWidth == 200)
    #expect(Self.meanDifference(small, scene.boxScaled(width: 20, height: 9)) < 8)
  }

  @Test func thumbnailsKeepTheAspectAndNeverGrow() throws {
    #expect(Thumbnail.fittingSize(width: 1920, height: 1080, maxWidth: 32, maxHeight: 32) == (32, 18))
    #expect(Thumbnail.fittingSize(width: 640, height: 480, maxWidth: 32, maxHeight: 32) == (32, 24))
    #expect(Thumbnail.fittingSize(width: 100, height: 1000, maxWidth: 32, maxHeight: 32) == (3, 32))
    #expect(Thumbnail.fittingSize(width: 8, height: 4, maxWidth: 32, maxHeight: 32) == (8, 4))
    let wide = try ImageEncoding.jpeg(DemoImages.scene(3, width: 640, height: 360))
    let thumbnail = try decoding.thumbnail(wide, maxWidth: 32, maxHeight: 32)
    #expect(thumbnail.width == 32 && thumbnail.height == 18)
    #expect(thumbnail.sourceWidth == 640 && thumbnail.sourceHeight == 360)
    let tiny = try decoding.thumbnail(TestPNG.make(width: 8, height: 4), maxWidth: 32, maxHeight: 32)
    #expect(tiny.width == 8 && tiny.height == 4)
  }

  @Test func halfBlocksPutTheUpperPixelInTheForeground() {
    let image = Thumbnail(width: 2, height: 3, pixels: [255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 9, 9, 9, 7, 7, 7])
    let lines = TerminalArt.halfBlocks(image)
    #expect(lines.count == 2)
    #expect(
      lines[0]
        == "\u{1B}[38;2;255;0;0m\u{1B}[48;2;0;0;255m▀\u{1B}[38;2;0;255;0m\u{1B}[48;2;1;2;3m▀\u{1B}[0m")
    // An odd last row: the lower half keeps the terminal's background.
    #expect(lines[1] == "\u{1B}[38;2;9;9;9m\u{1B}[49m▀\u{1B}[38;2;7;7;7m\u{1B}[49m▀\u{1B}[0m")
  }

  @Test func progressBarsAndPlaceholders() {
    #expect(TerminalArt.progressBar(0.5, width: 10) == "[#####-----]  50 %")
    #expect(TerminalArt.progressBar(1.7, width: 4) == "[####] 100 %")
    #expect(TerminalArt.progressBar(nil, width: 3) == "[???]   ? %")
    let box = TerminalArt.placeholder(columns: 12, rows: 5, label: "missing")
    #expect(box.count == 5 && box.allSatisfy { $0.count == 12 })
    #expect(box[2] == "│ missing  │")
  }

  @Test func damagedImagesGiveErrors() throws {
    let png = try ImageEncoding.png(DemoImages.scene(1, width: 64, height: 48))
    let jpeg = try ImageEncoding.jpeg(DemoImages.scene(0, width: 64, height: 48))
    func error(_ data: Data) -> ThumbnailError? {
      do throws(ThumbnailError) {
        _ = try decoding.decode(data)
        return nil
      } catch { return error }
    }
    guard case .corrupt(let format, let message)? = error(png.prefix(png.count / 2)) else {
      Issue.record("a truncated PNG decoded: \(String(describing: error(png.prefix(png.count / 2))))")
      return
    }
    #expect(format == "PNG" && message.contains("truncated"), "\(message)")
    #expect(error(jpeg.prefix(jpeg.count / 2)).map { if case .corrupt("JPEG", _) = $0 { true } else { false } } == true)
    var badCRC = png
    badCRC[png.count / 2] ^= 0x55  // inside IDAT: its CRC no longer matches
    #expect(
      error(badCRC).map { if case .corrupt("PNG", _) = $0 { true } else { false } } == true,
      "\(String(describing: error(badCRC)))")
    #expect(
      error(Data("not an image at all".utf8))
        == .unsupportedFormat(
          "the bytes start with neither the PNG nor the JPEG signature"))
    #expect(error(Data()) != nil)
    #expect(error(Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])) != nil)
    #expect(error(Data([0xFF, 0xD8, 0xFF])) != nil)
    // Every message says what happened.
    #expect(error(jpeg.prefix(100))?.description.contains("damaged JPEG") == true)
  }

  @Test func oversizedImagesAreRefusedUnread() throws {
    // 9000 x 8000 = 72 Mpx: over the 64 Mpx bound, under each side's and the cache's header limits.
    var png = [UInt8](try ImageEncoding.png(DemoImages.scene(0, width: 16, height: 16)))
    Self.put(9000, at: 16, in: &png)
    Self.put(8000, at: 20, in: &png)
    let crc = Self.crc32(png[12..<29])
    png.replaceSubrange(
      29..<33, with: [UInt8(crc >> 24), UInt8(crc >> 16 & 0xff), UInt8(crc >> 8 & 0xff), UInt8(crc & 0xff)])
    var jpeg = [UInt8](try ImageEncoding.jpeg(DemoImages.scene(0, width: 16, height: 16)))
    let sof = try #require((0..<(jpeg.count - 1)).first { jpeg[$0] == 0xFF && jpeg[$0 + 1] == 0xC0 })
    jpeg.replaceSubrange((sof + 5)..<(sof + 9), with: [0x1F, 0x40, 0x23, 0x28])  // height 8000, width 9000
    for (bytes, format) in [(png, "PNG"), (jpeg, "JPEG")] {
      let expected = ThumbnailError.tooLarge(format: format, width: 9000, height: 8000, limit: 64 << 20)
      // Through the shim alone, and through the header check the widget makes first.
      #expect(throws: expected) { try decoding.decode(Data(bytes)) }
      #expect(throws: expected) { try decoding.thumbnail(Data(bytes), maxWidth: 32, maxHeight: 32) }
    }
    // A smaller bound is honoured too.
    let small = ThumbnailDecoding(maximumPixels: 100)
    #expect(throws: ThumbnailError.self) {
      try small.decode(try ImageEncoding.png(DemoImages.scene(0, width: 16, height: 16)))
    }
  }

  /// A cheap fuzz of the decoder entry points: flipped bytes and cuts of real images end in an image or an error.
  @Test func mangledImagesNeverCrash() throws {
    let seeds = [
      try ImageEncoding.png(DemoImages.scene(1, width: 40, height: 30)),
      try ImageEncoding.jpeg(DemoImages.scene(2, width: 40, height: 30)),
      TestPNG.make(width: 16, height: 8, seed: 3),
    ]
    var generator = SystemRandomNumberGenerator()
    var outcomes = (images: 0, errors: 0)
    for seed in seeds {
      for _ in 0..<150 {
        var bytes = [UInt8](seed)
        for _ in 0..<Int.random(in: 1...6, using: &generator) {
          let i = Int.random(in: 0..<bytes.count, using: &generator)
          bytes[i] = UInt8.random(in: 0...255, using: &generator)
        }
        if Bool.random(using: &generator) { bytes.removeLast(Int.random(in: 0..<bytes.count, using: &generator)) }
        do {
          let image = try decoding.thumbnail(Data(bytes), maxWidth: 32, maxHeight: 32)
          #expect(image.pixels.count == image.width * image.height * 3)
          outcomes.images += 1
        } catch {
          #expect(!error.description.isEmpty)
          outcomes.errors += 1
        }
      }
    }
    #expect(outcomes.errors > 0)
  }

  @Test func aMissingImageGivesAPlaceholder() throws {
    let root = try TestRoot()
    let video = try VideoWidget(
      container: try GroupContainer(identifier: "group.com.example.simpletimer", root: root.url))
    let cached = "http://127.0.0.1/files/ocean.png"
    let missing = "http://127.0.0.1/files/lost.jpg"
    let damaged = "http://127.0.0.1/files/damaged.png"
    try video.save(history: [("B", 10), ("A", 100)], imageURLs: [cached, missing, damaged])
    try video.cache.store(try ImageEncoding.png(DemoImages.scene(1, width: 64, height: 48)), forKey: cached)
    // A PNG whose chunks are whole but whose pixel data is changed: the cache takes it (it reads headers), libpng
    // does not (the IDAT CRC).
    var damagedPNG = try ImageEncoding.png(DemoImages.scene(1, width: 64, height: 48))
    damagedPNG[damagedPNG.count / 2] ^= 0x55
    try video.cache.store(damagedPNG, forKey: damaged)
    guard case .image(_, let thumbnail)? = video.slide(at: 0) else { Issue.record("no image"); return }
    #expect(thumbnail.width == 32 && thumbnail.height == 24)
    #expect(video.slide(at: 1) == .placeholder(url: missing, reason: "not in the cache"))
    guard case .placeholder(_, let reason)? = video.slide(at: 2) else { Issue.record("a damaged image drawn"); return }
    #expect(reason.contains("damaged PNG"), "\(reason)")
    #expect(video.slide(at: 3)?.url == cached, "the rotation wraps")
    let frame = video.frame(try #require(video.slide(at: 1)), position: 2, count: 3, terminal: true)
    #expect(frame.contains { $0.contains("not in the cache") } && frame.first == "2/3  lost.jpg")
    #expect(video.history().map(\.title) == ["B", "A"], "the host's order")
    #expect(
      video.frame(try #require(video.slide(at: 0)), position: 1, count: 3, terminal: false)[1].hasPrefix("image: 64x48")
    )
  }

  static func meanDifference(_ a: Thumbnail, _ b: Thumbnail) -> Double {
    precondition(a.pixels.count == b.pixels.count)
    let total = zip(a.pixels, b.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }
    return Double(total) / Double(a.pixels.count)
  }

  static func put(_ value: UInt32, at offset: Int, in bytes: inout [UInt8]) {
    bytes.replaceSubrange(
      offset..<(offset + 4),
      with: [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)])
  }

  static func crc32(_ bytes: ArraySlice<UInt8>) -> UInt32 {
    var c: UInt32 = 0xffff_ffff
    for byte in bytes {
      c ^= UInt32(byte)
      for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
    }
    return c ^ 0xffff_ffff
  }
}
