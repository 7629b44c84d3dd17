import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// A background download session in a group container: Apple's `URLSession` with a
/// `URLSessionConfiguration.background(withIdentifier:)` whose `sharedContainerIdentifier` names the group.
///
/// Downloads are run by the **download agent**, a separate process (one per container) that the session starts when
/// it needs it; they go on when the process that started them exits or is killed, and finished files land at their
/// destination in the container by a coordinated write. What happens to a task is queued in the container for its
/// session: the process attached with the session's identifier receives it (``events`` or a
/// ``DownloadSessionDelegate``); when nobody is attached, the agent starts the app the session registered, as iOS
/// relaunches an app for `handleEventsForBackgroundURLSession`.
///
/// One process at a time is attached to a session identifier (a second gets ``DownloadError/sessionInUse(_:pid:)``);
/// give your app and your widget their own identifiers. Any process may follow any task
/// (``observe(container:session:)``), which iOS does not allow.
public final class DownloadSession: Sendable {
  /// What a session asks of the agent and of relaunches.
  public struct Configuration: Sendable {
    /// Apple's `httpMaximumConnectionsPerHost`: this session's transfers running at once to one host.
    public var httpMaximumConnectionsPerHost: Int = 6
    /// The app the agent starts when events wait for this session and no process is attached (none by default:
    /// an executable started with no arguments may do anything; name the arguments that make yours handle events).
    public var relaunch: Relaunch = .none
    /// The agent's executable; nil looks for `gc-download-agent` in `$GROUPCONTAINER_DOWNLOAD_AGENT`, beside this
    /// process's executable, then in `$PATH`.
    public var agentExecutable: URL? = nil
    /// How long an agent this session starts waits with nothing to do before exiting.
    public var agentIdleTimeout: Duration = .seconds(30)

    /// Which app the agent starts for a session's events when no process is attached (iOS relaunching the app).
    public enum Relaunch: Sendable, Equatable {
      /// Nobody is started: events wait for the next attach.
      case none
      /// This process's executable, with these arguments.
      case currentExecutable(arguments: [String])
      /// This executable, with these arguments.
      case executable(URL, arguments: [String])
    }

    /// The defaults: 6 connections per host, no relaunch, the agent found by name, 30 s idle timeout.
    public init() {}
  }

  /// The environment variable a relaunched app finds its session identifier in (see ``launchedForEvents``).
  public static let relaunchEnvironmentKey = "GROUPCONTAINER_BACKGROUND_SESSION"

  /// When the agent started this process for a session's events, that session's identifier (Apple's
  /// `application(_:handleEventsForBackgroundURLSession:completionHandler:)`): create the session with it to
  /// receive them.
  public static var launchedForEvents: String? { Environment.value(relaunchEnvironmentKey) }

  /// The session's identifier: the one process attached with it receives the session's events.
  public let identifier: String
  /// The container the session's tasks, events and files live in.
  public let container: GroupContainer
  /// What the session was created with.
  public let configuration: Configuration
  /// The session's events, when it has no delegate.
  public let events: DownloadEvents

  let store: DownloadStore
  private let delegate: (any DownloadSessionDelegate)?
  private let attachLock: Mutex<SystemFD?>
  private let attachment: Mutex<Attachment>
  private let delivery = DispatchQueue(label: "GroupContainer.DownloadSession.delivery")
  /// A poll is queued on `delivery` and has not started: posts meanwhile need no other (a burst of the agent's
  /// posts would otherwise queue a poll each, every one of them reading every unfinished task).
  private let pollQueued = Atomic<Bool>(false)
  private static let logger = Logger(label: "GroupContainer.BackgroundDownloads")
  /// The file names of the queued events handed out and not acknowledged yet, by event id.
  private let handedOutFiles: HandedOutEventFiles

