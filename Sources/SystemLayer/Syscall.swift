import Glibc
import Synchronization
import SystemPackage

/// A failed system call: which call, on which path, and the `errno` it returned.
///
/// Every throwing function of this module throws this type, so callers can say exactly what failed and where.
public struct FileSystemError: Error, CustomStringConvertible, Sendable, Equatable {
  /// The C function that failed, e.g. `open` or `flock`.
  public var operation: String
  /// The path the call was about (empty when there is none, e.g. a pipe).
  public var path: String
  /// The error number the call set.
  public var errno: Errno
  /// What the failure means for the path, in the user's words, when the errno alone would not say it (e.g. "its
  /// parent directory '…/Documents/sub' does not exist"); nil when the errno's meaning says it all.
  public var reason: String?

  package init(_ operation: String, _ path: String, _ errno: Errno, reason: String? = nil) {
    self.operation = operation
    self.path = path
    self.errno = errno
    self.reason = reason
  }

  /// "`operation` '`path`' failed: `meaning` (errno N)", or with a reason "…failed: `reason` (`meaning`, errno N)";
  /// the meaning is `strerror`'s text (Errno's description).
  public var description: String {
    let subject = path.isEmpty ? "" : " '\(path)'"
    guard let reason else { return "\(operation)\(subject) failed: \(errno) (errno \(errno.rawValue))" }
    return "\(operation)\(subject) failed: \(reason) (\(errno), errno \(errno.rawValue))"
  }

  /// Whether the failure says nothing about the file itself — an I/O error, a full disk or quota, no memory, no
  /// descriptors left — so the same call may succeed later: the file is kept and read again, never taken as empty
  /// or dropped as unreadable (each was a loss the I/O-error loops found).
  package var isPassing: Bool {
    [.ioError, .noSpace, .diskQuotaExceeded, .noMemory, .tooManyOpenFiles, .tooManyOpenFilesInSystem].contains(errno)
  }

  /// The same failure told about `path` instead (an internal name such as a temp file's is never shown).
  package func about(_ path: String, reason: String? = nil) -> FileSystemError {
    FileSystemError(operation, path, errno, reason: reason ?? self.reason)
  }
}

/// Runs a raw system call until it does not fail with `EINTR`; the one retry loop of this module.
///
/// Raw call → `Result<_, Errno>` here → throwing wrappers in the other files, as swift-system does.
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(
  retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<I, Errno> {
  valueOrErrno(nil, retryOnInterrupt: retryOnInterrupt, body)
}

/// `valueOrErrno` for a call that can fail with an I/O error, of the kind `call` (`IOFaultInjection`'s test hook).
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(
  _ call: IOFaultInjection.Call?, retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<I, Errno> {
  while true {
    #if GROUPCONTAINER_TEST_HOOKS
      // An injected failure stands for the call and takes the same path as a real one (EINTR is retried below).
      let result: I
      if let call, let injected = IOFaultInjection.failure(call) {
        Glibc.errno = injected.rawValue
        result = -1
      } else {
        result = body()
      }
    #else
      let result = body()
    #endif
    if result != -1 { return .success(result) }
    let code = Errno(rawValue: Glibc.errno)
    if retryOnInterrupt && code == .interrupted { continue }
    return .failure(code)
  }
}

extension Result where Failure == Errno {
  /// Attaches the operation and path to a failure.
  @inline(__always)
  package func get(_ operation: String, _ path: @autoclosure () -> String) throws(FileSystemError) -> Success {
    switch self {
    case .success(let value): return value
    case .failure(let errno): throw FileSystemError(operation, path(), errno)
    }
  }
}

/// A test-only record of the file-system calls this module made (swift-system's mocking pattern, recording only):
/// tests check the order of `fsync` and `rename` in a durable replace without a power cut.
///
/// Scoped by a task-local, so tests running in parallel in one process see only their own calls; outside
/// `SyscallRecorder.$current.withValue(…)` nothing is recorded and the cost is one task-local read. A test hook:
/// without the package's `TestHooks` trait (every dependent's build), `record` is empty and nothing is recorded.
package enum SyscallRecorder {
  package enum Call: String, Sendable { case open, fsync, rename }

  #if GROUPCONTAINER_TEST_HOOKS
    /// One call: what it was and its target (for a rename, the destination).
    package struct Entry: Sendable, Equatable, CustomStringConvertible {
      package var call: Call
      package var path: String
      package init(call: Call, path: String) {
        self.call = call
        self.path = path
      }
      package var description: String { "\(call.rawValue) \(path)" }
    }

    /// Collects entries; `Mutex`-guarded, shared by the threads of one recorded scope.
    package final class Log: Sendable {
      private let entries = Mutex<[Entry]>([])
      package init() {}
      package var calls: [Entry] { entries.withLock { $0 } }
      func append(_ entry: Entry) { entries.withLock { $0.append(entry) } }
    }

    @TaskLocal package static var current: Log?
  #endif

  @inline(__always)
  static func record(_ call: Call, _ path: @autoclosure () -> String, flags: SystemFD.OpenFlags = .create) {
    #if GROUPCONTAINER_TEST_HOOKS
      guard let log = current else { return }
      // Only creations among opens: plain opens would drown the interesting calls.
      if call == .open && !flags.contains(.create) { return }
      log.append(Entry(call: call, path: path()))
    #endif
  }

  /// Runs `body` with the caller's log, if any (on another thread: a task-local does not cross to Dispatch).
  @inline(__always)
  package static func carryingLog(_ body: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
    #if GROUPCONTAINER_TEST_HOOKS
      let log = current
      return { $current.withValue(log) { body() } }
    #else
      return body
    #endif
  }
}
