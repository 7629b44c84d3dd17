import Foundation

/// Reads format, pixel size and frame count from an image's headers without decoding it.
/// PLACEHOLDER (PNG only) until the header parsers land (h-imageparts).
public enum ImageHeaders {
  public static func parse(_ data: Data) throws(ImageCacheError) -> ImageInfo {
    let bytes = [UInt8](data.prefix(24))
    guard bytes.count >= 24, bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) else {
      throw .unsupportedFormat(signature: bytes.prefix(8).map { String($0, radix: 16) }.joined(separator: " "))
    }
    func be(_ i: Int) -> Int { Int(bytes[i]) << 24 | Int(bytes[i + 1]) << 16 | Int(bytes[i + 2]) << 8 | Int(bytes[i + 3]) }
    return ImageInfo(format: .png, pixelWidth: be(16), pixelHeight: be(20), frameCount: 1)
  }
}