  private struct Attachment {
    var invalidated = false
    var listener: ChangeSignal.Listener?
    /// Queued events handed to the app in this attach (by their `fileName`), not to hand out twice, and the files
    /// all of whose events were (not read again).
    var handedOut: Set<String> = []
    /// The backlog found at attach: `didFinishEvents` follows once these are handled.
    var backlog: Set<String> = []
    var backlogAnnounced = false
    /// The store's `remakeCount` when this session last (re)attached.
    var remakesSeen = 0
    var lastReceived: [String: Int64] = [:]
    /// The session's tasks not seen completed, which a poll reads (for `didWriteData`, and to notice an agent gone)
    /// once the first poll has listed `tasks/` (`listed`). Only an attached session makes tasks, and one process at a
    /// time attaches it: later tasks are the ones `download` adds here. Listed at every poll, the container's every
    /// task was read by name — finished ones stay 24 h: 12,000 names a poll in a run of 2,000-task bursts, and
    /// every attached session did it, one with no task as well. A completed task's files are not read again (an
    /// event of one reads that task alone).
    var unfinished: Set<String> = []
    var listed = false
    var nextTaskIdentifier = 1
    var lastAgentLaunch: UInt64 = 0
    /// When a poll last read the unfinished tasks (`taskScanInterval`), and whether a poll is due to read them
    /// once the interval ends.
    var lastTaskScan: UInt64 = 0
    var trailingScan = false
    /// What the last read of the tasks cost (`ScanPacing.measure`): reads prompted by the agent are at least 20 times
    /// that apart.
    var taskScanCost: UInt64 = 0
  }

  /// How often a poll prompted by the agent reads every unfinished task of the session (for `didWriteData` and to
  /// notice tasks that finished): the agent posts after each of its writes, and with 200 tasks at once a poll per
  /// post read 400 files each time (25 status and control reads per download), taking the CPU the agent needed.
  /// The agent records progress every 250 ms; events are still looked for at every post. With thousands of tasks
  /// the interval grows with what a read of them costs (`ScanPacing`).
  private static let taskScanInterval: UInt64 = 100_000_000

  /// Attaches this process to the session `identifier` of `container`: receives the events queued for it, and
  /// starts the agent if tasks of the session are unfinished and no agent runs.
  public init(
    identifier: String, container: GroupContainer, configuration: Configuration = Configuration(),
    delegate: (any DownloadSessionDelegate)? = nil
  ) throws(DownloadError) {
    try DownloadRecordFormat.validate(sessionIdentifier: identifier)
    guard configuration.httpMaximumConnectionsPerHost >= 1 else {
      throw .invalidSessionIdentifier(identifier, rule: "httpMaximumConnectionsPerHost must be at least 1")
    }
    self.identifier = identifier
    self.container = container
    self.configuration = configuration
    self.delegate = delegate
    store = try DownloadStore(container: container)
    try store.makeSessionDirectories(identifier)
    let lockPath = DownloadStore.attachLockPath(identifier)
    let lock = try store.openLock(lockPath)
    var got = (try? lock.lock(.exclusive, nonBlocking: true)) ?? false
    // Held, but by no process that says so: a moment's. A child that another thread is spawning holds a copy of
    // every descriptor of this process until it execs, an attach lock closed just now by `invalidate()` included
    // (a session made again at once failed so, beside parallel tests), and a process that has just taken the lock
    // writes its pid next. Tried again for up to 2 s; a holder that names itself fails the attach at once.
    var tries = 0
    while !got && tries < 200 && store.holderPID(lockPath) == nil {
      tries += 1
      Thread.sleep(forTimeInterval: 0.01)
      got = (try? lock.lock(.exclusive, nonBlocking: true)) ?? false
    }
    guard got else {
      let pid = store.holderPID(lockPath) ?? 0
      lock.close()
      throw .sessionInUse(identifier, pid: pid)
    }
    store.announceAttached(lock)
    attachLock = Mutex(lock)
    let tasks = store.tasks(session: identifier)
    var attachment = Attachment()
    attachment.nextTaskIdentifier = (tasks.map(\.taskIdentifier).max() ?? 0) + 1
    for task in tasks { attachment.lastReceived[task.id] = task.countOfBytesReceived }
    attachment.backlog = Set(store.queuedEvents(identifier).map(\.file))
    self.attachment = Mutex(attachment)
    let store = store
    let sid = identifier
    let files = HandedOutEventFiles()
    handedOutFiles = files
    events = DownloadEvents(acknowledge: { event in
      guard let id = event.id else { return }
      store.acknowledge(eventID: id, for: sid, files: files.take(id))
    })
    do { try registerRelaunch() } catch {
      Self.logger.error("session '\(identifier)': cannot register the app to relaunch: \(error)")
    }
    start()
  }

