import Foundation

/// The image formats the cache keeps, recognised by their signature (the first bytes), never by a file name or a
/// MIME type someone claimed.
public enum ImageFormat: String, Sendable, Hashable, Codable, CaseIterable {
  /// PNG, and APNG (a PNG with an `acTL` chunk: `frameCount` > 1).
  case png
  /// JPEG (baseline and progressive).
  case jpeg
  /// GIF, still or animated.
  case gif
  /// WebP: lossy (`VP8 `), lossless (`VP8L`) and extended (`VP8X`, animated or with alpha).
  case webp
}

/// What the headers of an image say, read without decoding a pixel.
public struct ImageInfo: Sendable, Hashable, Codable {
  /// The format, from the signature.
  public var format: ImageFormat
  /// The width in pixels.
  public var pixelWidth: Int
  /// The height in pixels.
  public var pixelHeight: Int
  /// 1 for a still image; the number of frames of an animated GIF, APNG or WebP.
  public var frameCount: Int

  /// Header facts, as the parsers make them.
  public init(format: ImageFormat, pixelWidth: Int, pixelHeight: Int, frameCount: Int) {
    self.format = format
    self.pixelWidth = pixelWidth
    self.pixelHeight = pixelHeight
    self.frameCount = frameCount
  }
}

/// An image as the cache holds it: the encoded bytes and what their headers say.
public struct CachedImage: Sendable, Hashable {
  /// The image's bytes, as stored.
  public let data: Data
  /// What its headers say.
  public let info: ImageInfo

  /// The format, from the signature.
  public var format: ImageFormat { info.format }
  /// The width in pixels.
  public var pixelWidth: Int { info.pixelWidth }
  /// The height in pixels.
  public var pixelHeight: Int { info.pixelHeight }
  /// Frames: 1 for a still image, more for APNG, GIF and animated WebP.
  public var frameCount: Int { info.frameCount }

  /// Checks the bytes: anything that is not a whole-looking PNG, JPEG, GIF or WebP header is refused.
  public init(data: Data) throws(ImageCacheError) {
    self.info = try ImageHeaders.parse(data)
    self.data = data
  }

  /// For bytes already checked (read back from the cache's own entry, whose header was parsed at store time).
  package init(data: Data, info: ImageInfo) {
    self.data = data
    self.info = info
  }
}
