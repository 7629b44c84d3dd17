import Foundation
import GroupContainerCore
import Logging
import Messaging
import Synchronization
import SystemLayer

/// This process's share of one container's `.coordination/` directory: its messaging (liveness lock, inbox,
/// messenger: the Messaging module's `MessagingSpace`), the lock table, the presenter registry and the presenters it
/// hosts. One per container per process, kept for the process's lifetime. When it starts, it registers its parts
/// with the messaging: the presenter host receives prepares and finishes, and reaping a dead process removes its
/// presenter records and sweeps its temp files (the launching module registers its own part on first use).
///
/// ```
/// .coordination/                (the names: CoordinationPaths)
///   counters              mapped 64-bit counters (their words: CoordinationCounters)
///   locks/<hash>          one lock file per coordinated item and kind (LockOrder.swift)
///   processes/<proc>.lock LOCK_SH held by the live process <pid>.<start> (Liveness.swift, Messaging)
///   presenters/<h>/<id>   one record per registered presenter, by a hash of its item (PresenterRegistry.swift)
///   inbox/<proc>/         messages to that process: files, .socket (MessageTransport.swift), .acks (Messaging)
///   acks/<n>              the ack boards, each held by one live process and linked into its inbox (AckBoard.swift)
///   schemes/<scheme>      how to launch the app that opens <scheme>: URLs (URLOpening.swift, AppLaunching)
///   handlers/<scheme>.<proc> the live process <proc> handles <scheme>: URLs
///   handlers/@requests.<scheme>.<proc> … and performs intents sent to <scheme> (URLOpening.swift, AppLaunching)
///   deliveries/<id>       the claim, then the reply, of one intent delivery (DeliveryLedger.swift, AppLaunching)
/// ```
final class CoordinationSpace: @unchecked Sendable {  // all `let`; the parts guard their own state
  static let logger = Logger(label: "GroupContainer.FileCoordination")
  /// The spaces of this process: one per container directory (device and inode), found by every path it was
  /// opened under — a symlinked root and the real path must not make two spaces whose presenter ids collide.
  private struct Spaces {
    var byIdentity: [String: CoordinationSpace] = [:]
    var byPath: [String: CoordinationSpace] = [:] {
      didSet {  // a container opened inside another takes the paths beneath it
        lastLocated = nil
        CoordinationSpace.placements.add(1, ordering: .releasing)
      }
    }
    /// The last URL `locateFast` placed (its string, by bytes) and where: a process accesses one item again and
    /// again, and parsing the URL, finding the container and splitting the path were a fifth of an empty access.
    var lastLocated: (url: String, space: CoordinationSpace, item: ContainerPath)?
  }
  private static let spaces = Mutex(Spaces())
  /// Moves on whenever the paths spaces are found by change: a URL placed before (`locate`) is placed the same way
  /// while it has not moved (a coordinator's fast path keeps its item's place with it, FastAccess.swift).
  static let placements = Atomic<UInt64>(0)
  /// Held while a space is made and started: a space is listed (`all`, `locate`, `open`) only once it is whole —
  /// listed before its presenter host existed, another thread's `removeFilePresenter` trapped on the nil host.
  private static let opening = NSLock()

  /// Every space this process opened.
  static var all: [CoordinationSpace] { spaces.withLock { Array($0.byIdentity.values) } }

  let containerPath: String
  /// The container directory, open for the process's life: every container file is reached beneath it.
  let root: ContainerDirectory
  let directory: String
  let fileMode: mode_t
  let directoryMode: mode_t
  let me = ProcessName.current
  let counters: MappedCounters
  let locks: LockTable
  /// The array of the last access's items, given back when it ends (CoordinatedAccess).
  let spareItems = SpareArray<CoordinatedAccess.Item>()
  let registry: PresenterRegistry
  /// Items seen with no symbolic link on their way, while nothing changed there (LinkFreePaths.swift).
  let linkFreePaths: LinkFreePaths
  /// This process's liveness lock, inbox and messenger, and the parts registered with them.
  let messaging: MessagingSpace
  private(set) var host: PresenterHost!
  /// Runs the temp-file sweeps that reaping asks for (`sweepAfterReaping`), one at a time, off the reaper's thread.
  private let sweeper = DispatchQueue(label: "GroupContainer.FileCoordination.sweeper", qos: .utility)
  private static let onSweeper = DispatchSpecificKey<Bool>()
  /// A sweep is queued and has not started yet: further reaps need no other.
  private let sweepQueued = Atomic<Bool>(false)

