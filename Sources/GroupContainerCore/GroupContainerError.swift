import SystemLayer

/// Why a container, path or coordinated access was refused or failed.
///
/// Every error says what was wrong, where, and (when it helps) what to do instead. Tell errors apart by ``code``
/// (new codes may be added: a `switch` over it needs a `default`); a failed system call under it is
/// ``underlyingError``.
public struct GroupContainerError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure a ``GroupContainerError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `invalidPath`.
    public var description: String { name }

    /// The identifier breaks a rule.
    public static let invalidIdentifier = Code("invalidIdentifier")
    /// A container-relative path breaks a rule.
    public static let invalidPath = Code("invalidPath")
    /// The path resolves (through a symlink) to somewhere outside the container.
    public static let pathEscapesContainer = Code("pathEscapesContainer")
    /// The URL is not inside any group container this process can coordinate.
    public static let notInContainer = Code("notInContainer")
    /// The container root could not be determined.
    public static let noContainerRoot = Code("noContainerRoot")
    /// A system call failed (``GroupContainerError/underlyingError``).
    public static let system = Code("system")
    /// A file the framework owns holds something it cannot use.
    public static let corruptFile = Code("corruptFile")
    /// The container lives on a file system where flock or inotify do not work as the package needs.
    public static let unsupportedFileSystem = Code("unsupportedFileSystem")
    /// A write of `Documents/Inbox/` or of a file in it.
    public static let inboxIsReadOnly = Code("inboxIsReadOnly")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case invalidIdentifier(String, rule: String)
    case invalidPath(String, rule: String)
    case pathEscapesContainer(String, container: String)
    case notInContainer(String)
    case noContainerRoot(String)
    case system(FileSystemError)
    case corruptFile(String, reason: String)
    case unsupportedFileSystem(String, kind: String, reason: String)
    case inboxIsReadOnly(String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The identifier breaks a rule; `rule` names it.
  public static func invalidIdentifier(_ identifier: String, rule: String) -> Self {
    Self(.invalidIdentifier(identifier, rule: rule))
  }
  /// A container-relative path breaks a rule; `rule` names it.
  public static func invalidPath(_ path: String, rule: String) -> Self { Self(.invalidPath(path, rule: rule)) }
  /// The path resolves (through a symlink) to somewhere outside the container, or a directory on the way is an
  /// absolute symlink (never followed: see Architecture, "Paths are resolved from the container's descriptor").
  public static func pathEscapesContainer(_ path: String, container: String) -> Self {
    Self(.pathEscapesContainer(path, container: container))
  }
  /// The URL is not inside any group container this process can coordinate.
  public static func notInContainer(_ url: String) -> Self { Self(.notInContainer(url)) }
  /// The container root could not be determined.
  public static func noContainerRoot(_ reason: String) -> Self { Self(.noContainerRoot(reason)) }
  /// A system call failed.
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }
  /// A file the framework owns holds something it cannot use (it was left alone or set aside).
  public static func corruptFile(_ path: String, reason: String) -> Self { Self(.corruptFile(path, reason: reason)) }
  /// The container's directory lives on a file system where flock or inotify do not work as the package needs
  /// (`kind` names it, `reason` says what breaks); set `GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1` or
  /// ``GroupContainer/allowsUnsupportedFileSystem`` to use it anyway.
  public static func unsupportedFileSystem(_ path: String, kind: String, reason: String) -> Self {
    Self(.unsupportedFileSystem(path, kind: kind, reason: reason))
  }
  /// A write of `Documents/Inbox/` or of a file in it, where other apps' handed-over files arrive: they may be
  /// read, deleted and moved out, not changed in place (InboxRule).
  public static func inboxIsReadOnly(_ path: String) -> Self { Self(.inboxIsReadOnly(path)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .invalidIdentifier: .invalidIdentifier
    case .invalidPath: .invalidPath
    case .pathEscapesContainer: .pathEscapesContainer
    case .notInContainer: .notInContainer
    case .noContainerRoot: .noContainerRoot
    case .system: .system
    case .corruptFile: .corruptFile
    case .unsupportedFileSystem: .unsupportedFileSystem
    case .inboxIsReadOnly: .inboxIsReadOnly
    }
  }

  /// The path (or identifier, or URL) the error is about; nil for ``Code/noContainerRoot``.
  public var path: String? {
    switch detail {
    case .invalidIdentifier(let path, _), .invalidPath(let path, _), .pathEscapesContainer(let path, _),
      .notInContainer(let path), .corruptFile(let path, _), .unsupportedFileSystem(let path, _, _),
      .inboxIsReadOnly(let path):
      path
    case .system(let error): error.path
    case .noContainerRoot: nil
    }
  }

  /// The rule that was broken (``Code/invalidIdentifier``, ``Code/invalidPath``), or why the container root, a
  /// file or the file system cannot be used (``Code/noContainerRoot``, ``Code/corruptFile``,
  /// ``Code/unsupportedFileSystem``).
  public var reason: String? {
    switch detail {
    case .invalidIdentifier(_, let text), .invalidPath(_, let text), .noContainerRoot(let text),
      .corruptFile(_, let text), .unsupportedFileSystem(_, _, let text):
      text
    default: nil
    }
  }

  /// The file system's name, for ``Code/unsupportedFileSystem`` (e.g. `nfs`).
  public var fileSystemKind: String? {
    if case .unsupportedFileSystem(_, let kind, _) = detail { kind } else { nil }
  }

  /// The container the path leads out of, for ``Code/pathEscapesContainer``.
  public var container: String? {
    if case .pathEscapesContainer(_, let container) = detail { container } else { nil }
  }

  /// The failed system call, for ``Code/system``.
  public var underlyingError: SystemError? {
    if case .system(let error) = detail { SystemError(error) } else { nil }
  }

  /// The failed system call in the package's own terms, for ``Code/system``.
  package var fileSystemError: FileSystemError? {
    if case .system(let error) = detail { error } else { nil }
  }

  /// What failed, on which path, and what to do.
  public var description: String {
    switch detail {
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
  package static func wrap<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(GroupContainerError) -> T {
    do { return try body() } catch { throw .system(error) }
  }
}