  deinit { detach() }

  // MARK: Creating tasks

  /// Starts downloading `url` into the container at `destination` (container-relative; default
  /// `Downloads/<last path component>`). Returns at once; the agent runs the transfer.
  ///
  /// - Parameters:
  ///   - url: what to download: an `http` or `https` URL with a host, at most 2,048 bytes.
  ///   - destination: where to publish the file, relative to the container; `nil` for
  ///     `Downloads/<last path component>`.
  ///   - expectedSHA256: the file's SHA-256 in hex: a file that differs fails the task and is not published.
  ///   - expectedLength: the file's length in bytes, checked the same way.
  ///   - priority: 0...1 (Apple's `URLSessionTask.priority`), among this container's queued tasks.
  @discardableResult
  public func download(
    from url: URL, to destination: String? = nil, expectedSHA256: String? = nil, expectedLength: Int64? = nil,
    priority: Float = 0.5
  ) throws(DownloadError) -> DownloadTask {
    let text = url.absoluteString
    guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false,
      text.utf8.count <= DownloadRecordFormat.maxURLBytes
    else { throw .unsupportedURL(text) }
    let id = DownloadRecordFormat.newTaskID()
    let path = try Self.checkedDestination(destination ?? Self.defaultDestination(for: url, id: id))
    // Refused now, not after the whole transfer when the publish would refuse it.
    do { try container.checkWritable(ContainerPath(path)) } catch {
      throw .invalidDestination(path, rule: "\(error)")
    }
    var sha: String?
    if let expectedSHA256 {
      let lower = expectedSHA256.lowercased()
      guard DownloadRecordFormat.isLowerHex(lower, count: 64)
      else { throw .checksumMismatch(expected: expectedSHA256, actual: "(not a SHA-256: give 64 hex digits)") }
      sha = lower
    }
    if let expectedLength, expectedLength < 0 { throw .lengthMismatch(expected: expectedLength, actual: 0) }
    let taskIdentifier = attachment.withLock { a in
      defer { a.nextTaskIdentifier += 1 }
      return a.nextTaskIdentifier
    }
    let request = TaskRequest(
      id: id, session: identifier, taskIdentifier: taskIdentifier, url: text, destination: path,
      created: RealtimeClock.nanoseconds(), expectedSHA256: sha, expectedLength: expectedLength,
      priority: Double(min(max(priority, 0), 1)),
      connectionsPerHost: configuration.httpMaximumConnectionsPerHost)
    try store.create(request)
    reattachIfRemade()
    attachment.withLock { _ = $0.unfinished.insert(id) }
    try ensureAgent(force: true)
    // Made from what was just written (a new task has no status and no control): read back, it was three file reads
    // per call, a third of a burst's enqueueing.
    return DownloadTask(request: request, status: nil, control: nil, store: store)
  }

  /// Checks a container-relative destination: a file path inside the container, outside its private directory.
  static func checkedDestination(_ destination: String) throws(DownloadError) -> String {
    let path: ContainerPath
    do { path = try ContainerPath(destination) } catch {
      throw .invalidDestination(destination, rule: "\(error)")
    }
    guard !path.isRoot, !destination.hasSuffix("/") else {
      throw .invalidDestination(destination, rule: "it names a directory, not a file")
    }
    return path.string
  }

  private static func defaultDestination(for url: URL, id: String) -> String {
    let name = url.lastPathComponent
    let usable =
      !name.isEmpty && name != "/" && name != "." && name != ".." && !name.hasPrefix(".")
      && name.utf8.count <= 200 && (try? ContainerPath("Downloads/" + name)) != nil
    return "Downloads/" + (usable ? name : id)
  }

