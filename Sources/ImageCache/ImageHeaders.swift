import Foundation

/// Reads format, pixel size and frame count from an image's headers without decoding it.
/// (Parsers: the image-headers work of issue #10.)
public enum ImageHeaders {
  public static func parse(_ data: Data) throws(ImageCacheError) -> ImageInfo {
    throw .unsupportedFormat(signature: "(not implemented yet)")
  }
}
