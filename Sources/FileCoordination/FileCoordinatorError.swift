import SystemLayer

/// Why a coordinated access did not run its accessor, or failed around it.
public enum FileCoordinatorError: Error, CustomStringConvertible, Sendable {
  /// ``FileCoordinator/cancel()`` was called while the access waited.
  case cancelled
  /// A nested access of the same owner needed a write lock on an item it only holds for reading.
  /// flock cannot upgrade atomically: coordinate the write first (or in one write access).
  case lockUpgrade(String)
  /// A presenter in another process did not answer within the coordinator's timeout and the coordinator's
  /// policy is ``FileCoordinator/PresenterTimeoutPolicy/fail``.
  case presenterTimedOut(item: String, processID: Int32, seconds: Double)
  /// The access's locks were not free within ``FileCoordinator/lockTimeout``; `holderPID` is a process that held
  /// one of them then, when the kernel says.
  case lockTimedOut(item: String, holderPID: Int32?, seconds: Double)
  /// A presenter record in the container is damaged (truncated, edited, not a regular file), so its presenter —
  /// whose item is unknown — cannot be asked, and the coordinator's policy is
  /// ``FileCoordinator/PresenterTimeoutPolicy/fail``. `processID` is its owner, when the record's name tells.
  /// The owner writes its record again when it notices; `groupctl doctor` names records nobody repairs.
  case presenterUnreachable(item: String, record: String, processID: Int32?, reason: String)
  /// A presenter answered `savePresentedItemChanges`/`accommodate…Deletion` with an error.
  case presenterFailed(item: String, processID: Int32, message: String)
  /// The item or container was refused.
  case container(GroupContainerError)
  /// A system call failed.
  case system(FileSystemError)
  /// A URL could not be opened.
  case openURL(OpenURLError)
  /// File presenters need inotify, which this process could not get (the reason names the limit and the sysctl
  /// that raises it). Coordinated reads and writes work without it.
  case presentersUnavailable(String)

  /// What failed, on which item, and what to do.
  public var description: String {
    switch self {
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

  static func wrap<T>(_ body: () throws(FileSystemError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  static func wrap<T>(_ body: () throws(GroupContainerError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .container(error) }
  }
}
