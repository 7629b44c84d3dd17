import SystemLayer
import SystemPackage

/// A failed system call under one of the package's errors: which call, on which path, and the `errno` it set.
///
/// Read it from any of the package's errors with `underlyingError` (``GroupContainerError/underlyingError``,
/// `SharedDefaultsError.underlyingError`…), e.g. `error.underlyingError?.errno == ENOENT`.
///
/// It lives here, in FileCoordination, because every other library of the package (SharedDefaults, ImageCache,
/// BackgroundDownloads, LiveActivities, AppIntents…) depends on this module, and the umbrella `GroupContainer`
/// re-exports it: a client that imports any of them can name it. The package's system-call layer, where calls
/// fail, is internal to the package and keeps its own error type; this is its public face.
public struct SystemError: Error, CustomStringConvertible, Sendable, Hashable {
  /// The package's own record of the failure, which the public properties read.
  package let base: FileSystemError

  package init(_ base: FileSystemError) { self.base = base }

  /// A failure of `operation` on `path` with `errno` (for tests and wrappers); `reason` says what it means for the
  /// path when the errno alone would not.
  public init(operation: String, path: String, errno: Int32, reason: String? = nil) {
    base = FileSystemError(operation, path, Errno(rawValue: errno), reason: reason)
  }

  /// The C function that failed, e.g. `open`, `openat2` or `flock`.
  public var operation: String { base.operation }
  /// The path the call was about (empty when there is none, e.g. a pipe).
  public var path: String { base.path }
  /// The error number the call set: compare it with Glibc's constants (`ENOENT`, `EACCES`, `ENOSPC`…).
  public var errno: Int32 { base.errno.rawValue }
  /// What the failure means for the path, when the errno alone would not say it (e.g. "its parent directory
  /// '…/Documents/sub' does not exist"); nil otherwise.
  public var reason: String? { base.reason }

  /// "`operation` '`path`' failed: `meaning` (errno N)", or with a reason "…failed: `reason` (`meaning`, errno N)";
  /// the meaning is `strerror`'s text.
  public var description: String { base.description }

  /// Two failures are equal when the call, path, errno and reason are.
  public static func == (a: SystemError, b: SystemError) -> Bool { a.base == b.base }

  /// Hashes the call, path, errno and reason.
  public func hash(into hasher: inout Hasher) {
    hasher.combine(base.operation)
    hasher.combine(base.path)
    hasher.combine(base.errno.rawValue)
    hasher.combine(base.reason)
  }
}