  // MARK: Tasks and events

  /// The session's tasks, oldest first (Apple's `getAllTasks`), finished ones included until the agent forgets them.
  public func allTasks() -> [DownloadTask] { store.tasks(session: identifier) }

  /// The task `id` of any session in the container.
  public func task(withID id: String) -> DownloadTask? { store.task(id) }

  /// Marks a queued event as handled (removes it from the container): for a loop over ``events`` that stops before
  /// asking for the next event.
  public func acknowledge(_ event: DownloadEvent) {
    guard let id = event.id else { return }
    store.acknowledge(eventID: id, for: identifier, files: handedOutFiles.take(id))
  }

  /// Detaches this process from the session, leaving its tasks running (Apple's `finishTasksAndInvalidate` for a
  /// background session): events go on being queued for the next attach. ``events`` ends.
  public func invalidate() { detach() }

  /// Cancels every unfinished task of the session, then detaches (Apple's `invalidateAndCancel`).
  public func invalidateAndCancel() {
    for task in allTasks() where task.state != .completed { try? task.cancel() }
    detach()
  }

  private func detach() {
    let (listener, already) = attachment.withLock { a in
      defer {
        a.invalidated = true
        a.listener = nil
      }
      return (a.listener, a.invalidated)
    }
    guard !already else { return }
    listener?.cancel()
    events.finish()
    let store = store
    attachLock.withLock { lock in
      if let fd = lock.borrowedView {
        store.withdrawAnnouncement(fd)
        // Let go before closing: a child another thread is spawning holds a copy of the descriptor until it execs,
        // and a close alone leaves the flock held through that copy (a session made again at once was refused).
        fd.unlock()
      }
      lock = nil  // closes it
    }
  }

  /// After the store made its layout again (the container, or `.coordination/downloads`, was removed: its `create`
  /// found the directory missing): makes this session's directories again and takes the attach lock on the new file,
  /// so no other process attaches this session meanwhile unnoticed. One that did first keeps it (logged).
  private func reattachIfRemade() {
    let remakes = store.remakeCount
    guard
      attachment.withLock({ a -> Bool in
        defer { a.remakesSeen = remakes }
        return a.remakesSeen != remakes && !a.invalidated
      })
    else { return }
    let (store, identifier) = (store, identifier)
    let attached = attachLock.withLock { current -> Bool in
      guard (try? store.makeSessionDirectories(identifier)) != nil,
        let lock = try? store.openLock(DownloadStore.attachLockPath(identifier)),
        (try? lock.lock(.exclusive, nonBlocking: true)) == true
      else { return false }
      store.announceAttached(lock)
      current = consume lock  // the removed file's descriptor closes
      return true
    }
    if attached {
      Self.logger.warning("session '\(identifier)': its files were removed with the container; attached again")
    } else {
      Self.logger.error("session '\(identifier)': its files were removed and another process attached it since")
    }
  }

  private func registerRelaunch() throws(DownloadError) {
    switch configuration.relaunch {
    case .none: break
    case .currentExecutable(let arguments):
      guard let exe = ProcessSpawn.currentExecutable() else { return }
      try store.register(RelaunchRecord(executable: exe, arguments: arguments), for: identifier)
    case .executable(let url, let arguments):
      try store.register(RelaunchRecord(executable: url.path, arguments: arguments), for: identifier)
    }
  }

  private func start() {
    // Every poll runs on the delivery queue: events leave in order, one at a time.
    let queue = delivery
    let listener = store.updates.listen(name: "downloads \(identifier)") { [weak self] in
      guard let session = self, !session.pollQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
      queue.async {
        session.pollQueued.store(false, ordering: .releasing)
        session.poll()
      }
    }
    attachment.withLock { a in a.listener = listener }
    delivery.async { [weak self] in self?.tick() }
  }

