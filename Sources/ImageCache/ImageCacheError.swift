import FileCoordination
import SystemLayer

/// Why an image was refused or a cache operation failed. Every case says what, where, and what to do.
public enum ImageCacheError: Error, CustomStringConvertible, Sendable, Equatable {
  /// The bytes start with no signature of a supported format (PNG, JPEG, GIF, WebP).
  case unsupportedFormat(signature: String)
  /// The bytes have a known signature but the headers are cut short or contradict themselves.
  case malformed(ImageFormat, reason: String)
  /// The image (or an entry file) is larger than the cache accepts.
  case tooLarge(bytes: Int, limit: Int)
  /// A key longer than entries can hold.
  case invalidKey(bytes: Int, limit: Int)
  /// A cache name breaks a rule; `rule` names it.
  case invalidName(String, rule: String)
  /// A system call failed.
  case system(FileSystemError)
  /// The container refused the path or failed.
  case container(GroupContainerError)

  /// What failed, on which key or file, and what to do.
  public var description: String {
    switch self {
    case .unsupportedFormat(let signature):
      return "not an image the cache keeps (PNG, JPEG, GIF or WebP): the data starts with \(signature)"
    case .malformed(let format, let reason):
      return "malformed \(format.rawValue.uppercased()) image: \(reason)"
    case .tooLarge(let bytes, let limit):
      return "image of \(bytes) bytes is larger than the cache's limit of \(limit) bytes"
    case .invalidKey(let bytes, let limit):
      return "a key of \(bytes) bytes is longer than the \(limit) bytes an entry holds: use a shorter key (a hash of it)"
    case .invalidName(let name, let rule):
      return "cache name '\(name)' is invalid: \(rule)"
    case .system(let error):
      return error.description
    case .container(let error):
      return error.description
    }
  }
}
