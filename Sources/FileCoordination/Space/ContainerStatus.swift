import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// A snapshot of who uses a container: live processes, registered presenters and held locks.
public struct ContainerStatus: Sendable, Codable {
  /// A live process that uses the container.
  public struct Process: Sendable, Codable, Hashable {
    /// Its process id.
    public var pid: Int32
    /// Start time in clock ticks since boot (with the pid, names the process uniquely).
    public var startTime: UInt64
    /// Whether it is the process that took the snapshot.
    public var isCurrent: Bool
  }

  /// A registered presenter, in any process.
  public struct Presenter: Sendable, Codable, Hashable {
    /// The registration's identifier.
    public var id: String
    /// The process the presenter lives in.
    public var pid: Int32
    /// Container-relative path of the presented item.
    public var item: String
    /// Whether it presents a directory (and so hears about items inside it).
    public var isDirectory: Bool
  }

  /// A presenter record that cannot be read: a presenter nobody can ask (its item is unknown). Its process writes
  /// it again when it notices; one of a process that is gone is removed when the process is found dead.
  public struct DamagedPresenter: Sendable, Codable, Hashable {
    /// The record's file name in `.coordination/presenters/`.
    public var record: String
    /// The process the record names, if its name has a record's shape.
    public var pid: Int32?
    /// What is wrong with it.
    public var reason: String
  }

  /// A coordination lock held or waited for.
  public struct Lock: Sendable, Codable, Hashable {
    /// The process holding it.
    public var pid: Int32
    /// Container-relative path of the coordinated item ("" for the container root).
    public var item: String
    /// `item`: the item's own lock; `tree`: the lock that guards everything inside a directory.
    public var kind: String
    /// Whether it is held for writing (`false`: shared by readers).
    public var exclusive: Bool
  }

  /// The container's directory.
  public var container: String
  /// Live processes that opened the container.
  public var processes: [Process]
  /// Presenters registered in it.
  public var presenters: [Presenter]
  /// Presenter records that cannot be read (each counts as a presenter that cannot be asked).
  public var damagedPresenters: [DamagedPresenter]
  /// Locks held on its items.
  public var locks: [Lock]
}

extension GroupContainer {
  /// Who is using the container now. Dead processes found on the way are cleaned up.
  public func status() throws(GroupContainerError) -> ContainerStatus {
    let space = try coordinationSpace()
    let processes = space.messaging.liveProcesses().map {
      ContainerStatus.Process(pid: $0.pid, startTime: $0.startTime, isCurrent: $0 == space.me)
    }
    let index = space.registry.index()
    let presenters = index.records.map {
      ContainerStatus.Presenter(id: $0.id, pid: $0.process.pid, item: $0.item, isDirectory: $0.isDirectory)
    }
    let damaged = index.damaged.filter { $0.process.map { space.isAlive($0) } ?? true }.map {
      ContainerStatus.DamagedPresenter(record: $0.name, pid: $0.process?.pid, reason: $0.reason)
    }
    // Lock files are named by hash; the kernel's /proc/locks says which inode is held by whom.
    let lockDirectory = space.directory + "/" + CoordinationPaths.Name.locks
    var byInode: [UInt64: (kind: String, item: String)] = [:]
    for name in (try? FileSystem.listDirectory(lockDirectory)) ?? [] {
      let file = CoordinationPaths.locks + "/" + name
      guard let (bytes, st) = try? space.root.readFile(file, limit: 8192) else { continue }
      let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .newlines)
      let kind = String(text.prefix(while: { $0 != " " }))
      byInode[st.inode] = (kind, String(text.dropFirst(kind.count + 1)))
    }
    let locks = KernelLocks.flocks().compactMap { lock -> ContainerStatus.Lock? in
      guard let entry = byInode[lock.inode] else { return nil }
      return ContainerStatus.Lock(pid: lock.pid, item: entry.item, kind: entry.kind, exclusive: lock.exclusive)
    }
    return ContainerStatus(
      container: path, processes: processes, presenters: presenters, damagedPresenters: damaged,
      locks: locks.sorted { ($0.item, $0.kind, $0.pid) < ($1.item, $1.kind, $1.pid) })
  }

  /// Replaces the file at `url` atomically: readers see the old or the new contents, never a mix, and a
  /// crash at any point leaves the old file. Call it inside a coordinated write.
  ///
  /// The file, its temp file and the rename are all reached from the container's directory descriptor, so
  /// another process swapping a directory on the way for a symlink cannot make the write land outside.
  /// A write into `Documents/Inbox/` is refused with `GroupContainerError.inboxIsReadOnly(_:)` (the Inbox rule:
  /// move a received file out before changing it).
  /// - Parameters:
  ///   - data: the new contents.
  ///   - url: the file's URL inside the container.
  ///   - durable: also survive power loss (fsync of the file and its directory).
  public func write(_ data: Data, to url: URL, durable: Bool = false) throws(GroupContainerError) {
    // The container's path and space once, the item by bytes where plain (`relativePath`): URL handling was most
    // of what a write on tmpfs cost beyond the replace itself.
    let base = path
    let root = try CoordinationSpace.open(
      containerPath: base, fileMode: sharing.fileMode, directoryMode: sharing.directoryMode
    ).root
    let item = try relativePath(of: url)
    try InboxRule.check(writing: item)
    let mode = sharing.fileMode
    let durability: AtomicReplace.Durability = durable ? .powerLoss : .processCrash
    // No link on the way (the common case): checked on the parent's descriptor that the replace then uses, the
    // item itself too unless this thread's coordinated write just checked it (CheckedWrite.swift).
    let relative = item.string
    let checked = CheckedWrite.vouches(for: item, root: root)
    let wrote = try beneath(item) { () throws(FileSystemError) in
      try root.replaceFileIfNoSymbolicLink(
        relative, with: data, mode: mode, durability: durability, nameChecked: checked)
    }
    if wrote { return }
    try InboxRule.check(writing: item, resolved: try resolveBeneath(item, containerPath: base, root: root))
    _ = try beneath(item) { () throws(FileSystemError) in
      try root.replaceFile(relative, with: data, mode: mode, durability: durability)
    }
  }

  /// The contents of the regular file at `url` (no symlink is followed at the last component; FIFOs, devices
  /// and directories are refused).
  public func contents(of url: URL, limit: Int = 1 << 30) throws(GroupContainerError) -> Data {
    let item = try relativePath(of: url)
    try checkBeneath(item)
    let root = try coordinationSpace().root
    return try beneath(item) { () throws(FileSystemError) in Data(try root.readFile(item.string, limit: limit).bytes) }
  }

  /// Runs a call that resolves `item` beneath the container, saying in the container's words why it failed.
  func beneath<T>(_ item: ContainerPath, _ body: () throws(FileSystemError) -> T) throws(GroupContainerError) -> T {
    do { return try body() } catch {
      switch error.errno {
      case .improperLink:
        throw .pathEscapesContainer(item.string, container: path)
      case .tooManySymbolicLinkLevels:
        throw .invalidPath(
          item.string, rule: "a symbolic link is in the way (\(error)); write and read the link's target instead")
      default:
        throw .system(error)
      }
    }
  }
}
