import Foundation
import Logging
import Synchronization
import SystemLayer

/// A process, named so PID reuse cannot fool anyone: `<pid>.<start time in clock ticks>`.
struct ProcessName: Hashable, Sendable, Codable, CustomStringConvertible {
  var pid: Int32
  var startTime: UInt64

  static let current: ProcessName = ProcessName(
    pid: CurrentProcess.id, startTime: CurrentProcess.startTime() ?? UInt64(MonotonicClock.nanoseconds()))

  init(pid: Int32, startTime: UInt64) {
    self.pid = pid
    self.startTime = startTime
  }

  /// Strict parse of `<pid>.<start>`.
  init?(_ string: some StringProtocol) {
    let parts = string.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 20 && $0.allSatisfy(\.isASCII) }),
      let pid = Int32(parts[0]), pid > 0, let start = UInt64(parts[1])
    else { return nil }
    self.init(pid: pid, startTime: start)
  }

  var description: String { "\(pid).\(startTime)" }

  init(from decoder: any Decoder) throws {
    let string = try decoder.singleValueContainer().decode(String.self)
    guard let parsed = ProcessName(string) else {
      throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad process name"))
    }
    self = parsed
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(description)
  }
}

/// This process's share of one container's `.coordination/` directory: its liveness lock, its inbox, the lock
/// table, the presenter registry and the presenters it hosts. One per container per process, kept for the
/// process's lifetime.
///
/// ```
/// .coordination/
///   counters              mapped 64-bit counters (presenter registry generation)
///   locks/<hash>          one lock file per coordinated item and kind (LockOrder.swift)
///   processes/<proc>.lock LOCK_SH held by the live process <pid>.<start>
///   presenters/<id>       one record per registered presenter (PresenterRegistry.swift)
///   inbox/<proc>/         messages to that process (MessageProtocol.swift)
///   schemes/<scheme>      how to launch the app that opens <scheme>: URLs (URLOpening.swift)
///   handlers/<scheme>.<proc> the live process <proc> handles <scheme>: URLs
/// ```
final class CoordinationSpace: @unchecked Sendable {  // all `let`; the parts guard their own state
  static let logger = Logger(label: "GroupContainer.FileCoordination")
  private static let spaces = Mutex<[String: CoordinationSpace]>([:])

  /// Every space this process opened.
  static var all: [CoordinationSpace] { spaces.withLock { Array($0.values) } }

  let containerPath: String
  let directory: String
  let fileMode: mode_t
  let directoryMode: mode_t
  let me = ProcessName.current
  let counters: MappedCounters
  let locks: LockTable
  let registry: PresenterRegistry
  private(set) var messenger: Messenger!
  private(set) var host: PresenterHost!
  private(set) var urlHandlers: URLHandlers!
  /// Held `LOCK_SH` for the life of the process: whoever gets `LOCK_EX` on it knows we are dead.
  private let processLock: SystemFD

  var inboxDirectory: String { directory + "/inbox" }
  var processesDirectory: String { directory + "/processes" }
  func inbox(of process: ProcessName) -> String { inboxDirectory + "/\(process)" }
  func processLockPath(_ process: ProcessName) -> String { processesDirectory + "/\(process).lock" }

  /// Opens (once per process) the coordination space of the container at `containerPath`.
  @discardableResult
  static func open(
    containerPath: String, fileMode: mode_t, directoryMode: mode_t
  ) throws(GroupContainerError) -> CoordinationSpace {
    if let space = spaces.withLock({ $0[containerPath] }) { return space }
    // Start inotify before this process opens many descriptors (FD_SETSIZE trap). Without it (no instance
    // left) coordination still works; only presenters are refused (PresenterHost.add).
    _ = Watcher.shared.unavailableReason
    let space = try GroupContainerError.wrap { () throws(FileSystemError) in
      try CoordinationSpace(containerPath: containerPath, fileMode: fileMode, directoryMode: directoryMode)
    }
    let winner = spaces.withLock { spaces in
      if let existing = spaces[containerPath] { return existing }
      spaces[containerPath] = space
      return space
    }
    if winner === space {
      try GroupContainerError.wrap { () throws(FileSystemError) in try space.start() }
    }
    return winner
  }

