import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The downloads' files in `.coordination/downloads/`, shared by every session, observer and the agent:
///
/// ```
/// .coordination/downloads/
///   signal                   two change signals (MappedCounters, its words: DownloadSignals): requests (sessions →
///                            agent), updates (agent → all)
///   agent.lock               flocked (exclusive) by the running agent; holds its pid
///   agent.log                the agent's log (stdout and stderr of a started agent)
///   tasks/<id>.task          the request      (written once, by the creating session)
///   tasks/<id>.control       what sessions ask (any session)
///   tasks/<id>.status        what the agent did (only the agent)
///   tasks/<id>.partial       the bytes received so far
///   commits/<seq>.commit     the agent's group commits: accepted requests and final outcomes (CommitRecord)
///   sessions/<sid>/attach.lock   flocked (exclusive) by the one process attached to the session; holds its pid
///                            and the event format it reads (EventFormatHandshake)
///   sessions/<sid>/app           the app to start when events wait and nobody is attached
///   sessions/<sid>/events/<seq>-<id>-<kind>.event   queued events, removed once handled (a finished download's
///                            `finished` file may hold its `completed` event too: EventFormatHandshake)
///   sessions/<sid>/events/<seq>-<id>-batch.event    the events of several downloads of one group commit (format 3),
///                            removed once all are handled
/// ```
///
/// Everything is opened beneath the container's directory descriptor, without following links and without
/// blocking (a FIFO planted here is a damaged record, never a hang); records are checked on every read.
package final class DownloadStore: Sendable {
  package static let directory = CoordinationPaths.downloads
  static let tasksDirectory = directory + "/tasks"
  static let sessionsDirectory = directory + "/sessions"
  static let logger = Logger(label: "GroupContainer.BackgroundDownloads")

  package let container: GroupContainer
  package let root: ContainerDirectory
  package let fileMode: mode_t
  package let directoryMode: mode_t
  /// The `signal` file (its words: `DownloadSignals`).
  private let counters: MappedCounters
  /// Requests already read and checked: written once by their session and never changed, so every later look
  /// (a session's poll, the agent's pass, an observer's scan, each over every task) costs no file read.
  private let knownRequests = Mutex<[String: TaskRequest]>([:])

  /// Sessions post here after writing a task or a control; the agent listens.
  package var requests: ChangeSignal {
    ChangeSignal(counters, sequence: DownloadSignals.requestsSequence, listeners: DownloadSignals.requestsListeners)
  }
  /// The agent posts here after writing a status or an event; sessions and observers listen.
  package var updates: ChangeSignal {
    ChangeSignal(counters, sequence: DownloadSignals.updatesSequence, listeners: DownloadSignals.updatesListeners)
  }

  package init(container: GroupContainer) throws(DownloadError) {
    self.container = container
    fileMode = container.sharing.fileMode
    directoryMode = container.sharing.directoryMode
    do { root = try container.directory() } catch { throw .container(error) }
    let (root, fileMode, directoryMode) = (root, fileMode, directoryMode)
    counters = try Self.system { () throws(FileSystemError) in
      try MappedCounters(fd: try Self.makeLayout(root, fileMode: fileMode, directoryMode: directoryMode))
    }
  }

  /// Makes the store's directories (those already there are kept) and opens the signal file, created if missing.
  private static func makeLayout(
    _ root: ContainerDirectory, fileMode: mode_t, directoryMode: mode_t
  ) throws(FileSystemError) -> SystemFD {
    for d in [Self.directory, Self.tasksDirectory, Self.sessionsDirectory] {
      try root.makeDirectory(d, mode: directoryMode)
    }
    let files = try root.openDirectory(Self.directory)
    return try files.openOrCreate(DownloadSignals.fileName, mode: fileMode, size: Int64(MappedCounters.fileSize))
  }

  /// After `rm -rf` of the container (made again by the coordination layer, which also opens `root` again) or of
  /// `.coordination/downloads`: makes the layout again and maps the new signal file in place of the removed one
  /// (whose posts no agent hears). Returns whether it did. Called when a write found a directory missing.
  package func remakeIfRemoved() -> Bool {
    let signal = Self.directory + "/" + DownloadSignals.fileName
    if let atName = (try? root.status(signal)) ?? nil, atName.inode == counters.identity.inode { return false }
    do throws(FileSystemError) {
      try counters.rebind(to: Self.makeLayout(root, fileMode: fileMode, directoryMode: directoryMode))
      remakes.add(1, ordering: .releasing)
      Self.logger.warning("'\(container.path)/\(Self.directory)' was removed: made again")
      return true
    } catch {
      Self.logger.error("'\(container.path)/\(Self.directory)' was removed and cannot be made again: \(error)")
      return false
    }
  }

  /// When another process made the layout again since this store mapped its signal file (another file is at its
  /// name), maps that one as `remakeIfRemoved` does and returns true. One `fstatat`; while nothing is there, it makes
  /// nothing (a write does, through `remakeIfRemoved`).
  package func followRemake() -> Bool {
    let signal = Self.directory + "/" + DownloadSignals.fileName
    guard let atName = (try? root.status(signal)) ?? nil, atName.inode != counters.identity.inode else { return false }
    return remakeIfRemoved()
  }

  /// Layouts made again by `remakeIfRemoved` (a session then attaches again: `DownloadSession.reattachIfRemade`).
  package var remakeCount: Int { remakes.load(ordering: .acquiring) }
  private let remakes = Atomic<Int>(0)

  /// Runs `write`; when a directory on its way is missing and the store's layout was removed, makes it again and
  /// runs `write` once more.
  private func remakingIfRemoved(_ write: () throws(FileSystemError) -> Void) throws(FileSystemError) {
    do { try write() } catch  where error.errno == .noSuchFileOrDirectory && remakeIfRemoved() { try write() }
  }

  @discardableResult
  static func system<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(DownloadError) -> T {
    do { return try body() } catch {
      if error.errno == .noSpace { throw .diskFull(path: error.path) }
      throw .system(error)
    }
  }

  // MARK: Tasks

  package static func taskPath(_ id: String, _ suffix: String) -> String { "\(tasksDirectory)/\(id).\(suffix)" }

  /// Writes a new task's request and wakes the agent. The request survives this process's death at once, and a
  /// power cut once the agent has looked (its next group commit holds every request new since its last look, and
  /// restores a lost one: `commit`), so creating a task costs the app no fsync.
  package func create(_ request: TaskRequest) throws(DownloadError) {
    let bytes = DownloadRecordFormat.encode(request)
    try Self.system { () throws(FileSystemError) in
      try remakingIfRemoved { () throws(FileSystemError) in
        try root.replaceFile(
          Self.taskPath(request.id, "task"), with: bytes, mode: fileMode, durability: .processCrash)
      }
    }
    // A request never changes: the session's scans need not read it back.
    knownRequests.withLock { $0[request.id] = request }
    requests.post()
  }

  package func write(_ control: TaskControl, for id: String) throws(DownloadError) {
    let bytes = DownloadRecordFormat.encode(control)
    try Self.system { () throws(FileSystemError) in
      try remakingIfRemoved { () throws(FileSystemError) in
        try root.replaceFile(Self.taskPath(id, "control"), with: bytes, mode: fileMode, durability: .powerLoss)
      }
    }
    requests.post()
  }

  /// The agent's write of a status; `durable` for final states (progress writes only need to survive a kill).
  package func write(_ status: TaskStatus, for id: String, durable: Bool) throws(DownloadError) {
    let bytes = DownloadRecordFormat.encode(status)
    try Self.system { () throws(FileSystemError) in
      try replacingPlantedDirectory(statusOf: id) { () throws(FileSystemError) in
        try root.replaceFile(
          Self.taskPath(id, "status"), with: bytes, mode: fileMode, durability: durable ? .powerLoss : .processCrash)
      }
    }
    updates.post()
  }

  /// Runs `write`, a replace of the status of `id`; when a directory sits at that name (planted: none of ours is
  /// ever one), removes it and writes once more. The rename over it failed with EISDIR at every pass, and the agent
  /// retried forever, never idle (HostileContainerTests: download task status × directory).
  func replacingPlantedDirectory(
    statusOf id: String, _ write: () throws(FileSystemError) -> Void
  ) throws(FileSystemError) {
    do { try write() } catch  where error.errno == .isDirectory {
      Self.logger.warning("a directory sits where the status of task \(id) goes; removing it")
      try root.removeTree(Self.taskPath(id, "status"))
      try write()
    }
  }

  /// The request of task `id`; `remember`: kept for the next look (false for a look at every task that need not
  /// last, as the agent's last look before an idle exit).
  package func request(_ id: String, remember: Bool = true) -> TaskRequest? {
    if let known = knownRequests.withLock({ $0[id] }) { return known }
    guard let request = read(Self.taskPath(id, "task"), DownloadRecordFormat.decodeRequest), request.id == id else {
      return nil
    }
    if remember { knownRequests.withLock { $0[id] = request } }
    return request
  }

  /// Rebuilds the memory of read requests at the size of what it holds (a dictionary keeps its capacity when
  /// entries leave: the agent, after a burst of tasks that all finished).
  package func shrinkKnownRequests() {
    knownRequests.withLock { known in
      guard known.capacity > 2 * known.count + 16 else { return }
      known = Dictionary(uniqueKeysWithValues: known.map { ($0.key, $0.value) })
    }
  }

  /// Drops a request from the memory of read requests (the agent, for a finished task it no longer looks at).
  package func forgetRequest(_ id: String) {
    _ = knownRequests.withLock { $0.removeValue(forKey: id) }
  }

  package func control(_ id: String) -> TaskControl? {
    read(Self.taskPath(id, "control"), DownloadRecordFormat.decodeControl)
  }

  package func status(_ id: String) -> TaskStatus? {
    read(Self.taskPath(id, "status"), DownloadRecordFormat.decodeStatus)
  }

  /// The ids of every task in the container (files `<32 hex>.task`).
  package func taskIDs() -> [String] { taskListing().ids }

  /// What one listing of `tasks/` shows: the tasks (files `<32 hex>.task`), and the ids that have a status file or a
  /// control file — a reader that trusts the listing reads those alone, not one missing file per task.
  package struct TaskListing: Sendable {
    package var ids: [String] = []
    package var withStatus: Set<String> = []
    package var withControl: Set<String> = []
  }

  package func taskListing() -> TaskListing {
    var listing = TaskListing()
    for name in names(in: Self.tasksDirectory) {
      guard let dot = name.lastIndex(of: "."), DownloadRecordFormat.isTaskID(name[..<dot]) else { continue }
      let id = String(name[..<dot])
      switch name[name.index(after: dot)...] {
      case "task": listing.ids.append(id)
      case "status": listing.withStatus.insert(id)
      case "control": listing.withControl.insert(id)
      default: break
      }
    }
    let ids = listing.ids
    // Forget the requests of tasks that are gone (forgotten by the agent, or the container emptied): a request of a
    // vanished task is never looked up again, so pruning when there are more than tasks keeps the memory bounded.
    knownRequests.withLock { known in
      guard known.count > ids.count else { return }
      let present = Set(ids)
      known = known.filter { present.contains($0.key) }
    }
    return listing
  }

  /// Removes every file of a task (the agent, once its events were handled and its retention passed).
  package func removeTask(_ id: String) {
    for suffix in ["partial", "status", "control", "task"] { try? root.removeFile(Self.taskPath(id, suffix)) }
  }

  // MARK: Sessions and events

  package static func sessionPath(_ sid: String) -> String { "\(sessionsDirectory)/\(sid)" }
  static func eventsPath(_ sid: String) -> String { sessionPath(sid) + "/events" }

  package func sessionIdentifiers() -> [String] {
    names(in: Self.sessionsDirectory).filter { (try? DownloadRecordFormat.validate(sessionIdentifier: $0)) != nil }
  }

  package func makeSessionDirectories(_ sid: String) throws(DownloadError) {
    try Self.system { () throws(FileSystemError) in
      try root.makeDirectory(Self.sessionPath(sid), mode: directoryMode)
      try root.makeDirectory(Self.eventsPath(sid), mode: directoryMode)
    }
  }

  /// Queues events for a session, durably: each file fsynced, then the events directory once (the agent writes
  /// them once the task's outcome is durable).
  package func queue(_ events: [EventRecord], for sid: String) throws(DownloadError) {
    try makeSessionDirectories(sid)
    try Self.system { () throws(FileSystemError) in
      let directory = try root.openDirectory(Self.eventsPath(sid))
      for file in DownloadRecordFormat.eventFiles(events, combining: eventFormat(for: sid) >= 2) {
        try AtomicReplace.write(
          file.bytes, in: directory, name: file.name, mode: fileMode, durability: .powerLossOnceDirectorySynced)
      }
      try directory.sync()
    }
  }

  /// The session's queued events in order, but those in files named in `skipping` (handed out already: not read
  /// again). A damaged event file is logged and removed (it can never be delivered). A file holding a finished
  /// download's two events gives both, a batch file all of its events (`DownloadRecordFormat.eventFiles`).
  package func queuedEvents(_ sid: String, skipping: Set<String> = []) -> [EventRecord] {
    let directory = Self.eventsPath(sid)
    // A reader of an older format (a test hook's) reads as sessions of that format did: format 1 a file's first
    // event alone, format 2 a batch file's first unit alone.
    let version = EventFormatHandshake.readVersion
    func decode(_ bytes: [UInt8]) throws(DownloadRecordFormat.Invalid) -> [EventRecord] {
      guard version >= 2 else { return [try DownloadRecordFormat.decodeEvent(bytes)] }
      return try DownloadRecordFormat.decodeEvents(bytes, batches: version >= 3)
    }
    return names(in: directory).filter { $0.hasSuffix(".event") && !skipping.contains($0) }.sorted().flatMap {
      name -> [EventRecord] in
      guard let events = read(directory + "/" + name, decode) else {
        try? root.removeFile(directory + "/" + name)
        return []
      }
      guard events[0].file == name else {
        Self.logger.error("event file '\(directory)/\(name)' holds another event: removed")
        try? root.removeFile(directory + "/" + name)
        return []
      }
      return events
    }
  }

  /// The tasks whose events wait in the session's queue, handed out or not (their events are not all handled yet):
  /// named by their files, and those in batch files read from them.
  package func tasksWithQueuedEvents(_ sid: String) -> Set<String> {
    let directory = Self.eventsPath(sid)
    var ids = Set<String>()
    for name in names(in: directory) where name.hasSuffix(".event") {
      if EventRecord.isBatchFileName(name) {
        let events = read(directory + "/" + name) { b throws(DownloadRecordFormat.Invalid) in
          try DownloadRecordFormat.decodeEvents(b)
        }
        for event in events ?? [] { ids.insert(event.taskID) }
        continue
      }
      // `<20-digit sequence>-<task id>-<kind>.event`
      let parts = name.split(separator: "-")
      if parts.count == 3, DownloadRecordFormat.isTaskID(parts[1]) { ids.insert(String(parts[1])) }
    }
    return ids
  }

  /// Removes a handled event. `files`: the files to remove, decided by the caller that handed the event out (a file
  /// goes once every event read from it was handled: `HandedOutEventFiles`); then the directory is not listed (a
  /// listing per event made taking 10,000 queued events quadratic: 10,000 × 20,000 names). Without them (an event
  /// this process did not hand out), every file of the event `id` alone (`<task id>.<kind>`; a power cut may have
  /// queued it twice), found by name without reading any event: an event stored with others (a completion in its
  /// download's `finished` file, any event of a batch file) stays, and comes again at the next attach (at least once).
  package func acknowledge(eventID id: String, for sid: String, files: [String]? = nil) {
    let directory = Self.eventsPath(sid)
    if let files {
      for name in files { try? root.removeFile(directory + "/" + name) }
      return
    }
    let parts = id.split(separator: ".")
    guard parts.count == 2 else { return }
    let suffix = "-\(parts[0])-\(parts[1]).event"
    for name in names(in: directory) where name.hasSuffix(suffix) { try? root.removeFile(directory + "/" + name) }
  }

  /// Writes the session's relaunch registration: a new file by rename, writable by nobody but this user even in
  /// a group container (OwnerOnlyWritable): the agent starts the program it names.
  package func register(_ relaunch: RelaunchRecord, for sid: String) throws(DownloadError) {
    try makeSessionDirectories(sid)
    let bytes = DownloadRecordFormat.encode(relaunch)
    try Self.system { () throws(FileSystemError) in
      try root.replaceFile(
        Self.sessionPath(sid) + "/app", with: bytes, mode: OwnerOnlyWritable.mode(from: fileMode))
    }
  }

  /// What a session's relaunch registration holds, as this process may use it.
  package enum Relaunch: Sendable, Equatable {
    /// The registration keeps the owner-only-writable rule: its program may be started.
    case trusted(RelaunchRecord)
    /// The registration (`path`, container-relative) breaks the rule and is not run: `problem` says how.
    case untrusted(path: String, owner: UInt32, problem: String)
  }

  /// The session's relaunch registration, checked on the descriptor it is read from against the owner-only-writable
  /// rule for this process's user (OwnerOnlyWritable, SystemLayer); nil when there is none or it is damaged (logged).
  package func relaunch(_ sid: String) -> Relaunch? {
    let path = Self.sessionPath(sid) + "/app"
    let bytes: [UInt8]
    do {
      switch try root.readOwnerOnlyWritable(path, limit: DownloadRecordFormat.maxRecordBytes) {
      case .trusted(let read): bytes = read
      case .untrusted(let owner, let problem): return .untrusted(path: path, owner: owner, problem: problem)
      }
    } catch {
      if error.errno != .noSuchFileOrDirectory {
        Self.logger.error("cannot read the relaunch registration '\(path)': \(error)")
      }
      return nil
    }
    do { return .trusted(try DownloadRecordFormat.decodeRelaunch(bytes)) } catch {
      Self.logger.error("damaged relaunch registration '\(path)': \(error)")
      return nil
    }
  }

  // MARK: Locks: the agent and attached sessions

  /// Opens (creating) a lock file of the store.
  package func openLock(_ relative: String) throws(DownloadError) -> SystemFD {
    let (parent, name) = ContainerDirectory.split(relative)
    return try Self.system { () throws(FileSystemError) in
      let directory = try root.openDirectory(parent)
      return try directory.openOrCreate(name, mode: fileMode, size: 0)
    }
  }

  package static let agentLockPath = directory + "/agent.lock"
  package static func attachLockPath(_ sid: String) -> String { sessionPath(sid) + "/attach.lock" }

  /// Whether some process holds the lock exclusively (the agent, an attached session), by a non-blocking shared
  /// flock that is released at once.
  package func isHeld(_ relative: String) -> Bool {
    guard let fd = try? openLock(relative) else { return false }
    guard let got = try? fd.lock(.shared, nonBlocking: true) else { return false }
    if got { fd.unlock() }
    return !got
  }

  /// The pid written in a lock file by its holder (for messages only: the flock is the truth).
  package func holderPID(_ relative: String) -> Int32? {
    guard let (bytes, _) = readBytes(relative) else { return nil }
    return Int32(String(decoding: bytes.prefix(32), as: UTF8.self).split(separator: "\n").first ?? "")
  }

  /// Writes our pid into a lock file we hold.
  package func writeHolder(_ fd: borrowing SystemFD) {
    try? fd.truncate(to: 0)
    try? fd.writeAll(Array("\(CurrentProcess.id)\n".utf8))
  }

  // MARK: Reading

  /// Names in a store directory ([] when it is missing or unreadable).
  package func names(in relative: String) -> [String] {
    guard let directory = try? root.openDirectory(relative) else { return [] }
    return ((try? directory.entries()) ?? []).map(\.name)
  }

  private func readBytes(_ relative: String) -> ([UInt8], FileStatus)? {
    do {
      let (bytes, status) = try root.readFile(relative, limit: DownloadRecordFormat.maxRecordBytes)
      return (bytes, status)
    } catch {
      if error.errno != .noSuchFileOrDirectory {
        Self.logger.error("cannot read download record '\(relative)': \(error)")
      }
      return nil
    }
  }

  /// Reads and checks a record; a missing file is nil, a damaged one is logged and nil.
  func read<T>(_ relative: String, _ decode: ([UInt8]) throws(DownloadRecordFormat.Invalid) -> T) -> T? {
    guard let (bytes, _) = readBytes(relative) else { return nil }
    do { return try decode(bytes) } catch {
      Self.logger.error("damaged download record '\(relative)': \(error.reason)")
      return nil
    }
  }
}
