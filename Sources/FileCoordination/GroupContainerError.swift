import SystemLayer

/// Why a container, path or coordinated access was refused or failed.
///
/// Every case says what was wrong, where, and (when it helps) what to do instead.
public enum GroupContainerError: Error, CustomStringConvertible, Sendable, Equatable {
  /// The identifier breaks a rule; `rule` names it.
  case invalidIdentifier(String, rule: String)
  /// A container-relative path breaks a rule; `rule` names it.
  case invalidPath(String, rule: String)
  /// The path resolves (through a symlink) to somewhere outside the container, or a directory on the way is an
  /// absolute symlink (never followed: see Architecture, "Paths are resolved from the container's descriptor").
  case pathEscapesContainer(String, container: String)
  /// The URL is not inside any group container this process can coordinate.
  case notInContainer(String)
  /// The container root could not be determined.
  case noContainerRoot(String)
  /// A system call failed.
  case system(FileSystemError)
  /// A file the framework owns holds something it cannot use (it was left alone or set aside).
  case corruptFile(String, reason: String)
  /// The container's directory lives on a file system where flock or inotify do not work as the package needs
  /// (`kind` names it, `reason` says what breaks); set `GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1` or
  /// ``GroupContainer/allowsUnsupportedFileSystem`` to use it anyway.
  case unsupportedFileSystem(String, kind: String, reason: String)
  /// A write of `Documents/Inbox/` or of a file in it, where other apps' handed-over files arrive: they may be
  /// read, deleted and moved out, not changed in place (InboxRule).
  case inboxIsReadOnly(String)

  /// What failed, on which path, and what to do.
  public var description: String {
    switch self {
    case .invalidIdentifier(let id, let rule):
      return "container identifier '\(id)' is invalid: \(rule)"
    case .invalidPath(let path, let rule):
      return "path '\(path)' is invalid: \(rule)"
    case .pathEscapesContainer(let path, let container):
      return
        "path '\(path)' leads outside the container '\(container)' (through a symbolic link; absolute links are "
        + "never followed): only items inside it can be used, reached by relative links that stay inside"
    case .notInContainer(let url):
      return "'\(url)' is not inside a group container: open one with GroupContainer(identifier:) and use its URLs"
    case .noContainerRoot(let reason):
      return "cannot find the group container root: \(reason)"
    case .system(let error):
      return error.description
    case .corruptFile(let path, let reason):
      return "'\(path)' is corrupt: \(reason)"
    case .unsupportedFileSystem(let path, let kind, let reason):
      return "'\(path)' is on \(kind), where the container's guarantees do not hold (\(reason)): put the container "
        + "root on a local disk (--root or GROUP_CONTAINER_ROOT), or set GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1 "
        + "to use it anyway"
    case .inboxIsReadOnly(let path):
      return "'\(path)' is in Documents/Inbox, where files handed over by other apps arrive: it can be read, deleted "
        + "or moved out, not written; move the file out of the Inbox (e.g. to Documents/) and change it there"
    }
  }
}

extension GroupContainerError {
  /// Runs a SystemLayer call and wraps its error.
  static func wrap<T>(_ body: () throws(FileSystemError) -> T) throws(GroupContainerError) -> T {
    do { return try body() } catch { throw .system(error) }
  }
}
