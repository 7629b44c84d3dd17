// Thumbnails of the video widget: PNG and JPEG decoded by libpng and libjpeg-turbo (through the C shim
// CThumbnailCodec, which turns their longjmp errors into return codes), scaled down while decoding.
import CThumbnailCodec
import Foundation
import ImageCache

/// An RGB bitmap, 3 bytes a pixel, rows top to bottom.
public struct Thumbnail: Sendable, Hashable {
  public var width: Int
  public var height: Int
  /// `width * height * 3` bytes.
  public var pixels: [UInt8]
  /// The size of the image it was made from.
  public var sourceWidth: Int
  public var sourceHeight: Int

  public init(width: Int, height: Int, pixels: [UInt8], sourceWidth: Int? = nil, sourceHeight: Int? = nil) {
    precondition(pixels.count == width * height * 3, "\(pixels.count) bytes for \(width)x\(height) RGB")
    self.width = width
    self.height = height
    self.pixels = pixels
    self.sourceWidth = sourceWidth ?? width
    self.sourceHeight = sourceHeight ?? height
  }

  /// The pixel at (x, y) as (r, g, b).
  public func pixel(x: Int, y: Int) -> (r: UInt8, g: UInt8, b: UInt8) {
    let i = (y * width + x) * 3
    return (pixels[i], pixels[i + 1], pixels[i + 2])
  }

  /// The largest size with the source's aspect ratio inside `maxWidth` x `maxHeight`, never larger than the
  /// source, at least 1 x 1.
  public static func fittingSize(width: Int, height: Int, maxWidth: Int, maxHeight: Int) -> (width: Int, height: Int) {
    guard width > 0, height > 0 else { return (1, 1) }
    let scale = min(1, min(Double(maxWidth) / Double(width), Double(maxHeight) / Double(height)))
    return (max(1, Int((Double(width) * scale).rounded())), max(1, Int((Double(height) * scale).rounded())))
  }

  /// This bitmap scaled down to exactly `width` x `height` by the box filter the decoder uses (each source pixel
  /// counts in the one output pixel its position falls in): the reference the decoder's scaling is tested against.
  public func boxScaled(width tw: Int, height th: Int) -> Thumbnail {
    precondition(tw >= 1 && th >= 1 && tw <= width && th <= height, "box scaling only shrinks")
    var sums = [Int](repeating: 0, count: tw * th * 3)
    var counts = [Int](repeating: 0, count: tw * th)
    for y in 0..<height {
      let oy = y * th / height
      for x in 0..<width {
        let o = oy * tw + x * tw / width
        let i = (y * width + x) * 3
        for c in 0..<3 { sums[o * 3 + c] += Int(pixels[i + c]) }
        counts[o] += 1
      }
    }
    var out = [UInt8](repeating: 0, count: tw * th * 3)
    for o in 0..<(tw * th) {
      let n = max(1, counts[o])
      for c in 0..<3 { out[o * 3 + c] = UInt8((sums[o * 3 + c] + n / 2) / n) }
    }
    return Thumbnail(width: tw, height: th, pixels: out, sourceWidth: sourceWidth, sourceHeight: sourceHeight)
  }
}

/// Why an image gave no thumbnail: said in words a log line can carry.
public enum ThumbnailError: Error, Sendable, Hashable, CustomStringConvertible {
  /// Neither PNG nor JPEG.
  case unsupportedFormat(String)
  /// The library refused the bytes (truncated, bad checksum, garbage): its message.
  case corrupt(format: String, message: String)
  /// Over the pixel bound: nothing was decoded.
  case tooLarge(format: String, width: Int, height: Int, limit: Int)
  /// The process could not get the memory.
  case outOfMemory(String)

  public var description: String {
    switch self {
    case .unsupportedFormat(let what): "cannot make a thumbnail: \(what) (only PNG and JPEG)"
    case .corrupt(let format, let message): "damaged \(format): \(message)"
    case .tooLarge(let format, let width, let height, let limit):
      "\(format) of \(width)x\(height) pixels is over the \(limit / 1_000_000) Mpx a thumbnail is made from"
    case .outOfMemory(let message): "out of memory: \(message)"
    }
  }
}

/// Decodes PNG and JPEG into thumbnails, bounded: images over `maximumPixels` are refused before any pixel is
/// decoded, and the decoder holds a few source rows, never the whole image (a 64 Mpx JPEG would be 192 MB).
public struct ThumbnailDecoding: Sendable {
  /// The pixel bound of a source image (64 Mpx by default).
  public var maximumPixels: Int
  /// libjpeg's working memory bound (a progressive JPEG keeps all its coefficients).
  public var maximumDecoderMemory: Int

  public init(maximumPixels: Int = 64 << 20, maximumDecoderMemory: Int = 16 << 20) {
    self.maximumPixels = maximumPixels
    self.maximumDecoderMemory = maximumDecoderMemory
  }