  /// Where atomic replaces in this container make their temp files (AtomicReplace.swift): watchers of the
  /// written file's directory then hear one event per replace, not four. Swept like every other directory.
  static let stagingDirectory = CoordinationPaths.staging

  var messenger: Messenger { messaging.messenger }
  /// Whether `process` is alive, by the liveness rule (Liveness.swift, Messaging); a dead one is reaped on the way.
  func isAlive(_ process: ProcessName) -> Bool { messaging.isAlive(process) }

  /// Opens (once per process) the coordination space of the container at `containerPath`.
  @discardableResult
  static func open(
    containerPath: String, fileMode: mode_t, directoryMode: mode_t
  ) throws(GroupContainerError) -> CoordinationSpace {
    if let space = spaces.withLock({ $0.byPath[containerPath] }) { return space }
    ConformanceWarmUp.start()
    opening.lock()
    defer { opening.unlock() }
    if let space = spaces.withLock({ $0.byPath[containerPath] }) { return space }
    // Start inotify before this process opens many descriptors (FD_SETSIZE trap). Without it (no instance
    // left) coordination still works; only presenters are refused (PresenterHost.add).
    _ = Watcher.shared.unavailableReason
    let root = try GroupContainerError.wrap { () throws(FileSystemError) in
      try ContainerDirectory(path: containerPath)
    }
    let identity = "\(root.device):\(root.inode)"
    if let known = spaces.withLock({ spaces -> CoordinationSpace? in
      guard let known = spaces.byIdentity[identity] else { return nil }
      spaces.byPath[containerPath] = known
      return known
    }) {
      return known
    }
    let space = try GroupContainerError.wrap { () throws(FileSystemError) in
      let space = try CoordinationSpace(root: root, fileMode: fileMode, directoryMode: directoryMode)
      try space.start()
      return space
    }
    spaces.withLock { spaces in
      spaces.byIdentity[identity] = space
      spaces.byPath[containerPath] = space
    }
    return space
  }

  /// The space and container-relative path for an item URL: a container opened in this process, or the
  /// nearest ancestor directory that has a `.coordination/` directory.
  static func locate(_ url: URL) throws(GroupContainerError) -> (CoordinationSpace, ContainerPath) {
    // With no base, the URL's string is all of it: the key of the last URL placed (only file URLs are).
    let string = url.baseURL == nil ? url.relativeString : nil
    if let string, let found = locateAgain(string) { return found }
    guard url.isFileURL else { throw .notInContainer(url.absoluteString) }
    if let string, let found = locateFast(url, string: string) { return found }
    let path = url.standardizedFileURL.path
    let known = spaces.withLock { $0.byPath }
    if let (base, space) = known.filter({ path == $0.key || path.hasPrefix($0.key + "/") })
      .max(by: { $0.key.count < $1.key.count })
    {
      return (space, try relativePath(path, in: base))
    }
    var candidate = (path as NSString).deletingLastPathComponent
    while candidate.count > 1 {
      let marker = candidate + "/" + CoordinationPaths.counters
      if (try? FileSystem.status(marker))??.kind == .regular {
        let st = (try? FileSystem.status(candidate)) ?? nil
        let shared = (st?.mode ?? 0) & 0o2000 != 0
        let space = try open(
          containerPath: candidate, fileMode: shared ? 0o660 : 0o600, directoryMode: shared ? 0o2770 : 0o700)
        return (space, try relativePath(path, in: candidate))
      }
      candidate = (candidate as NSString).deletingLastPathComponent
    }
    throw .notInContainer(path)
  }

