/// Turns an image's bytes into what the app draws — a bitmap, a texture — and says what that costs in memory, so
/// the memory tier can keep decoded images and count them at their real cost (a 1000×1000 RGBA bitmap is 4 MB,
/// whatever its PNG weighed).
///
/// ```swift
/// struct BitmapDecoder: ImageDecoder {
///   func decode(_ image: CachedImage) throws -> Bitmap { try Bitmap(png: image.data) }
///   func cost(of bitmap: Bitmap) -> Int { bitmap.bytesPerRow * bitmap.height }
/// }
/// let bitmap = try cache.decodedImage(forKey: url.absoluteString, using: BitmapDecoder())
/// ```
public protocol ImageDecoder: Sendable {
  /// What decoding makes: a bitmap, a texture.
  associatedtype Decoded: Sendable
  /// Decodes the cached image's bytes; a thrown error reaches the caller of
  /// ``SharedImageCache/decodedImage(forKey:using:)``.
  func decode(_ image: CachedImage) throws -> Decoded
  /// Bytes `decoded` holds in memory.
  func cost(of decoded: Decoded) -> Int
}
