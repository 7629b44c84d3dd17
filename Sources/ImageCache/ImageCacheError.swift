import FileCoordination
import GroupContainerCore
import SystemLayer

/// Why an image was refused or a cache operation failed. Every error says what, where, and what to do.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`); a failed system
/// call under it is ``underlyingError``.
public struct ImageCacheError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure an ``ImageCacheError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `tooLarge`.
    public var description: String { name }

    /// The bytes start with no signature of a supported format.
    public static let unsupportedFormat = Code("unsupportedFormat")
    /// The bytes have a known signature but the headers are cut short or contradict themselves.
    public static let malformed = Code("malformed")
    /// The image (or an entry file) is larger than the cache accepts.
    public static let tooLarge = Code("tooLarge")
    /// A key longer than entries can hold.
    public static let invalidKey = Code("invalidKey")
    /// A cache name breaks a rule.
    public static let invalidName = Code("invalidName")
    /// A system call failed (``ImageCacheError/underlyingError``).
    public static let system = Code("system")
    /// The container refused the path or failed (``ImageCacheError/containerError``).
    public static let container = Code("container")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case unsupportedFormat(signature: String)
    case malformed(ImageFormat, reason: String)
    case tooLarge(bytes: Int, limit: Int)
    case invalidKey(bytes: Int, limit: Int)
    case invalidName(String, rule: String)
    case system(FileSystemError)
    case container(GroupContainerError)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The bytes start with no signature of a supported format (PNG, JPEG, GIF, WebP).
  public static func unsupportedFormat(signature: String) -> Self { Self(.unsupportedFormat(signature: signature)) }
  /// The bytes have a known signature but the headers are cut short or contradict themselves.
  public static func malformed(_ format: ImageFormat, reason: String) -> Self {
    Self(.malformed(format, reason: reason))
  }
  /// The image (or an entry file) is larger than the cache accepts.
  public static func tooLarge(bytes: Int, limit: Int) -> Self { Self(.tooLarge(bytes: bytes, limit: limit)) }
  /// A key longer than entries can hold.
  public static func invalidKey(bytes: Int, limit: Int) -> Self { Self(.invalidKey(bytes: bytes, limit: limit)) }
  /// A cache name breaks a rule; `rule` names it.
  public static func invalidName(_ name: String, rule: String) -> Self { Self(.invalidName(name, rule: rule)) }
  /// A system call failed.
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }
  /// The container refused the path or failed.
  public static func container(_ error: GroupContainerError) -> Self { Self(.container(error)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .unsupportedFormat: .unsupportedFormat
    case .malformed: .malformed
    case .tooLarge: .tooLarge
    case .invalidKey: .invalidKey
    case .invalidName: .invalidName
    case .system: .system
    case .container: .container
    }
  }

  /// The image's format, for ``Code/malformed``.
  public var format: ImageFormat? {
    if case .malformed(let format, _) = detail { format } else { nil }
  }

  /// Why: what is wrong in the headers (``Code/malformed``), the broken naming rule (``Code/invalidName``), or the
  /// signature the data starts with (``Code/unsupportedFormat``).
  public var reason: String? {
    switch detail {
    case .unsupportedFormat(let text), .malformed(_, let text), .invalidName(_, let text): text
    default: nil
    }
  }

  /// The size in bytes of the image or key, for ``Code/tooLarge`` and ``Code/invalidKey``.
  public var bytes: Int? {
    switch detail {
    case .tooLarge(let bytes, _), .invalidKey(let bytes, _): bytes
    default: nil
    }
  }

  /// The limit in bytes, for ``Code/tooLarge`` and ``Code/invalidKey``.
  public var limit: Int? {
    switch detail {
    case .tooLarge(_, let limit), .invalidKey(_, let limit): limit
    default: nil
    }
  }

  /// The cache name (``Code/invalidName``), or the file a system call or the container failed on.
  public var path: String? {
    switch detail {
    case .invalidName(let name, _): name
    case .system(let error): error.path
    case .container(let error): error.path
    default: nil
    }
  }

  /// The container's refusal, for ``Code/container``.
  public var containerError: GroupContainerError? {
    if case .container(let error) = detail { error } else { nil }
  }

  /// The failed system call, for ``Code/system`` (and for ``Code/container`` when one is under it).
  public var underlyingError: SystemError? {
    switch detail {
    case .system(let error): SystemError(error)
    case .container(let error): error.underlyingError
    default: nil
    }
  }

  /// The failed system call in the package's own terms, for ``Code/system`` (and under ``Code/container``).
  package var fileSystemError: FileSystemError? {
    switch detail {
    case .system(let error): error
    case .container(let error): error.fileSystemError
    default: nil
    }
  }

  /// What failed, on which key or file, and what to do.
  public var description: String {
    switch detail {
    case .unsupportedFormat(let signature):
      return "not an image the cache keeps (PNG, JPEG, GIF or WebP): the data starts with \(signature)"
    case .malformed(let format, let reason):
      return "malformed \(format.rawValue.uppercased()) image: \(reason)"
    case .tooLarge(let bytes, let limit):
      return "image of \(bytes) bytes is larger than the cache's limit of \(limit) bytes"
    case .invalidKey(let bytes, let limit):
      return "a key of \(bytes) bytes is longer than the \(limit) bytes an entry holds: "
        + "use a shorter key (a hash of it)"
    case .invalidName(let name, let rule):
      return "cache name '\(name)' is invalid: \(rule)"
    case .system(let error):
      return error.description
    case .container(let error):
      return error.description
    }
  }
}
