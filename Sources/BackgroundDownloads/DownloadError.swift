import FileCoordination
import SystemLayer

/// Why a download task failed, or why a session refused a request. Every case says what, where, and what to do.
///
/// A task's error is persisted with the task: a process attaching later reads the same error the agent saw.
public enum DownloadError: Error, CustomStringConvertible, Sendable, Equatable {
  /// Only `http` and `https` URLs are downloaded.
  case unsupportedURL(String)
  /// The destination is not a path inside the container (absolute, `..`, `.coordination`, or through a symlink).
  case invalidDestination(String, rule: String)
  /// A session identifier breaks the naming rule.
  case invalidSessionIdentifier(String, rule: String)
  /// Another live process is attached to this session (one process per identifier, as on iOS).
  case sessionInUse(String, pid: Int32)
  /// No task with this id.
  case unknownTask(String)
  /// The server answered with a status that is not 2xx: the body is not saved (`status` is the HTTP status).
  case httpStatus(Int)
  /// The connection failed and the retries ran out; `reason` is the last error.
  case network(String)
  /// No body bytes arrived for `seconds`, on every attempt.
  case stalled(seconds: Int)
  /// The file's length differs from what was expected (the caller's `expectedLength` or the server's).
  case lengthMismatch(expected: Int64, actual: Int64)
  /// The file's SHA-256 differs from the caller's (hex digests).
  case checksumMismatch(expected: String, actual: String)
  /// The disk holding the container is full: nothing was published.
  case diskFull(path: String)
  /// The server refused every range and the whole entity, or contradicted itself; `reason` says how.
  case protocolViolation(String)
  /// The task was cancelled (Apple's `NSURLErrorCancelled`).
  case cancelled
  /// The download agent could not be found or started; `reason` says where it was looked for.
  case agentUnavailable(reason: String)
  /// A file of the session or task in the container is damaged; `reason` says which and how.
  case corruptRecord(path: String, reason: String)
  /// A system call failed.
  case system(FileSystemError)
  /// Another failure, as its text (what a failure read back from the container becomes when it has no case here).
  case other(String)
  /// The container refused the path or failed.
  case container(GroupContainerError)

  /// What failed, for which task or URL, and what to do.
  public var description: String {
    switch self {
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