  /// The space and container-relative path for an item URL: a container opened in this process, or the
  /// nearest ancestor directory that has a `.coordination/` directory.
  static func locate(_ url: URL) throws(GroupContainerError) -> (CoordinationSpace, ContainerPath) {
    guard url.isFileURL else { throw .notInContainer(url.absoluteString) }
    let path = url.standardizedFileURL.path
    let known = spaces.withLock { Array($0.values) }
    if let space = known.filter({ path == $0.containerPath || path.hasPrefix($0.containerPath + "/") })
      .max(by: { $0.containerPath.count < $1.containerPath.count })
    {
      return (space, try space.relativePath(path))
    }
    var candidate = (path as NSString).deletingLastPathComponent
    while candidate.count > 1 {
      let marker = candidate + "/.coordination/counters"
      if (try? FileSystem.status(marker))??.kind == .regular {
        let st = (try? FileSystem.status(candidate)) ?? nil
        let shared = (st?.mode ?? 0) & 0o2000 != 0
        let space = try open(
          containerPath: candidate, fileMode: shared ? 0o660 : 0o600, directoryMode: shared ? 0o2770 : 0o700)
        return (space, try space.relativePath(path))
      }
      candidate = (candidate as NSString).deletingLastPathComponent
    }
    throw .notInContainer(path)
  }

  func relativePath(_ absolute: String) throws(GroupContainerError) -> ContainerPath {
    if absolute == containerPath { return .root }
    return try ContainerPath(String(absolute.dropFirst(containerPath.count + 1)))
  }

  func url(for item: ContainerPath) -> URL {
    URL(fileURLWithPath: item.isRoot ? containerPath : containerPath + "/" + item.string)
  }

  func absolutePath(_ item: ContainerPath) -> String {
    item.isRoot ? containerPath : containerPath + "/" + item.string
  }

  private init(containerPath: String, fileMode: mode_t, directoryMode: mode_t) throws(FileSystemError) {
    self.containerPath = containerPath
    self.directory = containerPath + "/.coordination"
    self.fileMode = fileMode
    self.directoryMode = directoryMode
    for dir in [
      directory, directory + "/locks", directory + "/processes", directory + "/presenters",
      directory + "/inbox",
    ] {
      try FileSystem.makeDirectory(dir, mode: directoryMode)
    }
    counters = try MappedCounters(path: directory + "/counters", mode: fileMode)
    locks = LockTable(directory: directory + "/locks", fileMode: fileMode)
    registry = PresenterRegistry(directory: directory + "/presenters", counters: counters, fileMode: fileMode)
    processLock = try Self.publishLivenessLock(of: me, in: directory + "/processes", mode: fileMode)
    // The inbox comes after the lock: a reaper that finds an inbox always finds its owner's lock file.
    try FileSystem.makeDirectory(inboxDirectory + "/\(me)", mode: directoryMode)
  }

  /// Publishes `process`'s liveness lock, held `LOCK_SH`, in `processes` (also again after the container was
  /// removed: PresenterHost). Only once it is held: a half-made file must never look like a dead process.
  static func publishLivenessLock(
    of process: ProcessName, in processes: String, mode: mode_t
  ) throws(FileSystemError) -> SystemFD {
    let temp = try AtomicReplace.createTemporary(in: processes, for: "\(process).lock", mode: mode)
    do {
      try temp.fd.lock(.shared)
      try FileSystem.rename(temp.path, to: processes + "/\(process).lock")
    } catch {
      temp.fd.close()
      try? FileSystem.removeFile(temp.path)
      throw error
    }
    return temp.fd
  }

  func publishLivenessLock() throws(FileSystemError) -> SystemFD {
    try Self.publishLivenessLock(of: me, in: processesDirectory, mode: fileMode)
  }

  private func start() throws(FileSystemError) {
    messenger = try Messenger(space: self)
    host = PresenterHost(space: self)
    urlHandlers = URLHandlers(space: self)
    try FileSystem.makeDirectory(directory + "/schemes", mode: directoryMode)
    try FileSystem.makeDirectory(directory + "/handlers", mode: directoryMode)
    try messenger.start()
    reapDeadProcesses()
  }
}
