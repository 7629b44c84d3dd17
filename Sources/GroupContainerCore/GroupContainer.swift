import Foundation
import SystemLayer

/// A directory several processes share: the Linux counterpart of an App Group container.
///
/// ```swift
/// let container = try GroupContainer(identifier: "group.com.example.timer")
/// let url = container.url.appending(path: "Documents/notes.txt")
/// ```
///
/// The container lives at `<root>/<identifier>/`, where the root is `$GROUP_CONTAINER_ROOT`, else
/// `$XDG_DATA_HOME/group-containers`, else `~/.local/share/group-containers`. Opening it creates the layout
/// Apple apps expect (`Library/Preferences`, `Library/Caches`, `Downloads`, `Documents`) and the private
/// `.coordination` directory that the coordinator, presenters and liveness checks use.
///
/// The type lives in `GroupContainerCore` (re-exported by `GroupContainer`), under every feature module that takes a
/// container; its initializers are FileCoordination's, because opening a container starts this process's share of
/// `.coordination/`.
public struct GroupContainer: Sendable, Hashable {
  /// Who may use the container.
  public enum Sharing: Sendable, Hashable {
    /// Only the current user: directories 0700, files 0600.
    case user
    /// Every member of the directory's group: directories setgid 2770, files 0660.
    case group

    package var directoryMode: mode_t { self == .user ? 0o700 : 0o2770 }
    /// Every file the framework creates is `fchmod`ed to this (umask would leave 0644).
    public var fileMode: mode_t { self == .user ? 0o600 : 0o660 }
  }

  /// The reverse-DNS identifier, e.g. `group.com.example.timer`.
  public let identifier: String
  /// The container directory.
  public let url: URL
  /// The container directory's path (kept: `url.path` makes a new string on every call, and every write asks).
  public let path: String
  /// Who may use the container: this user (the default) or the directory's group.
  public let sharing: Sharing

  /// The longest identifier accepted, in bytes (a file name's limit).
  public static let maxIdentifierBytes = 255

  /// The value for `identifier` in `rootPath`, validated, with nothing opened or created yet.
  package init(unopened identifier: String, rootPath: String, sharing: Sharing) throws(GroupContainerError) {
    try Self.validate(identifier: identifier)
    self.identifier = identifier
    self.sharing = sharing
    self.url = URL(fileURLWithPath: rootPath, isDirectory: true).appendingPathComponent(identifier, isDirectory: true)
    self.path = url.path
  }

  /// `root` as a path, else the environment's root.
  package static func rootPath(_ root: URL?) throws(GroupContainerError) -> String {
    if let root { return root.standardizedFileURL.path }
    return try defaultRoot()
  }

  /// The identifier rule: reverse-DNS characters `A-Z a-z 0-9 . -`, not empty, no `..`, at most 255 bytes.
  public static func validate(identifier: String) throws(GroupContainerError) {
    if identifier.isEmpty { throw .invalidIdentifier(identifier, rule: "it is empty") }
    if identifier.utf8.count > maxIdentifierBytes {
      throw .invalidIdentifier(
        String(identifier.prefix(40)) + "…", rule: "it is longer than \(maxIdentifierBytes) bytes")
    }
    if let bad = identifier.unicodeScalars.first(where: {
      !($0.isASCII && (isAlphanumeric($0) || $0 == "." || $0 == "-"))
    }) {
      throw .invalidIdentifier(
        identifier, rule: "only A-Z a-z 0-9 . - are allowed (found '\(bad.escaped(asASCII: true))')")
    }
    if identifier.contains("..") { throw .invalidIdentifier(identifier, rule: "'..' is not allowed") }
    if identifier.hasPrefix(".") || identifier.hasPrefix("-") {
      throw .invalidIdentifier(identifier, rule: "it must start with a letter or digit")
    }
  }

  private static func isAlphanumeric(_ s: Unicode.Scalar) -> Bool {
    ("a"..."z").contains(s) || ("A"..."Z").contains(s) || ("0"..."9").contains(s)
  }

  /// `$GROUP_CONTAINER_ROOT`, else `$XDG_DATA_HOME/group-containers`, else `~/.local/share/group-containers`.
  public static func defaultRoot() throws(GroupContainerError) -> String {
    if let root = Environment.value("GROUP_CONTAINER_ROOT"), !root.isEmpty {
      guard root.hasPrefix("/") else {
        throw .noContainerRoot("GROUP_CONTAINER_ROOT '\(root)' is not an absolute path")
      }
      return root
    }
    if let xdg = Environment.value("XDG_DATA_HOME"), xdg.hasPrefix("/") { return xdg + "/group-containers" }
    guard let home = Environment.value("HOME") ?? FileSystem.homeDirectory(), home.hasPrefix("/") else {
      throw .noContainerRoot("neither GROUP_CONTAINER_ROOT, XDG_DATA_HOME nor HOME is set")
    }
    return home + "/.local/share/group-containers"
  }

  /// `Library/Preferences`: shared defaults.
  public var preferencesURL: URL { url.appendingPathComponent("Library/Preferences", isDirectory: true) }
  /// `Library/Caches`: data that may be purged.
  public var cachesURL: URL { url.appendingPathComponent("Library/Caches", isDirectory: true) }
  /// `Downloads`: finished background downloads.
  public var downloadsURL: URL { url.appendingPathComponent("Downloads", isDirectory: true) }
  /// `Documents`: user data.
  public var documentsURL: URL { url.appendingPathComponent("Documents", isDirectory: true) }

  package static let layout = ["Library", "Library/Preferences", "Library/Caches", "Downloads", "Documents"]

  /// Validates a container-relative path and returns its URL, refusing anything that leads outside.
  public func url(forRelativePath relative: String) throws(GroupContainerError) -> URL {
    let item = try ContainerPath(relative)
    try checkBeneath(item)
    return url(for: item)
  }

  package func url(for item: ContainerPath) -> URL {
    item.isRoot ? url : url.appendingPathComponent(item.string)
  }

  /// The container-relative path of `url`, lexically (no symlinks resolved).
  public func relativePath(of url: URL) throws(GroupContainerError) -> ContainerPath {
    let base = path
    // A plain URL by its bytes (the fast route agrees with the exact one: FastPathTests); Foundation's
    // standardization was most of what a presenter process spent per message naming the item.
    if let plain = ContainerPath.lexical(url, in: base) { return plain }
    return try exactRelativePath(of: url)
  }

  /// `relativePath(of:)` by Foundation's standardization, for every URL (tests hold the fast route to it).
  package func exactRelativePath(of url: URL) throws(GroupContainerError) -> ContainerPath {
    let base = path
    let target = url.standardizedFileURL.path
    if target == base { return .root }
    guard target.hasPrefix(base + "/") else { throw .notInContainer(url.path) }
    return try ContainerPath(String(target.dropFirst(base.count + 1)))
  }

  /// Refuses a path whose existing part resolves, through symlinks, to outside the container.
  package func checkBeneath(_ item: ContainerPath) throws(GroupContainerError) {
    _ = try resolveBeneath(item, containerPath: path)
  }

}
