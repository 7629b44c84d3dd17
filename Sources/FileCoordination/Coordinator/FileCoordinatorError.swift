import GroupContainerCore
import Messaging
import SystemLayer

/// Why a coordinated access did not run its accessor, or failed around it.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`); a failed system
/// call under it is ``underlyingError``.
public struct FileCoordinatorError: Error, CustomStringConvertible, Sendable {
  /// What kind of failure a ``FileCoordinatorError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `lockTimedOut`.
    public var description: String { name }

    /// ``FileCoordinator/cancel()`` was called while the access waited.
    public static let cancelled = Code("cancelled")
    /// A nested access of the same owner needed a write lock on an item it only holds for reading.
    public static let lockUpgrade = Code("lockUpgrade")
    /// A presenter in another process did not answer within the coordinator's timeout.
    public static let presenterTimedOut = Code("presenterTimedOut")
    /// The access's locks were not free within ``FileCoordinator/lockTimeout``.
    public static let lockTimedOut = Code("lockTimedOut")
    /// A presenter record in the container is damaged, so its presenter cannot be asked.
    public static let presenterUnreachable = Code("presenterUnreachable")
    /// A presenter answered `savePresentedItemChanges`/`accommodate…Deletion` with an error.
    public static let presenterFailed = Code("presenterFailed")
    /// The item or container was refused (``FileCoordinatorError/containerError``).
    public static let container = Code("container")
    /// A system call failed (``FileCoordinatorError/underlyingError``).
    public static let system = Code("system")
    /// A URL could not be opened (``FileCoordinatorError/openURLError``).
    public static let openURL = Code("openURL")
    /// File presenters need inotify, which this process could not get.
    public static let presentersUnavailable = Code("presentersUnavailable")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable {
    case cancelled
    case lockUpgrade(String)
    case presenterTimedOut(item: String, processID: Int32, seconds: Double)
    case lockTimedOut(item: String, holderPID: Int32?, seconds: Double)
    case presenterUnreachable(item: String, record: String, processID: Int32?, reason: String)
    case presenterFailed(item: String, processID: Int32, message: String)
    case container(GroupContainerError)
    case system(FileSystemError)
    case openURL(OpenURLError)
    case presentersUnavailable(String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// ``FileCoordinator/cancel()`` was called while the access waited.
  public static let cancelled = Self(.cancelled)
  /// A nested access of the same owner needed a write lock on an item it only holds for reading.
  /// flock cannot upgrade atomically: coordinate the write first (or in one write access).
  public static func lockUpgrade(_ path: String) -> Self { Self(.lockUpgrade(path)) }
  /// A presenter in another process did not answer within the coordinator's timeout and the coordinator's
  /// policy is ``FileCoordinator/PresenterTimeoutPolicy/fail``.
  public static func presenterTimedOut(item: String, processID: Int32, seconds: Double) -> Self {
    Self(.presenterTimedOut(item: item, processID: processID, seconds: seconds))
  }
  /// The access's locks were not free within ``FileCoordinator/lockTimeout``; `holderPID` is a process that held
  /// one of them then, when the kernel says.
  public static func lockTimedOut(item: String, holderPID: Int32?, seconds: Double) -> Self {
    Self(.lockTimedOut(item: item, holderPID: holderPID, seconds: seconds))
  }
  /// A presenter record in the container is damaged (truncated, edited, not a regular file), so its presenter —
  /// whose item is unknown — cannot be asked, and the coordinator's policy is
  /// ``FileCoordinator/PresenterTimeoutPolicy/fail``. `processID` is its owner, when the record's name tells.
  /// The owner writes its record again when it notices; `groupctl doctor` names records nobody repairs.
  public static func presenterUnreachable(item: String, record: String, processID: Int32?, reason: String) -> Self {
    Self(.presenterUnreachable(item: item, record: record, processID: processID, reason: reason))
  }
  /// A presenter answered `savePresentedItemChanges`/`accommodate…Deletion` with an error.
  public static func presenterFailed(item: String, processID: Int32, message: String) -> Self {
    Self(.presenterFailed(item: item, processID: processID, message: message))
  }
  /// The item or container was refused.
  public static func container(_ error: GroupContainerError) -> Self { Self(.container(error)) }
  /// A system call failed.
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }
  /// A URL could not be opened.
  public static func openURL(_ error: OpenURLError) -> Self { Self(.openURL(error)) }
  /// File presenters need inotify, which this process could not get (the reason names the limit and the sysctl
  /// that raises it). Coordinated reads and writes work without it.
  public static func presentersUnavailable(_ reason: String) -> Self { Self(.presentersUnavailable(reason)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .cancelled: .cancelled
    case .lockUpgrade: .lockUpgrade
    case .presenterTimedOut: .presenterTimedOut
    case .lockTimedOut: .lockTimedOut
    case .presenterUnreachable: .presenterUnreachable
    case .presenterFailed: .presenterFailed
    case .container: .container
    case .system: .system
    case .openURL: .openURL
    case .presentersUnavailable: .presentersUnavailable
    }
  }

  /// The item (container-relative path) the access was about, when the error names one; for ``Code/container``
  /// the refused path, for ``Code/system`` the path the call failed on.
  public var item: String? {
    switch detail {
    case .lockUpgrade(let item), .presenterTimedOut(let item, _, _), .lockTimedOut(let item, _, _),
      .presenterUnreachable(let item, _, _, _), .presenterFailed(let item, _, _):
      item
    case .container(let error): error.path
    case .system(let error): error.path
    case .cancelled, .openURL, .presentersUnavailable: nil
    }
  }

  /// The other process involved: the presenter's (``Code/presenterTimedOut``, ``Code/presenterFailed``,
  /// ``Code/presenterUnreachable`` when its record's name tells) or a lock holder's (``Code/lockTimedOut``, when
  /// the kernel says).
  public var processID: Int32? {
    switch detail {
    case .presenterTimedOut(_, let pid, _), .presenterFailed(_, let pid, _): pid
    case .lockTimedOut(_, let pid, _), .presenterUnreachable(_, _, let pid, _): pid
    default: nil
    }
  }

  /// How long the access waited, for ``Code/presenterTimedOut`` and ``Code/lockTimedOut``.
  public var seconds: Double? {
    switch detail {
    case .presenterTimedOut(_, _, let seconds), .lockTimedOut(_, _, let seconds): seconds
    default: nil
    }
  }

  /// The damaged presenter record, for ``Code/presenterUnreachable``.
  public var record: String? {
    if case .presenterUnreachable(_, let record, _, _) = detail { record } else { nil }
  }

  /// Why: the record's damage (``Code/presenterUnreachable``), the presenter's message (``Code/presenterFailed``),
  /// or why inotify is unavailable (``Code/presentersUnavailable``).
  public var reason: String? {
    switch detail {
    case .presenterUnreachable(_, _, _, let text), .presenterFailed(_, _, let text), .presentersUnavailable(let text):
      text
    default: nil
    }
  }

  /// The container's refusal, for ``Code/container``.
  public var containerError: GroupContainerError? {
    if case .container(let error) = detail { error } else { nil }
  }

  /// The URL's refusal, for ``Code/openURL``.
  public var openURLError: OpenURLError? {
    if case .openURL(let error) = detail { error } else { nil }
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

  /// What failed, on which item, and what to do.
  public var description: String {
    switch detail {
    case .cancelled:
      return "the coordinated access was cancelled before its accessor ran"
    case .lockUpgrade(let path):
      return "cannot write '\(path)' inside a coordinated read of it by the same coordinator: "
        + "take the write access first"
    case .presenterTimedOut(let item, let pid, let seconds):
      return "a presenter of '\(item)' in process \(pid) did not answer within \(seconds) s"
    case .lockTimedOut(let item, let pid, let seconds):
      return "could not lock '\(item)' within \(seconds) s: "
        + (pid.map { "process \($0) holds it (stopped or hung?)" } ?? "another access holds it")
        + "; stop that process or raise FileCoordinator.lockTimeout"
    case .presenterUnreachable(let item, let record, let pid, let reason):
      return "cannot ask the presenter of record '\(record)'"
        + (pid.map { " in process \($0)" } ?? "") + " before accessing '\(item)': the record is damaged (\(reason)); "
        + "its process writes it again when it notices: retry, or run groupctl doctor"
    case .presenterFailed(let item, let pid, let message):
      return "a presenter of '\(item)' in process \(pid) refused: \(message)"
    case .container(let error):
      return error.description
    case .system(let error):
      return error.description
    case .openURL(let error):
      return error.description
    case .presentersUnavailable(let reason):
      return "cannot register a file presenter: \(reason)"
    }
  }

  package static func wrap<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  package static func wrap<T: ~Copyable>(_ body: () throws(GroupContainerError) -> T) throws(FileCoordinatorError) -> T
  {
    do { return try body() } catch { throw .container(error) }
  }
}
