import FileCoordination
import GroupContainerCore
import SystemLayer

/// Why a download task failed, or why a session refused a request. Every error says what, where, and what to do.
///
/// A task's error is persisted with the task: a process attaching later reads the same error the agent saw. Tell
/// errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`); a failed system call
/// under it is ``underlyingError``.
public struct DownloadError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure a ``DownloadError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `httpStatus`.
    public var description: String { name }

    /// Only `http` and `https` URLs are downloaded.
    public static let unsupportedURL = Code("unsupportedURL")
    /// The destination is not a path inside the container.
    public static let invalidDestination = Code("invalidDestination")
    /// A session identifier breaks the naming rule.
    public static let invalidSessionIdentifier = Code("invalidSessionIdentifier")
    /// Another live process is attached to this session.
    public static let sessionInUse = Code("sessionInUse")
    /// No task with this id.
    public static let unknownTask = Code("unknownTask")
    /// The server answered with a status that is not 2xx.
    public static let httpStatus = Code("httpStatus")
    /// The connection failed and the retries ran out.
    public static let network = Code("network")
    /// No body bytes arrived for a while, on every attempt.
    public static let stalled = Code("stalled")
    /// The file's length differs from what was expected.
    public static let lengthMismatch = Code("lengthMismatch")
    /// The file's SHA-256 differs from the caller's.
    public static let checksumMismatch = Code("checksumMismatch")
    /// The disk holding the container is full.
    public static let diskFull = Code("diskFull")
    /// The server refused every range and the whole entity, or contradicted itself.
    public static let protocolViolation = Code("protocolViolation")
    /// The task was cancelled.
    public static let cancelled = Code("cancelled")
    /// The download agent could not be found or started.
    public static let agentUnavailable = Code("agentUnavailable")
    /// A file of the session or task in the container is damaged.
    public static let corruptRecord = Code("corruptRecord")
    /// A system call failed (``DownloadError/underlyingError``).
    public static let system = Code("system")
    /// Another failure, as its text.
    public static let other = Code("other")
    /// The container refused the path or failed (``DownloadError/containerError``).
    public static let container = Code("container")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case unsupportedURL(String)
    case invalidDestination(String, rule: String)
    case invalidSessionIdentifier(String, rule: String)
    case sessionInUse(String, pid: Int32)
    case unknownTask(String)
    case httpStatus(Int)
    case network(String)
    case stalled(seconds: Int)
    case lengthMismatch(expected: Int64, actual: Int64)
    case checksumMismatch(expected: String, actual: String)
    case diskFull(path: String)
    case protocolViolation(String)
    case cancelled
    case agentUnavailable(reason: String)
    case corruptRecord(path: String, reason: String)
    case system(FileSystemError)
    case other(String)
    case container(GroupContainerError)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// Only `http` and `https` URLs are downloaded.
  public static func unsupportedURL(_ url: String) -> Self { Self(.unsupportedURL(url)) }
  /// The destination is not a path inside the container (absolute, `..`, `.coordination`, or through a symlink).
  public static func invalidDestination(_ path: String, rule: String) -> Self {
    Self(.invalidDestination(path, rule: rule))
  }
  /// A session identifier breaks the naming rule.
  public static func invalidSessionIdentifier(_ identifier: String, rule: String) -> Self {
    Self(.invalidSessionIdentifier(identifier, rule: rule))
  }
  /// Another live process is attached to this session (one process per identifier, as on iOS).
  public static func sessionInUse(_ identifier: String, pid: Int32) -> Self {
    Self(.sessionInUse(identifier, pid: pid))
  }
  /// No task with this id.
  public static func unknownTask(_ id: String) -> Self { Self(.unknownTask(id)) }
  /// The server answered with a status that is not 2xx: the body is not saved (`status` is the HTTP status).
  public static func httpStatus(_ status: Int) -> Self { Self(.httpStatus(status)) }
  /// The connection failed and the retries ran out; `reason` is the last error.
  public static func network(_ reason: String) -> Self { Self(.network(reason)) }
  /// No body bytes arrived for `seconds`, on every attempt.
  public static func stalled(seconds: Int) -> Self { Self(.stalled(seconds: seconds)) }
  /// The file's length differs from what was expected (the caller's `expectedLength` or the server's).
  public static func lengthMismatch(expected: Int64, actual: Int64) -> Self {
    Self(.lengthMismatch(expected: expected, actual: actual))
  }
  /// The file's SHA-256 differs from the caller's (hex digests).
  public static func checksumMismatch(expected: String, actual: String) -> Self {
    Self(.checksumMismatch(expected: expected, actual: actual))
  }
  /// The disk holding the container is full: nothing was published.
  public static func diskFull(path: String) -> Self { Self(.diskFull(path: path)) }
  /// The server refused every range and the whole entity, or contradicted itself; `reason` says how.
  public static func protocolViolation(_ reason: String) -> Self { Self(.protocolViolation(reason)) }
  /// The task was cancelled (Apple's `NSURLErrorCancelled`).
  public static let cancelled = Self(.cancelled)
  /// The download agent could not be found or started; `reason` says where it was looked for.
  public static func agentUnavailable(reason: String) -> Self { Self(.agentUnavailable(reason: reason)) }
  /// A file of the session or task in the container is damaged; `reason` says which and how.
  public static func corruptRecord(path: String, reason: String) -> Self {
    Self(.corruptRecord(path: path, reason: reason))
  }
  /// A system call failed.
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }
  /// Another failure, as its text (what a failure read back from the container becomes when it has no code here).
  public static func other(_ text: String) -> Self { Self(.other(text)) }
  /// The container refused the path or failed.
  public static func container(_ error: GroupContainerError) -> Self { Self(.container(error)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .unsupportedURL: .unsupportedURL
    case .invalidDestination: .invalidDestination
    case .invalidSessionIdentifier: .invalidSessionIdentifier
    case .sessionInUse: .sessionInUse
    case .unknownTask: .unknownTask
    case .httpStatus: .httpStatus
    case .network: .network
    case .stalled: .stalled
    case .lengthMismatch: .lengthMismatch
    case .checksumMismatch: .checksumMismatch
    case .diskFull: .diskFull
    case .protocolViolation: .protocolViolation
    case .cancelled: .cancelled
    case .agentUnavailable: .agentUnavailable
    case .corruptRecord: .corruptRecord
    case .system: .system
    case .other: .other
    case .container: .container
    }
  }

  /// The URL, for ``Code/unsupportedURL``.
  public var url: String? {
    if case .unsupportedURL(let url) = detail { url } else { nil }
  }

  /// The session identifier (``Code/invalidSessionIdentifier``, ``Code/sessionInUse``) or the task id
  /// (``Code/unknownTask``).
  public var identifier: String? {
    switch detail {
    case .invalidSessionIdentifier(let id, _), .sessionInUse(let id, _), .unknownTask(let id): id
    default: nil
    }
  }

  /// The process attached to the session, for ``Code/sessionInUse``.
  public var processID: Int32? {
    if case .sessionInUse(_, let pid) = detail { pid } else { nil }
  }

  /// The path: the refused destination, the full disk's path, the damaged record, or the file a system call or the
  /// container failed on.
  public var path: String? {
    switch detail {
    case .invalidDestination(let path, _), .diskFull(let path), .corruptRecord(let path, _): path
    case .system(let error): error.path
    case .container(let error): error.path
    default: nil
    }
  }

  /// The server's HTTP status, for ``Code/httpStatus``.
  public var httpStatus: Int? {
    if case .httpStatus(let status) = detail { status } else { nil }
  }

  /// How long no data arrived, for ``Code/stalled``.
  public var seconds: Int? {
    if case .stalled(let seconds) = detail { seconds } else { nil }
  }

  /// The expected and actual lengths in bytes, for ``Code/lengthMismatch``.
  public var lengths: (expected: Int64, actual: Int64)? {
    if case .lengthMismatch(let expected, let actual) = detail { (expected, actual) } else { nil }
  }

  /// The expected and actual SHA-256 digests (hex), for ``Code/checksumMismatch``.
  public var checksums: (expected: String, actual: String)? {
    if case .checksumMismatch(let expected, let actual) = detail { (expected, actual) } else { nil }
  }

  /// Why: the broken rule, the last network error, how the server broke HTTP, where the agent was looked for,
  /// what is damaged in a record, or (``Code/other``) the failure's text.
  public var reason: String? {
    switch detail {
    case .invalidDestination(_, let text), .invalidSessionIdentifier(_, let text), .network(let text),
      .protocolViolation(let text), .agentUnavailable(let text), .corruptRecord(_, let text), .other(let text):
      text
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

  /// What failed, for which task or URL, and what to do.
  public var description: String {
    switch detail {
    case .unsupportedURL(let url):
      return "'\(url)' cannot be downloaded: only http and https URLs are"
    case .invalidDestination(let path, let rule):
      return "download destination '\(path)' is refused: \(rule)"
    case .invalidSessionIdentifier(let id, let rule):
      return "session identifier '\(id)' is invalid: \(rule)"
    case .sessionInUse(let id, let pid):
      return "session '\(id)' is already attached in process \(pid): one process per session identifier, as on iOS"
    case .unknownTask(let id):
      return "no download task '\(id)' in this container"
    case .httpStatus(let status):
      return "the server answered HTTP \(status): nothing was saved"
    case .network(let reason):
      return "the download failed after its retries: \(reason)"
    case .stalled(let seconds):
      return "no data arrived for \(seconds) s on every attempt: the download stalled"
    case .lengthMismatch(let expected, let actual):
      return "the download is \(actual) bytes, not the \(expected) expected: it was not published"
    case .checksumMismatch(let expected, let actual):
      return "the download's SHA-256 is \(actual), not \(expected): it was not published"
    case .diskFull(let path):
      return "no space left on the disk of '\(path)': the download was not published; free space and start it again"
    case .protocolViolation(let reason):
      return "the server broke HTTP: \(reason)"
    case .cancelled:
      return "the download was cancelled"
    case .agentUnavailable(let reason):
      return "the download agent could not be started: \(reason)"
    case .corruptRecord(let path, let reason):
      return "damaged download record '\(path)': \(reason)"
    case .system(let error):
      return error.description
    case .other(let text):
      return text
    case .container(let error):
      return error.description
    }
  }
}