  /// The format of `data` from its signature: "PNG", "JPEG" or nil.
  public static func format(of data: Data) -> String? {
    if data.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "PNG" }
    if data.starts(with: [0xFF, 0xD8, 0xFF]) { return "JPEG" }
    return nil
  }

  /// The whole image at its own size (tests; bounded like the rest).
  public func decode(_ data: Data) throws(ThumbnailError) -> Thumbnail {
    try decode(data, width: 0, height: 0)
  }

  /// A thumbnail that fits `maxWidth` x `maxHeight` with the image's aspect ratio.
  public func thumbnail(_ data: Data, maxWidth: Int, maxHeight: Int) throws(ThumbnailError) -> Thumbnail {
    // The header gives the size first (the image cache's parser, which checks it): the target keeps the aspect.
    let info: ImageInfo
    do { info = try ImageHeaders.parse(data) } catch {
      if let format = Self.format(of: data) { throw .corrupt(format: format, message: "\(error)") }
      throw .unsupportedFormat("\(error)")
    }
    guard info.pixelWidth * info.pixelHeight <= maximumPixels else {
      throw .tooLarge(
        format: Self.format(of: data) ?? "\(info.format)", width: info.pixelWidth, height: info.pixelHeight,
        limit: maximumPixels)
    }
    let size = Thumbnail.fittingSize(
      width: info.pixelWidth, height: info.pixelHeight, maxWidth: maxWidth, maxHeight: maxHeight)
    return try decode(data, width: size.width, height: size.height)
  }

  /// Exactly `width` x `height` (0 x 0: the image's size).
  public func decode(_ data: Data, width: Int, height: Int) throws(ThumbnailError) -> Thumbnail {
    guard let format = Self.format(of: data) else {
      throw .unsupportedFormat("the bytes start with neither the PNG nor the JPEG signature")
    }
    var out = gc_thumbnail()
    let status = data.withUnsafeBytes { raw -> Int32 in
      let bytes = raw.bindMemory(to: UInt8.self)
      if format == "PNG" {
        return gc_decode_png(bytes.baseAddress, bytes.count, Int64(maximumPixels), Int32(width), Int32(height), &out)
      }
      return gc_decode_jpeg(
        bytes.baseAddress, bytes.count, Int64(maximumPixels), Int64(maximumDecoderMemory), Int32(width),
        Int32(height), &out)
    }
    defer { gc_codec_free(out.pixels) }
    let message = withUnsafeBytes(of: out.message) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    switch status {
    case GC_CODEC_OK:
      let count = Int(out.width) * Int(out.height) * 3
      let pixels = [UInt8](UnsafeBufferPointer(start: out.pixels, count: count))
      return Thumbnail(
        width: Int(out.width), height: Int(out.height), pixels: pixels, sourceWidth: Int(out.source_width),
        sourceHeight: Int(out.source_height))
    case GC_CODEC_TOO_LARGE:
      throw .tooLarge(
        format: format, width: Int(out.source_width), height: Int(out.source_height), limit: maximumPixels)
    case GC_CODEC_NO_MEMORY:
      throw .outOfMemory(message)
    default:
      throw .corrupt(format: format, message: message.isEmpty ? "the decoder refused it" : message)
    }
  }
}

/// The image cache's decoder for the widget: keeps the thumbnail, not the bitmap, in the memory tier (a
/// 32x32 thumbnail costs 3 KB where the decoded 1920x1080 image would cost 6 MB).
public struct ThumbnailDecoder: ImageDecoder {
  public var maxWidth: Int
  public var maxHeight: Int
  public var decoding: ThumbnailDecoding

  public init(maxWidth: Int, maxHeight: Int, decoding: ThumbnailDecoding = ThumbnailDecoding()) {
    self.maxWidth = maxWidth
    self.maxHeight = maxHeight
    self.decoding = decoding
  }

  public func decode(_ image: CachedImage) throws -> Thumbnail {
    try decoding.thumbnail(image.data, maxWidth: maxWidth, maxHeight: maxHeight)
  }

  public func cost(of thumbnail: Thumbnail) -> Int { thumbnail.pixels.count }
}

/// PNG and JPEG encoding (libpng, libjpeg-turbo): the demo's images and the tests' JPEGs.
public enum ImageEncoding {
  /// Encodes RGB pixels as PNG.
  public static func png(_ image: Thumbnail) throws(ThumbnailError) -> Data {
    try encode(image, format: "PNG") { rgb, out, size, message in
      gc_encode_png(rgb, Int32(image.width), Int32(image.height), out, size, message)
    }
  }

  /// Encodes RGB pixels as a baseline JPEG of `quality` (1...100).
  public static func jpeg(_ image: Thumbnail, quality: Int = 90) throws(ThumbnailError) -> Data {
    try encode(image, format: "JPEG") { rgb, out, size, message in
      gc_encode_jpeg(rgb, Int32(image.width), Int32(image.height), Int32(quality), out, size, message)
    }
  }

  private static func encode(
    _ image: Thumbnail, format: String,
    _ call: (
      UnsafePointer<UInt8>, UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, UnsafeMutablePointer<Int>,
      UnsafeMutablePointer<CChar>
    ) -> Int32
  ) throws(ThumbnailError) -> Data {
    var out: UnsafeMutablePointer<UInt8>? = nil
    var size = 0
    var message = [CChar](repeating: 0, count: 200)
    let status = image.pixels.withUnsafeBufferPointer { rgb in
      message.withUnsafeMutableBufferPointer { call(rgb.baseAddress!, &out, &size, $0.baseAddress!) }
    }
    defer { gc_codec_free(out) }
    guard status == 0, let out else {
      throw .corrupt(
        format: format,
        message: String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return Data(bytes: out, count: size)
  }
}