  /// A poll now and every second: the agent may die without a word. Its read of the tasks keeps to the pacing
  /// (`ScanPacing`) like any other: forced every second, a read of 2,000 unfinished tasks (35 ms) came on top of the
  /// paced ones, and two attached sessions took a fifth of a core from the agent they waited for.
  ///
  /// Each tick also looks whether another process made the store's layout again (`followRemake`): a session learnt
  /// of a removal only when one of its own writes failed, so when the agent made the layout again first, the session
  /// stayed on the removed signal file — counted as a listener in no file, hearing of its tasks only by this poll —
  /// and attached to no lock file (`make test` on a loaded machine: `aSessionOutlivesItsContainersRemoval`).
  private func tick() {
    if store.followRemake() { reattachIfRemade() }
    poll()
    guard !attachment.withLock({ $0.invalidated }) else { return }
    delivery.asyncAfter(deadline: .now() + .seconds(1)) { [weak self] in self?.tick() }
  }

  /// Hands out new queued events and progress, and restarts the agent when tasks wait and it is gone. Runs on the
  /// delivery queue only.
  private func poll(scanningTasks force: Bool = false) {
    let handedOut = attachment.withLock { $0.handedOut }
    let queued = store.queuedEvents(identifier, skipping: handedOut)
    let now = MonotonicClock.nanoseconds()
    let (scan, wait) = attachment.withLock { a -> (Bool, UInt64?) in
      let age = now &- a.lastTaskScan
      let interval = ScanPacing.interval(minimum: Self.taskScanInterval, lastCost: a.taskScanCost)
      guard force || age >= interval else {
        // Read them once the interval ends: the last progress of a burst is not held back until the next tick.
        defer { a.trailingScan = true }
        return (false, a.trailingScan ? nil : interval - age)
      }
      a.lastTaskScan = now
      return (true, nil)
    }
    if let wait {
      delivery.asyncAfter(deadline: .now() + .nanoseconds(Int(wait))) { [weak self] in
        guard let self else { return }
        attachment.withLock { $0.trailingScan = false }
        poll(scanningTasks: true)
      }
    }
    var tasks: [DownloadTask] = []
    if scan {
      let (listed, known) = attachment.withLock { ($0.listed, $0.unfinished) }
      let cost: UInt64
      (tasks, cost) = ScanPacing.measure { listed ? store.tasks(known) : store.tasks(session: identifier) }
      attachment.withLock { a in
        a.taskScanCost = cost
        if listed {
          a.unfinished.subtract(known.subtracting(tasks.lazy.map(\.id)))  // gone (retired, the container made anew)
        } else {
          a.listed = true
          a.unfinished.formUnion(tasks.lazy.map(\.id))
        }
        for task in tasks where task.state == .completed { a.unfinished.remove(task.id) }
      }
    }
    var byID = Dictionary(tasks.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
    // Only events still to hand out need their task (one handed out waits for its acknowledgement).
    for record in queued where byID[record.taskID] == nil && !handedOut.contains(record.fileName) {
      if let task = store.task(record.taskID) { byID[task.id] = task }
    }
    var out: [(DownloadEvent, EventRecord?)] = []
    let stop = attachment.withLock { a -> Bool in
      guard !a.invalidated else { return true }
      for task in tasks where task.countOfBytesReceived != a.lastReceived[task.id] {
        let before = a.lastReceived[task.id] ?? 0
        a.lastReceived[task.id] = task.countOfBytesReceived
        guard task.state != .completed, task.countOfBytesReceived > before else { continue }
        out.append(
          (
            .didWriteData(
              task, bytesWritten: task.countOfBytesReceived - before, totalBytesWritten: task.countOfBytesReceived,
              totalBytesExpectedToWrite: task.countOfBytesExpectedToReceive), nil
          ))
      }
      var inFile: [String: Int] = [:]
      for record in queued { inFile[record.file, default: 0] += 1 }
      for record in queued where !a.handedOut.contains(record.fileName) {
        guard let task = byID[record.taskID] else { continue }
        a.handedOut.insert(record.fileName)
        // The file goes once all its events are handled (a finished download's two, a batch's).
        handedOutFiles.add(record.file, holding: inFile[record.file] ?? 1, for: record.id)
        switch record.kind {
        case .finished:
          // A file: no stat of its path to learn whether it is a directory (`appendingPathComponent` makes one).
          let location = container.url.appending(
            path: record.location ?? task.destination, directoryHint: .notDirectory)
          out.append((.didFinishDownloadingTo(task, location: location, id: record.id), record))
        case .completed:
          out.append((.didCompleteWithError(task, error: record.error, id: record.id), record))
        }
      }
      // A file all of whose events are out is not read again (a batch file stays until its last one is handled).
      var waiting = Set<String>()
      for record in queued where !a.handedOut.contains(record.fileName) { waiting.insert(record.file) }
      for record in queued where !waiting.contains(record.file) { a.handedOut.insert(record.file) }
      return false
    }
    guard !stop else { return }
    for (event, record) in out { deliver(event, record) }
    announceBacklogIfHandled()
    if tasks.contains(where: { $0.state != .completed }) { try? ensureAgent(force: false) }
  }

  private func deliver(_ event: DownloadEvent, _ record: EventRecord?) {
    guard let delegate else {
      events.yield(event)
      return
    }
    switch event {
    case .didWriteData(let task, let n, let total, let expected):
      delegate.urlSession(
        self, downloadTask: task, didWriteData: n, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
    case .didFinishDownloadingTo(let task, let location, _):
      delegate.urlSession(self, downloadTask: task, didFinishDownloadingTo: location)
    case .didCompleteWithError(let task, let error, _):
      delegate.urlSession(self, task: task, didCompleteWithError: error)
    case .didFinishEvents:
      delegate.urlSessionDidFinishEvents(forBackgroundURLSession: self)
    }
    if let record { store.acknowledge(eventID: record.id, for: identifier, files: handedOutFiles.take(record.id)) }
  }

  /// `didFinishEvents` once the events queued before the attach are all handled (removed from the container).
  private func announceBacklogIfHandled() {
    let due = attachment.withLock { a -> Bool in
      guard !a.backlog.isEmpty, !a.backlogAnnounced, !a.invalidated else { return false }
      let left = Set(store.names(in: DownloadStore.sessionPath(identifier) + "/events"))
      guard a.backlog.isDisjoint(with: left) else { return false }
      a.backlogAnnounced = true
      return true
    }
    if due { deliver(.didFinishEvents, nil) }
  }

  /// Starts the agent unless one runs (at most once a second unless `force`).
  private func ensureAgent(force: Bool) throws(DownloadError) {
    let now = MonotonicClock.nanoseconds()
    let due = attachment.withLock { a -> Bool in
      guard force || now &- a.lastAgentLaunch > 1_000_000_000 else { return false }
      a.lastAgentLaunch = now
      return true
    }
    guard due else { return }
    try AgentLauncher.ensureRunning(
      store: store, executable: configuration.agentExecutable, idleTimeout: configuration.agentIdleTimeout)
  }
}

/// The files of queued events handed out, until their events are acknowledged: a file holds one event, a finished
/// download's two, or a batch of downloads' (`DownloadRecordFormat.eventFiles`), and goes once every event in it was
/// handled — removed by name, without listing the events directory.
final class HandedOutEventFiles: Sendable {
  private struct State {
    /// The files each event was handed out from.
    var files: [String: [String]] = [:]
    /// Per file, its events not handled yet.
    var waiting: [String: Int] = [:]
  }
  private let state = Mutex(State())

  /// Notes that event `id` was handed out from `fileName`, a file of `events` events.
  func add(_ fileName: String, holding events: Int, for id: String) {
    state.withLock { s in
      s.files[id, default: []].append(fileName)
      if s.waiting[fileName] == nil { s.waiting[fileName] = events }
    }
  }

  /// Event `id` was handled: the files to remove now (those none of whose events waits any more), or nil when it was
  /// not handed out here (then its files are found by listing).
  func take(_ id: String) -> [String]? {
    state.withLock { s in
      guard let files = s.files.removeValue(forKey: id) else { return nil }
      return files.filter { file in
        let left = (s.waiting[file] ?? 1) - 1
        s.waiting[file] = left > 0 ? left : nil
        return left <= 0
      }
    }
  }
}
