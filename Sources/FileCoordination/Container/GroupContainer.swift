import Foundation
import Glibc
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
/// The type lives in `FileCoordination` (and is re-exported by `GroupContainer`) because every feature module
/// needs it and the coordinator needs its root.
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

  /// Opens (creating if needed) the container for `identifier`.
  /// - Parameters:
  ///   - identifier: the group's reverse-DNS identifier, e.g. `group.com.example.timer`.
  ///   - root: the directory holding containers; `nil` means the environment's (see the type's discussion).
  ///   - sharing: who may use the container: this user (the default) or the directory's group.
  public init(identifier: String, root: URL? = nil, sharing: Sharing = .user) throws(GroupContainerError) {
    let rootPath = try Self.rootPath(root)
    try self.init(unopened: identifier, rootPath: rootPath, sharing: sharing)
    try GroupContainerError.wrap { () throws(FileSystemError) in
      try FileSystem.makeDirectories(rootPath, mode: 0o755)
    }
    try FileSystemSupport.check(rootPath: rootPath, containerPath: url.path)
    try createLayout(in: rootPath)
  }

  /// Opens the container for `identifier` only if it already exists: `nil` when `<root>/<identifier>` does not,
  /// and then nothing is created (not the root, not the container, not its layout). For tools that only read.
  ///
  /// An existing container is opened as it is: missing layout directories stay missing (a read of one fails as a
  /// missing item would). Its `.coordination/` runtime state is made if absent (a container made by hand, or
  /// emptied): coordinated reads and status need its lock files, and they live inside a container that exists.
  /// There is no check-then-create race: the existence check is followed by an open of the container directory
  /// that never creates it, so a container removed in between fails the open instead of being made again. A
  /// container this process may only read (a read-only file system, or no write permission) opens too: shared
  /// defaults are read from it; writes and coordinated access fail with the file system's error.
  /// - Parameters:
  ///   - identifier: the group's reverse-DNS identifier, e.g. `group.com.example.timer`.
  ///   - root: the directory holding containers; `nil` means the environment's (see the type's discussion).
  ///   - sharing: who may use the container: this user (the default) or the directory's group.
  /// - Throws: an invalid identifier, no determinable root, or a container path that is not a usable directory.
  public init?(existingIdentifier identifier: String, root: URL? = nil, sharing: Sharing = .user)
    throws(GroupContainerError)
  {
    let rootPath = try Self.rootPath(root)
    try self.init(unopened: identifier, rootPath: rootPath, sharing: sharing)
    let path = path
    guard try GroupContainerError.wrap({ () throws(FileSystemError) in try FileSystem.status(path) }) != nil else {
      return nil
    }
    try FileSystemSupport.check(rootPath: rootPath, containerPath: path)
    do {
      try coordinationSpace()  // opens the directory itself (O_DIRECTORY | O_NOFOLLOW), never creating it
    } catch let error
      where error.fileSystemError?.errno == .readOnlyFileSystem || error.fileSystemError?.errno == .permissionDenied
    {
      // A container this process may only read: its `.coordination/` state cannot be made, so coordinated
      // access fails when asked for (with this error); reading files and shared defaults still works.
      guard
        try GroupContainerError.wrap({ () throws(FileSystemError) in try FileSystem.status(path) })?.kind
          == .directory
      else { throw error }
    }
  }

  /// The value for `identifier` in `rootPath`, validated, with nothing opened or created yet.
  private init(unopened identifier: String, rootPath: String, sharing: Sharing) throws(GroupContainerError) {
    try Self.validate(identifier: identifier)
    self.identifier = identifier
    self.sharing = sharing
    self.url = URL(fileURLWithPath: rootPath, isDirectory: true).appendingPathComponent(identifier, isDirectory: true)
    self.path = url.path
  }

  /// `root` as a path, else the environment's root.
  private static func rootPath(_ root: URL?) throws(GroupContainerError) -> String {
    if let root { return root.standardizedFileURL.path }
    return try defaultRoot()
  }

  /// This process's share of the container's `.coordination/` machinery (opened once per process).
  @discardableResult
  func coordinationSpace() throws(GroupContainerError) -> CoordinationSpace {
    try CoordinationSpace.open(containerPath: path, fileMode: sharing.fileMode, directoryMode: sharing.directoryMode)
  }

  /// Whether the process named `pid` + low 32 bits of its start time is alive, by its liveness lock in this
  /// container (see `CoordinationSpace.isAlive(pid:startTimeLow32:)`); nil when unknown here.
  package func processIsAlive(pid: Int32, startTimeLow32: UInt32) -> Bool? {
    (try? coordinationSpace())?.isAlive(pid: pid, startTimeLow32: startTimeLow32)
  }

  /// The directories whose shared tree locks this process keeps cached in the container now (LockOrder.swift,
  /// Rule 4a), sorted, the root as "."; for the test helper.
  package func cachedTreeLocks() -> [String] {
    ((try? coordinationSpace())?.locks.cached() ?? []).map { $0.path.isRoot ? "." : $0.path.string }.sorted()
  }

  /// How long a cached lock may stay idle in this process (default 100 ms); the test helper makes it long to
  /// see what revocation alone does.
  package static func setLockCacheLinger(milliseconds: UInt64) {
    LockTable.lingerNanoseconds.store(milliseconds * 1_000_000, ordering: .relaxed)
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

  static let layout = ["Library", "Library/Preferences", "Library/Caches", "Downloads", "Documents"]

  /// Makes the container directory in the root (the root is opened by path, following links: a symlinked root is
  /// allowed; the container is made with `mkdirat` and a symlink in its place is refused), then the layout beneath
  /// the container's descriptor (`ContainerDirectory.makeDirectory`): a layout directory swapped for a symlink is
  /// refused, never followed.
  private func createLayout(in rootPath: String) throws(GroupContainerError) {
    let mode = sharing.directoryMode
    let identifier = identifier
    try GroupContainerError.wrap { () throws(FileSystemError) in
      let root = try SystemFD.open(rootPath, [.readOnly, .directory, .followSymlink])
      defer { root.close() }
      try root.makeDirectory(identifier, mode: mode)
    }
    // Opening the space opens the container with O_NOFOLLOW | O_DIRECTORY: a symlink planted in its place
    // since is refused there.
    let container = try coordinationSpace().root
    for dir in Self.layout {
      try beneath(try ContainerPath(dir)) { () throws(FileSystemError) in
        try container.makeDirectory(dir, mode: mode)
      }
    }
  }

  /// Validates a container-relative path and returns its URL, refusing anything that leads outside.
  public func url(forRelativePath relative: String) throws(GroupContainerError) -> URL {
    let item = try ContainerPath(relative)
    try checkBeneath(item)
    return url(for: item)
  }

  func url(for item: ContainerPath) -> URL {
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
  func exactRelativePath(of url: URL) throws(GroupContainerError) -> ContainerPath {
    let base = path
    let target = url.standardizedFileURL.path
    if target == base { return .root }
    guard target.hasPrefix(base + "/") else { throw .notInContainer(url.path) }
    return try ContainerPath(String(target.dropFirst(base.count + 1)))
  }

  /// Refuses a path whose existing part resolves, through symlinks, to outside the container.
  func checkBeneath(_ item: ContainerPath) throws(GroupContainerError) {
    _ = try resolveBeneath(item, containerPath: path)
  }

  /// Refuses now what a container write of `item` would refuse when it happens: a path whose existing part leads
  /// out of the container or into its private directory through a symbolic link, and an item in the Inbox, as
  /// written or where a link on the way leads (InboxRule). For work that writes much later (a download's
  /// destination, checked when the task is created): the write itself judges the links again.
  package func checkWritable(_ item: ContainerPath) throws(GroupContainerError) {
    try InboxRule.check(writing: item, resolved: try resolveBeneath(item, containerPath: path))
  }
}
