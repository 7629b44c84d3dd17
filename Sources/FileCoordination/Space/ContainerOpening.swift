import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// Opening a container: its initializers start this process's share of `.coordination/` (`CoordinationSpace`), which
/// is why they live here, above the type (GroupContainerCore), with the machinery they start.
extension GroupContainer {
  /// Opens (creating if needed) the container for `identifier`.
  /// - Parameters:
  ///   - identifier: the group's reverse-DNS identifier, e.g. `group.com.example.timer`.
  ///   - root: the directory holding containers; `nil` means the environment's (see the type's discussion).
  ///   - sharing: who may use the container: this user (the default) or the directory's group.
  public init(identifier: String, root: URL? = nil, sharing: Sharing = .user) throws(GroupContainerError) {
    Self.installOpener()
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
    Self.installOpener()
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

  /// This process's share of the container's `.coordination/` machinery (opened once per process).
  /// Tells GroupContainerCore how `directory()` reaches the container: through this process's space (ContainerRoot.swift).
  private static func installOpener() { _ = openerInstalled }
  private static let openerInstalled: Void = opener.withLock {
    $0 = Opener { container throws(GroupContainerError) in try container.coordinationSpace().root }
  }

  @discardableResult
  func coordinationSpace() throws(GroupContainerError) -> CoordinationSpace {
    try CoordinationSpace.open(containerPath: path, fileMode: sharing.fileMode, directoryMode: sharing.directoryMode)
  }

  /// This process's messaging in the container (its inbox, its messenger, the parts registered with it): the
  /// launching module (AppLaunching) registers its URL handlers there on first use.
  package func messagingSpace() throws(GroupContainerError) -> MessagingSpace { try coordinationSpace().messaging }

  /// Whether the process named `pid` + low 32 bits of its start time is alive, by its liveness lock in this
  /// container (see `MessagingSpace.isAlive(pid:startTimeLow32:)`); nil when unknown here.
  package func processIsAlive(pid: Int32, startTimeLow32: UInt32) -> Bool? {
    (try? coordinationSpace())?.messaging.isAlive(pid: pid, startTimeLow32: startTimeLow32)
  }

  /// The directories whose shared tree locks this process keeps cached in the container now (LockOrder.swift,
  /// Rule 4a), sorted, the root as "."; for the test helper.
  package func cachedTreeLocks() -> [String] {
    ((try? coordinationSpace())?.locks.cached() ?? []).map { $0.path.isRoot ? "." : $0.path.string }.sorted()
  }

  /// Removes the lock files of the container that no process holds (LockFileSweep.swift, Rule 3b) — nor has open,
  /// with `keepingOpen` — and returns how many; 0 when another process sweeps now. Sweeps also run by themselves,
  /// every few hundred lock files made, keeping open ones.
  package func removeUnusedLockFiles(keepingOpen: Bool = true) -> Int {
    (try? coordinationSpace())?.locks.removeUnusedLockFiles(keepingOpen: keepingOpen) ?? 0
  }

  /// Lock files created in the container between two sweeps of them (default 256), in this process; tests make it
  /// small.
  package static func setLockFileSweepThreshold(_ files: UInt64) {
    LockFileSweep.threshold.store(files, ordering: .relaxed)
  }

  /// How long a cached lock may stay idle in this process (default 100 ms); the test helper makes it long to
  /// see what revocation alone does.
  package static func setLockCacheLinger(milliseconds: UInt64) {
    LockTable.lingerNanoseconds.store(milliseconds * 1_000_000, ordering: .relaxed)
  }

  /// Makes the container directory in the root (the root is opened by path, following links: a symlinked root is
  /// allowed; the container is made with `mkdirat` and a symlink in its place is refused), then the layout beneath
  /// the container's descriptor (`ContainerDirectory.makeDirectory`): a layout directory swapped for a symlink is
  /// refused, never followed.
  private func createLayout(in rootPath: String) throws(GroupContainerError) {
    let mode = sharing.directoryMode
    let identifier = identifier
    try GroupContainerError.wrap { () throws(FileSystemError) in
      let root = try SystemFD.open(rootPath, [.readOnly, .directory, .followSymlink])
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
}