  /// `locate` for a plain file URL inside a container opened in this process, by bytes (`ContainerPath.lexical`):
  /// the longest container path the URL's path lies in wins, as on the exact route. nil: take the exact route.
  /// `string` is the URL's (it has no base), remembered with the answer for `locateAgain`.
  private static func locateFast(_ url: URL, string: String) -> (CoordinationSpace, ContainerPath)? {
    var path = url.path(percentEncoded: true)
    let found = path.withUTF8 { path -> (CoordinationSpace, ContainerPath)? in
      let best = spaces.withLock { spaces -> (base: String, space: CoordinationSpace)? in
        var best: (base: String, space: CoordinationSpace)?
        for (base, space) in spaces.byPath where base.utf8.count > best?.base.utf8.count ?? 0 {
          var base = base
          if base.withUTF8({ ContainerPath.isInside(path, $0) }) { best = (base, space) }
        }
        return best
      }
      guard var base = best?.base, let space = best?.space,
        let item = base.withUTF8({ ContainerPath.lexical(path: path, base: $0) })
      else { return nil }
      return (space, item)
    }
    if let (space, item) = found { spaces.withLock { $0.lastLocated = (string, space, item) } }
    return found
  }

  /// `locateFast`'s answer for the URL it placed last, when `string` is that URL's byte for byte. Bytes, not
  /// `String ==`, which equates NFC and NFD spellings (two files on Linux, ContainerPath.swift) — Foundation
  /// escapes non-ASCII bytes in URL strings today, but this does not lean on it.
  private static func locateAgain(_ string: String) -> (CoordinationSpace, ContainerPath)? {
    spaces.withLock { spaces in
      guard let last = spaces.lastLocated, ContainerPath.sameBytes(last.url, string) else { return nil }
      return (last.space, last.item)
    }
  }

  /// `absolute`, which lies in the container reached at `base`, relative to the container.
  private static func relativePath(_ absolute: String, in base: String) throws(GroupContainerError) -> ContainerPath {
    if absolute == base { return .root }
    return try ContainerPath(String(absolute.dropFirst(base.count + 1)))
  }

  /// The URL of `item`; the last one made is kept for the next call with the same item (a read gives its accessor
  /// this URL, and making one is a third of a read's allocations).
  func url(for item: ContainerPath) -> URL {
    if let last = lastURL.withLock({ $0 }), last.item == item { return last.url }
    let url = URL(fileURLWithPath: item.isRoot ? containerPath : containerPath + "/" + item.string)
    lastURL.withLock { $0 = (item, url) }
    return url
  }

  private let lastURL = Mutex<(item: ContainerPath, url: URL)?>(nil)

  func absolutePath(_ item: ContainerPath) -> String {
    item.isRoot ? containerPath : containerPath + "/" + item.string
  }

  private init(root: ContainerDirectory, fileMode: mode_t, directoryMode: mode_t) throws(FileSystemError) {
    let containerPath = root.path
    self.root = root
    self.containerPath = containerPath
    self.directory = containerPath + "/" + CoordinationPaths.directory
    self.fileMode = fileMode
    self.directoryMode = directoryMode
    for dir in CoordinationPaths.spaceDirectories { try root.makeDirectory(dir, mode: directoryMode) }
    Self.stageReplacements(root: root, directoryMode: directoryMode)
    let coordination = try root.openDirectory(CoordinationPaths.directory)
    counters = try MappedCounters(
      fd: coordination.openOrCreate(
        CoordinationPaths.Name.counters, mode: fileMode, size: Int64(MappedCounters.fileSize)))
    // Before the lock table, whose sweeps ask it which builds the live processes run (Rule 3b).
    let messaging = try MessagingSpace(root: root, fileMode: fileMode, directoryMode: directoryMode)
    self.messaging = messaging
    locks = LockTable(
      directory: try root.openDirectory(CoordinationPaths.locks), fileMode: fileMode,
      revocation: LockRevocation(counters: counters),
      fileSweep: LockFileSweep(counters: counters, olderBuildIsAlive: { messaging.olderBuildIsAlive() }))
    linkFreePaths = LinkFreePaths(containerPath: containerPath, root: root)
    registry = PresenterRegistry(
      directory: directory + "/" + CoordinationPaths.Name.presenters, root: root, counters: counters,
      fileMode: fileMode, directoryMode: directoryMode)
  }

  /// Makes the staging directory and has replaces use it. It is an optimisation only: when something else is in
  /// its place (a link, a FIFO, a file), replaces make their temp files next to their targets, as without it.
  private static func stageReplacements(root: ContainerDirectory, directoryMode: mode_t) {
    do {
      try root.makeDirectory(stagingDirectory, mode: directoryMode)
      root.stageReplacements(in: stagingDirectory)
    } catch {
      logger.warning("replaces make their temp files next to their targets: \(error)")
    }
  }

  /// After the container was removed under this process (`rm -rf`): makes the container directory again, opens it
  /// again (everything is resolved beneath the new one, not the deleted one), makes the layout, the private
  /// directories and `parents` again, and points the lock table at the new `locks`. The caller republishes the
  /// liveness lock, the inbox watch and the presenters (PresenterHost).
  func recreateAfterRemoval(parents: [ContainerPath]) throws(FileSystemError) {
    try FileSystem.makeDirectories(containerPath, mode: directoryMode)
    try root.reopen()  // O_NOFOLLOW | O_DIRECTORY: a symlink planted in its place is refused
    linkFreePaths.forgetAll()  // its watches were on the deleted directories
    let made =
      GroupContainer.layout + CoordinationPaths.spaceDirectories + [CoordinationPaths.inbox(of: me)]
      + CoordinationPaths.startedDirectories
      + parents.filter { !$0.isRoot }.flatMap { parent in (parent.ancestors + [parent]).map(\.string) }
    for dir in made { try root.makeDirectory(dir, mode: directoryMode) }
    Self.stageReplacements(root: root, directoryMode: directoryMode)
    locks.rebind(directory: try root.openDirectory(CoordinationPaths.locks))
    // The mappings of the deleted counters and ack board: the same addresses, the new files.
    let coordination = try root.openDirectory(CoordinationPaths.directory)
    try counters.rebind(
      to: coordination.openOrCreate(
        CoordinationPaths.Name.counters, mode: fileMode, size: Int64(MappedCounters.fileSize)))
    try messenger.rebindBoard()
  }

  private func start() throws(FileSystemError) {
    let host = PresenterHost(space: self)
    self.host = host
    messaging.receive([.prepare, .finish]) { message, asDatagram in host.receive(message, asDatagram: asDatagram) }
    messaging.onTick { host.checkSenders() }
    messaging.onInboxRemoved { host.containerRemoved() }
    messaging.onReap { [registry] process in registry.removeAll(of: process) }
    messaging.onReap { [unowned self] _ in sweepAfterReaping() }
    for dir in CoordinationPaths.startedDirectories { try root.makeDirectory(dir, mode: directoryMode) }
    try messaging.start()
    sweeper.setSpecific(key: Self.onSweeper, value: true)
    // The sweep below covers whatever reaping finds now: no second one.
    sweepQueued.store(true, ordering: .releasing)
    messaging.reapDeadProcesses()
    sweeper.sync { sweepAbandonedTemporaries() }
    sweepQueued.store(false, ordering: .releasing)
  }

  /// A dead process was reaped: sweep the temp files it may have left (a writer killed between creating its temp
  /// file and its rename), which until now waited for the next process to open the container. Reaps come in
  /// bursts and on threads that must not walk the container, so one sweep is queued in the background; reaps made
  /// by a sweep itself (it judges writers by the liveness rule) queue none, so sweeps never feed each other.
  func sweepAfterReaping() {
    guard DispatchQueue.getSpecific(key: Self.onSweeper) == nil else { return }
    guard !sweepQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
    sweeper.async { [self] in
      sweepQueued.store(false, ordering: .releasing)
      sweepAbandonedTemporaries()
    }
  }
}
