import AsyncHTTPClient
import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The download agent of one container: the only process that runs transfers and writes task statuses.
///
/// A singleton by its exclusive flock on `agent.lock` (a killed agent's lock is released by the kernel, and the
/// next session, or `groupctl downloads wait`, that sees work waiting starts another), held only while the name
/// leads to the locked file (`AgentLock`: an agent whose file was removed takes the name again, or stops writing
/// and exits 3). Its loop, on every request signal and at least once a second:
/// 1. applies what sessions asked (`<id>.control`: suspend, resume, cancel, priority), each generation once;
/// 2. starts waiting tasks, highest priority first, oldest first, at most `connectionsPerHost` per session and host;
/// 3. turns each finished transfer into a final status (durable) and then the session's queued events;
/// 4. starts the registered app of a session whose events wait while no process is attached (iOS's relaunch);
/// 5. forgets finished tasks once their events were handled and `retention` passed;
/// 6. exits after `idleTimeout` with nothing to do — releasing the lock first, then looking once more (reading
///    only), so a task created in between is never stranded (its session saw the lock held, or this look sees the
///    task and the agent takes the lock again to run it; if another agent took it meanwhile, that one runs it).
package final class DownloadAgent: Sendable {
  package struct Settings: Sendable {
    /// nil: never exit for idleness (the foreground agent).
    package var idleTimeout: Duration? = .seconds(30)
    /// Finished tasks whose events were handled are forgotten after this.
    package var retention: Duration = .seconds(24 * 3600)
    /// Transfers at once, all sessions together.
    package var maxConcurrentTransfers = 32
    /// A session's app is started at most this many times per agent run, this far apart.
    package var relaunchAttempts = 3
    package var relaunchInterval: Duration = .seconds(10)
    package var policy = TransferPolicy()
    package init() {}
  }

  private enum StopReason: Sendable { case suspend, cancel, shutdown }

  private struct Running {
    /// nil for the moment between registering and starting the transfer.
    var task: Task<Void, Never>?
    var session: String
    var host: String
    var status: TaskStatus
    var stopReason: StopReason?
    var stopGeneration: UInt64 = 0
    /// The last report was not written (`progress`): the next one is.
    var reportDeferred = false
  }

  private struct State {
    var running: [String: Running] = [:]
    var relaunches: [String: (count: Int, last: UInt64)] = [:]
    /// The last finish time given (ns since 1970): unique per task, it orders the events (sequence = 2 × it, + 1).
    var lastFinished: UInt64 = 0
    var shuttingDown = false
    /// Statuses as written (nil: none yet), read once: this agent is their only writer while it holds the lock.
    var statuses: [String: TaskStatus?] = [:]
    /// Controls as last read (nil: none), and the request signal's sequence then: sessions post after writing a
    /// control, so while the sequence stays the same no control changed.
    var controls: [String: TaskControl?] = [:]
    var controlsSequence: UInt32?
    var controlsRead: UInt64 = 0
    /// Unfinished tasks whose request this agent fsynced (sessions do not: `DownloadStore.create`).
    var durableRequests: Set<String> = []
    /// Transfers that ended and whose final status and events are being written (`finish`): a pass leaves them
    /// alone, or it would queue their events a second time.
    var finishing: Set<String> = []
    /// Another agent holds the name `agent.lock` (ours was removed): nothing more is written, the loop ends.
    var deposed = false
    /// Final outcomes waiting for the next group commit, and whether a finishing transfer is writing one now (it
    /// goes on until none waits: outcomes that arrive meanwhile share the next commit).
    var pendingFinals: [CommitRecord.Final] = []
    var committing = false
    var nextCommit: UInt64 = 1
    /// Commits that still name a task in the container (sequence → tasks not forgotten), and in `tasks` each task's
    /// commits: a commit file is removed once all its tasks are.
    var commitTasks: [UInt64: Int] = [:]
    /// Each task's commits, and the settled ones: finished tasks whose events are queued. All a pass needs of a
    /// settled task is here (no status, request or control kept), and passes skip them; `retire` looks at them every
    /// few seconds. Plain values (`FinishedTasks.swift`).
    var tasks = TaskTable()
    var sessionNames = SessionNames()
    var lastRetire: UInt64 = 0
    /// The task ids last listed (`tasks/`), and when and at which request sequence: the directory is listed again
    /// only after sessions posted (a new task or control), and then at most every `relistInterval`.
    var listed: [String] = []
    var listedSequence: UInt32?
    var listedAt: UInt64 = 0
    /// The tasks that had a status file and a control file in that listing (`listedFiles`), and whether the listing
    /// was made in the current scan, after it decided to read the controls again (`listingIsFresh`). nil: not to be
    /// trusted (another agent may have run since: its files are read).
    var listedFiles: (status: Set<String>, control: Set<String>)?
    var listingIsFresh = false
    /// What the last full scan cost (`ScanPacing.measure`): scans prompted by posts are at least 20 times that apart
    /// (2 times with nothing to run).
    var scanCost: UInt64 = 0
    /// The last full scan found nothing unfinished: until a post, listings without one are `quietRelistInterval`
    /// apart, not `relistFallback`.
    var quiet = false

    /// No transfer running, finishing or waiting to start: what the agent knows of is done, and a listing puts off
    /// no work (`ScanPacing`'s idle pacing).
    var hasNothingToRun: Bool { running.isEmpty && finishing.isEmpty && queues.values.allSatisfy(\.isEmpty) }

    var fallbackInterval: UInt64 {
      DownloadAgent.noFallbackListing
        ? .max : quiet ? DownloadAgent.quietRelistInterval : DownloadAgent.relistFallback
    }
    /// Something only a full scan handles happened (a transfer stopped without finishing, a commit not written).
    var rescan = false
    /// Waiting tasks from the last full scan, per session and host, best last (priority, then age): passes between
    /// scans start from here without looking at every task.
    var queues: [String: [Candidate]] = [:]
    /// The last full scan found a suspended task (which keeps the agent up, as any unfinished task).
    var suspendedAtScan = false
    /// When sessions were last looked at for a relaunch, and whether one may still be due then.
    var lastRelaunchLook: UInt64 = 0
    var relaunchPending = false
  }

  /// A waiting task as the start order needs it.
  private struct Candidate {
    var request: TaskRequest
    var status: TaskStatus
    var priority: Double
    var host: String

    /// Whether `self` starts before `other`: higher priority, then older.
    func precedes(_ other: Candidate) -> Bool {
      priority != other.priority
        ? priority > other.priority
        : (request.created, request.taskIdentifier) < (other.request.created, other.request.taskIdentifier)
    }
  }

  /// How often `tasks/` may be listed while sessions keep posting, at least (a listing of 10,000 tasks costs
  /// milliseconds: then `scanCost` × 20 keeps them apart). At 100 ms a task posted just after a listing waited up
  /// to 100 ms to start: most of a 1 kB download's time, and the tail of a burst of 200 tasks.
  private static let relistInterval: UInt64 = 20_000_000
  /// How often `tasks/` is listed without a post while tasks are unfinished: a post lost (the signal file removed
  /// and made again, a session killed between writing a control and posting) delays a change this long at most.
  private static let relistFallback: UInt64 = 2_000_000_000
  /// The same with nothing unfinished. A new task is posted (`DownloadStore.create`), so an idle agent lists only to
  /// find a task whose post was lost; every 2 s, that cost an agent keeping 10,000 finished tasks 15–20 ms of CPU
  /// a second (a listing of 10,000 names), and no longer than this it leaves such a task waiting.
  private static let quietRelistInterval: UInt64 = 30_000_000_000
  /// Set to "1" in the agent's environment, it lists `tasks/` only when sessions post (or a scan is asked for): a
  /// test sees a task found by its post, not by a listing that would have found it anyway. A test hook: read only in
  /// a build with the `TestHooks` trait.
  #if GROUPCONTAINER_TEST_HOOKS
    package static let noFallbackListingVariable = "GROUP_CONTAINER_AGENT_NO_FALLBACK_LISTING"
    private static let noFallbackListing = Environment.value(noFallbackListingVariable) == "1"
  #else
    private static let noFallbackListing = false
  #endif
  /// How often sessions are looked at for a relaunch.
  private static let relaunchLookInterval: UInt64 = 250_000_000
  /// How long after the end of a burst its freed memory is given back once more (`run`).
  private static let lateTrimDelay: UInt64 = 10_000_000_000
  /// How often finished tasks are checked against `retention`.
  private static let retireInterval: UInt64 = 5_000_000_000

  let store: DownloadStore
  let settings: Settings
  /// Made by the first transfer, shut down after a few seconds without one (`IdleClient`).
  private let clients: IdleClient
  private let state = Mutex(State())
  private let doorbell = Doorbell()
  /// Where group commits are written (`commitPending`: fsyncs), one at a time, off the cooperative pool: a finishing
  /// transfer queues its outcome (`submit`) and goes, and no transfer hops to another thread to finish.
  private let commits = DispatchQueue(label: "GroupContainer.downloads.commits")
  private let logger: Logger
  private let lock: AgentLock

  package init(container: GroupContainer, settings: Settings, logger: Logger) throws(DownloadError) {
    store = try DownloadStore(container: container)
    self.settings = settings
    self.logger = logger
    lock = AgentLock(store: store)
    clients = IdleClient(
      configuration: TransferEngine.clientConfiguration(maxConnectionsPerHost: 64, policy: settings.policy),
      logger: logger)
  }

  /// Runs until idle (or shut down). Returns 0, or 3 when another agent holds the container's agent lock (at the
  /// start, or later: its lock file was removed and another agent locked the new one).
  package func run() async -> Int32 {
    // The loop's jobs and the timeouts of its waits on a thread of their own (`LoopThread`).
    await withTaskExecutorPreference(LoopThread.shared) { await runLoop() }
  }

  private func runLoop() async -> Int32 {
    let locked: Bool
    do { locked = try await lock.acquire() } catch {
      logger.error("cannot open the agent lock: \(error)")
      return 1
    }
    guard locked else {
      logger.info("another download agent runs for \(store.container.path)")
      return 3
    }
    defer { lock.release() }
    logger.info("download agent \(CurrentProcess.id) started for \(store.container.path)")
    let doorbell = doorbell
    let listener = store.requests.listen(name: "download agent") { doorbell.ring() }
    recoverAfterCrash()
    var activity = AgentActivity(lateTrimDelay: Self.lateTrimDelay)
    while true {
      if !containerExists() {
        logger.info("the container \(store.container.path) is gone: the agent exits")
        break
      }
      let standing = stillTheAgent()
      if standing == .ended { break }
      if standing == .unsure {
        // The name is being removed (most often with the whole container): looked at again shortly, and the loop
        // ends above once the container is gone. Meanwhile nothing is written.
        await doorbell.wait(timeout: .milliseconds(50))
        continue
      }
      let listedBefore = state.withLock { $0.listedAt }
      let busy = pass()
      if state.withLock({ $0.shuttingDown || $0.deposed }) { break }
      let listed = state.withLock { $0.listedAt } != listedBefore
      switch activity.passed(busy: busy, listed: listed, now: MonotonicClock.nanoseconds()) {
      case .endOfBurst:
        // The tables the burst filled shrink to what they hold, the lock files its publications left open are
        // closed, and what its transfers and records allocated goes back to the kernel.
        shrinkTables()
        FileCoordinator.closeIdleLockFiles()
        MemorySignals.returnFreedMemory()
      case .late:
        // Once more, with a listing (which forgets what the store and the tables keep of tasks gone), when the
        // burst's threads have ended (Dispatch ends a thread idle 5 s): until the next listing, now 30 s away, a
        // settled agent at 10,000 tasks otherwise stayed about 1 MB higher. The listing trims after it.
        state.withLock { $0.listedSequence = nil }
        doorbell.ring()
      case .afterListing:
        // With 10,000 finished tasks, a listing made and freed 20,000 names, strewn over the heap's free pages,
        // which then stayed resident (3 MB) until given back.
        MemorySignals.returnFreedMemory()
      case nil: break
      }
      // Its event loops' threads, its connections and their buffers, after a few seconds without a transfer; what
      // they freed goes back at once.
      if await clients.shutDownIfIdle(now: MonotonicClock.nanoseconds()) { MemorySignals.returnFreedMemory() }
      if let idle = settings.idleTimeout, let idleFor = activity.idleFor(now: MonotonicClock.nanoseconds()),
        idleFor >= idle.nanoseconds
      {
        FaultPoint.pause("downloads.agent.idle")  // a test creates a task here, the lock still held
        // Release first, then look again: a session that saw the lock held relies on this look. The look only
        // reads: without the lock another agent may be running, and only the holder acts.
        lock.release()
        FaultPoint.pause("downloads.agent.released")  // a test takes the lock here, as another agent would
        if !hasWork() {
          reportMemory()
          break
        }
        let again: Bool
        do { again = try await lock.acquire() } catch {
          logger.error("cannot open the agent lock again: \(error)")
          break
        }
        // Not taken: another agent holds it, and it sees the work.
        guard again else { break }
        // Another agent may have run while the lock was free: read the files again.
        state.withLock { s in
          s.statuses = [:]
          s.controls = [:]
          s.tasks.unsettle { _ in true }
          s.listedSequence = nil
          s.listedFiles = nil
        }
        recoverAfterCrash()
        activity.restartIdleTime(now: MonotonicClock.nanoseconds())
        continue
      }
      await doorbell.wait(timeout: relistDelay() ?? .seconds(1))
    }
    listener.cancel()
    await stopAll(.shutdown)
    await clients.shutDown()
    if state.withLock({ $0.deposed }) {
      logger.info("download agent \(CurrentProcess.id) exits: another agent runs the container's downloads")
      return 3
    }
    logger.info("download agent \(CurrentProcess.id) exits")
    return 0
  }

  /// Whether this process is still the container's agent: its locked file still has the name `agent.lock`, or
  /// it took the name again. Once another agent holds the name, this one is deposed for good: it writes nothing
  /// more (a status written now could overwrite the other's), its transfers stop and the loop ends.
  private func stillTheAgent() -> Standing {
    if state.withLock({ $0.deposed }) { return .ended }
    switch lock.check() {
    case .named: return .agent
    case .released: return .ended
    case .lost:
      FaultPoint.pause("downloads.agent.lost")  // tests: the whole container is removed here
      switch lock.retake() {
      case .unavailable: return .unsure  // (it exited 3, "deposed", while an rm -rf of its container went on)
      case .locked:
        logger.info("agent.lock of \(store.container.path) was removed: this agent took the name again")
        // Another agent may have run meanwhile: read the files again.
        state.withLock { s in
          s.statuses = [:]
          s.controls = [:]
          s.tasks.unsettle { _ in true }
          s.listedSequence = nil
          s.listedFiles = nil
        }
        return .agent
      case .heldElsewhere:
        state.withLock { $0.deposed = true }
        logger.error(
          "agent.lock of \(store.container.path) was removed and another agent locked the new one: this agent stops")
        doorbell.ring()
        return .ended
      }
    }
  }

  /// Where this process stands as the container's agent (`stillTheAgent`).
  private enum Standing {
    /// It holds `agent.lock` by its name: it may write.
    case agent
    /// Its file lost the name and the name could not be taken again yet: it writes nothing, and looks again.
    case unsure
    /// Released, or deposed by another agent: the loop ends.
    case ended
  }

  /// Rebuilds the tables of unfinished tasks at the size of what they hold. A dictionary keeps its capacity when
  /// entries leave it: after 10,000 tasks waited at once, the statuses, controls and requests read for them kept
  /// room for 10,000 each (1.3 kB per task of the burst) although every one of them had finished.
  private func shrinkTables() {
    func fitted<K, V>(_ d: [K: V]) -> [K: V] {
      d.capacity > 2 * d.count + 16 ? Dictionary(uniqueKeysWithValues: d.map { ($0.key, $0.value) }) : d
    }
    func fitted<E>(_ s: Set<E>) -> Set<E> { s.capacity > 2 * s.count + 16 ? Set(Array(s)) : s }
    // Not `Array(a)`: that is the same buffer, its room kept.
    func fitted<E>(_ a: [E]) -> [E] {
      guard a.capacity > 2 * a.count + 16 else { return a }
      var fresh: [E] = []
      fresh.reserveCapacity(a.count)
      fresh.append(contentsOf: a)
      return fresh
    }
    state.withLock { s in
      s.statuses = fitted(s.statuses)
      s.controls = fitted(s.controls)
      s.durableRequests = fitted(s.durableRequests)
      s.finishing = fitted(s.finishing)
      s.running = fitted(s.running)
      s.queues = fitted(s.queues)
      s.listed = fitted(s.listed)
      // Commits take outcomes from its front (`removeFirst`), which keeps the room: after 10,000 tasks, an empty
      // array of ~1,000 outcomes, 266 kB resident for good.
      s.pendingFinals = fitted(s.pendingFinals)
    }
    store.shrinkKnownRequests()
  }

  /// What the agent keeps at its idle exit: the finished tasks it remembers (retained 24 h) and the heap's live
  /// bytes. A test across processes compares two runs to get the bytes kept per finished task (AgentMemoryTests).
  private func reportMemory() {
    let kept = state.withLock { $0.tasks.settledCount }
    logger.info(
      "download agent \(CurrentProcess.id) idle: \(kept) finished tasks kept, \(MemorySignals.heapBytesInUse()) bytes of heap in use"
    )
  }

  /// The last look before an idle exit, made after releasing the lock: whether a task needs an agent (new, not
  /// final, or final with its events not queued). It only reads: without the lock, this process may not act.
  private func hasWork() -> Bool {
    // Read without remembering: the store would otherwise keep every finished task's request (600 bytes each).
    for id in store.taskIDs() where store.request(id, remember: false) != nil {
      guard let status = store.status(id), status.phase.isFinal, status.eventsQueued else { return true }
    }
    return false
  }

  /// Stops every transfer (their statuses say where to resume) and ends the loop: SIGTERM, SIGINT.
  package func shutdown() async {
    state.withLock { $0.shuttingDown = true }
    doorbell.ring()
    await stopAll(.shutdown)
  }

  /// Whether the container is still the directory the agent started in: after `rm -rf` the tasks are gone with it
  /// (a process's coordination space may make the layout again, as a new directory).
  private func containerExists() -> Bool {
    guard let st = (try? FileSystem.status(store.container.path)) ?? nil, st.kind == .directory else { return false }
    return st.device == store.root.device && st.inode == store.root.inode
  }

  /// Finishes what the previous agent's commits promised (a kill or a power cut between a commit and its visible
  /// files), then resumes a transfer that was running when it died from its status.
  private func recoverAfterCrash() {
    var last: UInt64 = 0
    for sid in store.sessionIdentifiers() {
      for event in store.queuedEvents(sid) { last = max(last, event.sequence / 2) }
    }
    last = max(last, replayCommits())
    state.withLock { $0.lastFinished = max($0.lastFinished, last) }
    for id in store.taskIDs() {
      guard var status = self.status(id), status.phase == .running else { continue }
      status.phase = .waiting
      try? record(status, for: id, durable: false)
    }
  }

  /// Reads every commit: requests a power cut lost are written again (unless their task finished longer ago than
  /// `retention`: then it was forgotten on purpose), finals whose visible files are missing or older are written
  /// again (events first), and commits none of whose tasks is left are removed. Returns the last finish time seen.
  private func replayCommits() -> UInt64 {
    let commits = store.commits()
    guard !commits.isEmpty else { return 0 }
    let now = Self.wallClock()
    let retention = Int64(settings.retention.nanoseconds)
    var finals: [String: CommitRecord.Final] = [:]
    for commit in commits {
      for final in commit.finals { finals[final.id] = final }
    }
    func expired(_ id: String) -> Bool {
      guard let finished = finals[id]?.status.finished else { return false }
      return now - finished > retention
    }
    var last: UInt64 = 0
    var commitTasks: [UInt64: Int] = [:]
    var tasks = TaskTable()
    var redone: [CommitRecord.Final] = []
    for commit in commits {
      var alive = Set<String>()
      for request in commit.requests where !expired(request.id) {
        if store.restore(request) { logger.info("task \(request.id): its request was restored from its commit") }
        alive.insert(request.id)
      }
      for final in commit.finals {
        last = max(last, UInt64(max(0, final.status.finished ?? 0)))
        guard !expired(final.id), store.request(final.id) != nil else { continue }
        alive.insert(final.id)
        // Only the task's last commit counts (a task has one final; a later one would replace it).
        guard finals[final.id] == final, store.status(final.id) != final.status else { continue }
        redone.append(final)
      }
      if alive.isEmpty {
        store.removeCommit(commit.sequence)
        continue
      }
      commitTasks[commit.sequence] = alive.count
      for id in alive { if let key = TaskKey(id) { tasks.append(commit.sequence, for: key) } }
    }
    if !redone.isEmpty {
      do {
        try store.materialize(redone, batching: false)  // EventFormatHandshake: replays write no batch file
        logger.info("\(redone.count) committed outcomes written again from their commits")
      } catch {
        logger.error("cannot write committed outcomes again (the next start tries again): \(error)")
      }
    }
    let next = (commits.last?.sequence ?? 0) + 1
    state.withLock { s in
      s.commitTasks = commitTasks
      // The commits read now replace those known; what is settled stays.
      for (key, value) in s.tasks.settled(where: { _ in true }) { tasks[settled: key] = value }
      s.tasks = tasks
      s.nextCommit = max(s.nextCommit, next)
    }
    return last
  }

  // MARK: One pass

  /// One pass: a full scan of the unfinished tasks when one is due (`scanDue`), then starts what the limits allow,
  /// forgets what retention allows and relaunches apps. Returns whether anything is unfinished (running, waiting,
  /// suspended, events to queue, a relaunch to retry).
  @discardableResult
  private func pass() -> Bool {
    let now = Self.wallClock()
    var busy: Bool
    if scanDue() {
      let cost: UInt64
      (busy, cost) = ScanPacing.measure { scan(now: now) }
      state.withLock { s in
        s.scanCost = cost
        s.quiet = !busy
      }
    } else {
      busy = state.withLock { s in !s.hasNothingToRun || s.suspendedAtScan }
    }
    startQueued()
    retire(now: now)
    if relaunchDue() {
      let pending = relaunchSessions()
      state.withLock { $0.relaunchPending = pending }
    }
    return busy || state.withLock { $0.relaunchPending }
  }

  /// Whether to look for sessions to relaunch in this pass: every `relaunchLookInterval` (each look lists every
  /// session's events and probes its attach lock — with a pass per finished download, that was most of a pass).
  private func relaunchDue() -> Bool {
    let now = MonotonicClock.nanoseconds()
    return state.withLock { s in
      guard now &- s.lastRelaunchLook >= Self.relaunchLookInterval else { return false }
      s.lastRelaunchLook = now
      return true
    }
  }

  /// Whether this pass looks at every unfinished task: sessions posted since the last scan (a new task, a control)
  /// and it is `relistInterval` old (`ScanPacing`: also 20 times its own cost), something asked for one, or
  /// `relistFallback` passed (`quietRelistInterval` with nothing unfinished: files changed without a post).
  private func scanDue() -> Bool {
    let sequence = store.requests.sequenceValue
    let now = MonotonicClock.nanoseconds()
    return state.withLock { s in
      let age = now &- s.listedAt
      return s.rescan
        || (s.listedSequence != sequence
          && age >= ScanPacing.interval(minimum: Self.relistInterval, lastCost: s.scanCost, idle: s.hasNothingToRun))
        || age >= ScanPacing.interval(minimum: s.fallbackInterval, lastCost: s.scanCost)
    }
  }

  /// Looks at every task not settled: applies controls, queues the events of final statuses without them, settles
  /// final ones, commits new requests and rebuilds the start queues. Returns whether any task is unfinished.
  private func scan(now: Int64) -> Bool {
    var busy = false
    var suspended = false
    var waiting: [Candidate] = []
    var unsynced: [TaskRequest] = []
    state.withLock { $0.rescan = false }
    let fresh = controlsMayHaveChanged()
    // Finished tasks are not looked at here (`settled`): a scan costs the unfinished ones only.
    for id in activeTaskIDs() {
      guard let request = store.request(id) else { continue }
      let (isRunning, isFinishing) = state.withLock { ($0.running[id] != nil, $0.finishing.contains(id)) }
      if isFinishing {
        busy = true
        continue
      }
      if isRunning {
        busy = true
        applyControl(control(id, fresh: fresh), to: id, request: request, running: true)
        continue
      }
      var status = self.status(id) ?? TaskStatus(phase: .waiting, updated: now)
      if status.phase.isFinal {
        if !status.eventsQueued {
          queueEvents(request, &status)
        } else {
          settle(id, status, session: request.session)
        }
        continue
      }
      let control = control(id, fresh: fresh)
      status = applyControl(control, to: id, request: request, running: false) ?? status
      if status.phase.isFinal { continue }
      busy = true
      if state.withLock({ $0.durableRequests.insert(id).inserted }) { unsynced.append(request) }
      if status.phase == .waiting {
        waiting.append(
          Candidate(
            request: request, status: status, priority: control?.priority ?? request.priority,
            host: URL(string: request.url)?.host?.lowercased() ?? ""))
      } else if status.phase == .suspended {
        suspended = true
      }
    }
    // Group commit of the requests new since the last scan (a session's `download()` made them survive a kill
    // only): one commit file for all of them, not an fsync each.
    commitRequests(unsynced)
    var queues: [String: [Candidate]] = [:]
    for candidate in waiting {
      queues[candidate.request.session + "\n" + candidate.host, default: []].append(candidate)
    }
    for key in queues.keys { queues[key]!.sort { $1.precedes($0) } }
    state.withLock { s in
      s.queues = queues
      s.suspendedAtScan = suspended
    }
    return busy
  }

  /// The ids of the tasks not settled, listing `tasks/` again when sessions posted since the last listing (new
  /// tasks, controls) or after `relistFallback` (`quietRelistInterval`: files changed without a post).
  private func activeTaskIDs() -> [String] {
    let sequence = store.requests.sequenceValue
    let now = MonotonicClock.nanoseconds()
    let due = state.withLock { s -> Bool in
      s.listingIsFresh = false
      return s.listedSequence != sequence || now &- s.listedAt >= s.fallbackInterval
    }
    if due {
      let listing = store.taskListing()
      let ids = listing.ids
      forgetAllBut(Set(ids))
      state.withLock { s in
        s.listed = ids.filter { TaskKey($0).map { s.tasks[settled: $0] == nil } ?? true }
        s.listedSequence = sequence
        s.listedAt = now
        s.listedFiles = (listing.withStatus, listing.withControl)
        s.listingIsFresh = true
      }
    }
    return state.withLock { s in
      // Settled since the listing: dropped here, so the list shrinks as tasks finish.
      func isSettled(_ id: String) -> Bool { TaskKey(id).map { s.tasks[settled: $0] != nil } ?? false }
      if s.listed.count > 64, s.listed.contains(where: isSettled) {
        s.listed.removeAll(where: isSettled)
      }
      return s.listed
    }
  }

  /// How long the loop may sleep before a listing that was put off (`relistInterval`) is due; nil: none waits.
  private func relistDelay() -> Duration? {
    let sequence = store.requests.sequenceValue
    let now = MonotonicClock.nanoseconds()
    return state.withLock { s -> Duration? in
      guard s.listedSequence != sequence else { return nil }
      let age = now &- s.listedAt
      let interval = ScanPacing.interval(
        minimum: Self.relistInterval, lastCost: s.scanCost, idle: s.hasNothingToRun)
      return .nanoseconds(Int64(age >= interval ? 0 : interval - age))
    }
  }

  /// A finished task whose events are queued: kept as its finish time and session only.
  private func settle(_ id: String, _ status: TaskStatus, session: String) {
    state.withLock { s in
      if let key = TaskKey(id) {
        s.tasks[settled: key] = Settled(
          finished: status.finished ?? status.updated, session: s.sessionNames.index(session))
      }
      s.statuses[id] = nil
      s.controls[id] = nil
      s.durableRequests.remove(id)
    }
    store.forgetRequest(id)
  }

  /// Forgets finished tasks whose retention passed and whose events were handled, every `retireInterval`.
  private func retire(now: Int64) {
    let clock = MonotonicClock.nanoseconds()
    let retention = Int64(settings.retention.nanoseconds)
    let due = state.withLock { s -> [(id: String, session: String)]? in
      guard clock &- s.lastRetire >= Self.retireInterval else { return nil }
      s.lastRetire = clock
      return s.tasks.settled(where: { now - $0.finished > retention }).map {
        ($0.key.id, s.sessionNames[$0.value.session])
      }
    }
    // A session's queue is listed (and its batch files read) once per retire, not once per task.
    var queued: [String: Set<String>] = [:]
    for (id, session) in due ?? [] {
      if queued[session] == nil { queued[session] = store.tasksWithQueuedEvents(session) }
      guard queued[session]?.contains(id) == false else { continue }
      store.removeTask(id)
      forget(id)
    }
  }

  /// Applies a control generation not applied yet. For a running task, asks its transfer to stop (its end applies
  /// the rest); otherwise returns the new status (written).
  @discardableResult
  private func applyControl(_ control: TaskControl?, to id: String, request: TaskRequest, running: Bool)
    -> TaskStatus?
  {
    guard let control else { return nil }
    if running {
      let stop = state.withLock { s -> Task<Void, Never>?? in
        guard var r = s.running[id], control.generation > r.status.appliedControl, r.stopReason == nil else {
          return nil
        }
        switch control.desired {
        case .run:
          r.status.appliedControl = control.generation
          s.running[id] = r
          return nil
        case .suspend: r.stopReason = .suspend
        case .cancel: r.stopReason = .cancel
        }
        r.stopGeneration = control.generation
        s.running[id] = r
        return r.task
      }
      stop??.cancel()
      return nil
    }
    guard var status = self.status(id) ?? Optional(TaskStatus(phase: .waiting, updated: Self.wallClock())),
      control.generation > status.appliedControl
    else { return nil }
    status.appliedControl = control.generation
    switch control.desired {
    case .run: if status.phase == .suspended { status.phase = .waiting }
    case .suspend: if status.phase == .waiting { status.phase = .suspended }
    case .cancel:
      try? store.root.removeFile(DownloadStore.taskPath(id, "partial"))
      finalize(request, &status, phase: .cancelled, error: .cancelled)
      return status
    }
    status.updated = Self.wallClock()
    do { try record(status, for: id, durable: true) } catch {
      logger.error("task \(id): cannot write its status: \(error)")
    }
    return status
  }

  /// Starts what the limits allow from the queues, highest priority first, then oldest: the best head of a queue
  /// whose session and host have a connection free, until none has or `maxConcurrentTransfers` run.
  private func startQueued() {
    while true {
      let next = state.withLock { s -> Candidate? in
        guard !s.shuttingDown, s.running.count < settings.maxConcurrentTransfers else { return nil }
        var best: (key: String, candidate: Candidate)?
        for (key, queue) in s.queues {
          guard let head = queue.last else { continue }
          let sameHost = s.running.values.filter { $0.session == head.request.session && $0.host == head.host }.count
          guard sameHost < head.request.connectionsPerHost else { continue }
          if best.map({ head.precedes($0.candidate) }) ?? true { best = (key, head) }
        }
        guard let best else { return nil }
        s.queues[best.key]!.removeLast()
        if s.queues[best.key]!.isEmpty { s.queues[best.key] = nil }
        return best.candidate
      }
      guard let next else { return }
      launch(next.request, next.status, host: next.host)
    }
  }

  private func launch(_ request: TaskRequest, _ status: TaskStatus, host: String) {
    var status = status
    status.phase = .running
    status.updated = Self.wallClock()
    // Not written yet: a report of the transfer writes "running" with what it learnt — the second report when the
    // first has no byte a kill could keep (`progress`), so a small file never writes it. A kill before it leaves
    // "waiting", which is what the next agent would make of it.
    guard stillTheAgent() == .agent else { return }
    let partial = DownloadStore.taskPath(request.id, "partial")
    // Leased here, on the loop's thread, until the transfer's last attempt ended: the client is not shut under it.
    let clients = clients
    let engine = TransferEngine(
      container: store.container, client: clients.lease(), policy: settings.policy, logger: logger)
    // Registered before the transfer can report: `progress` and `finish` find their entry.
    state.withLock { s in
      s.running[request.id] = Running(task: nil, session: request.session, host: host, status: status)
    }
    let task = Task { [self] in
      let outcome = await engine.run(request, resume: status.resume, partial: partial) { resume, attempts, http in
        self.progress(request.id, resume, attempts, http)
      }
      clients.release()
      // A published download's finish only queues its outcome for the group commit, written on `commits`; the
      // others remove a partial or write a durable status: off the cooperative pool. (Every finish hopped to an
      // offload thread and back: about a tenth of the agent's CPU per small file.)
      if case .published = outcome {
        self.finish(request, outcome)
      } else {
        await offload { self.finish(request, outcome) }
      }
    }
    let stopAlready = state.withLock { s -> Bool in
      guard var r = s.running[request.id] else { return false }
      r.task = task
      s.running[request.id] = r
      return r.stopReason != nil
    }
    if stopAlready { task.cancel() }
  }

  private func progress(_ id: String, _ resume: ResumeState, _ attempts: Int, _ http: Int?) {
    // The start of a fresh download's first attempt says nothing a kill would need: its head follows at once.
    let attemptStart = attempts == 1 && resume.receivedBytes == 0 && http == nil
    let (status, worthWriting) = state.withLock { s -> (TaskStatus?, Bool) in
      guard var r = s.running[id] else { return (nil, false) }
      r.status.resume = resume
      r.status.attempts = attempts
      if let http { r.status.httpStatus = http }
      r.status.updated = Self.wallClock()
      // A report of no bytes while the status on disk trusts none either (a fresh download's head) gives a kill
      // nothing to resume: it waits for the next report, which the delegate repeats within a progress interval.
      // A small file ends before that: one replace (and one file created) less per download.
      let deferred =
        !attemptStart && resume.receivedBytes == 0 && !r.reportDeferred && Self.trustsNoBytes(s.statuses[id])
      r.reportDeferred = deferred
      s.running[id] = r
      return (r.status, !attemptStart && !deferred)
    }
    guard let status, worthWriting else { return }
    do { try record(status, for: id, durable: false) } catch {
      logger.error("task \(id): cannot write its progress: \(error)")
    }
  }

  /// Whether a status as written (nil: not read yet; `.some(nil)`: no file) lets a restarted agent keep no byte of
  /// the partial (`TransferEngine.openPartial`).
  private static func trustsNoBytes(_ written: TaskStatus??) -> Bool {
    guard let written else { return false }
    guard let status = written else { return true }
    return status.resume.receivedBytes == 0 && status.resume.durableBytes == 0
  }

  private func finish(_ request: TaskRequest, _ outcome: TransferOutcome) {
    guard
      let running = state.withLock({ s -> Running? in
        guard let r = s.running.removeValue(forKey: request.id) else { return nil }
        // Deposed: the task and its partial are the other agent's now; touch nothing.
        if s.deposed { return nil }
        s.finishing.insert(request.id)
        return r
      })
    else { return }
    var status = running.status
    if running.stopReason != nil { status.appliedControl = max(status.appliedControl, running.stopGeneration) }
    let partial = DownloadStore.taskPath(request.id, "partial")
    switch outcome {
    case .published(let resume, let http):
      status.resume = resume
      status.httpStatus = http
      finalize(request, &status, phase: .completed, error: nil)
    case .failed(let error, let resume, let http):
      status.resume = resume
      status.httpStatus = http ?? status.httpStatus
      try? store.root.removeFile(partial)
      finalize(request, &status, phase: .failed, error: error)
    case .stopped(let resume):
      status.resume = resume
      switch running.stopReason {
      case .cancel:
        try? store.root.removeFile(partial)
        finalize(request, &status, phase: .cancelled, error: .cancelled)
      case .suspend, .shutdown, nil:
        status.phase = running.stopReason == .suspend ? .suspended : .waiting
        write(status, request.id)
        // Not finished: the next pass scans, so the task is queued again (or counted as suspended).
        state.withLock { s in
          s.finishing.remove(request.id)
          s.rescan = true
        }
      }
    }
    // A final outcome left `finishing` with its group commit (`commitPending`).
    doorbell.ring()
  }

  private func write(_ status: TaskStatus, _ id: String, durable: Bool = true) {
    var status = status
    status.updated = Self.wallClock()
    do { try record(status, for: id, durable: durable) } catch {
      logger.error("task \(id): cannot write its status: \(error)")
    }
  }

  // MARK: What the agent knows

  // (Requests are remembered by the store: written once, never changed.) A pass over a thousand settled tasks
  // reads no file, and one over waiting tasks reads their controls only when sessions may have changed one.

  /// A task's status as last written. Read from its file once, and only when the last listing showed one: only the
  /// agent writes statuses, and what this one wrote is remembered (a burst's new tasks cost no missing-file read).
  private func status(_ id: String) -> TaskStatus? {
    let (known, unlisted) = state.withLock { s in (s.statuses[id], s.listedFiles.map { !$0.status.contains(id) }) }
    if let known { return known }
    if unlisted == true {
      state.withLock { $0.statuses[id] = .some(nil) }
      return nil
    }
    let status = store.status(id)
    state.withLock { $0.statuses[id] = .some(status) }
    return status
  }

  /// Writes a status and remembers it (only once it is written: the memory never runs ahead of the file).
  private func record(_ status: TaskStatus, for id: String, durable: Bool) throws(DownloadError) {
    guard stillTheAgent() == .agent else {
      throw .other("not written: this agent does not hold agent.lock by its name (deposed, or the name is removed)")
    }
    try store.write(status, for: id, durable: durable)
    state.withLock { $0.statuses[id] = .some(status) }
  }

  /// A task's control request: read again when sessions may have written one (`fresh`), but not for a task without
  /// a control file in a listing made after that decision (sessions write the file before they post).
  private func control(_ id: String, fresh: Bool) -> TaskControl? {
    let (known, unlisted) = state.withLock { s in
      (s.controls[id], s.listingIsFresh ? s.listedFiles.map { !$0.control.contains(id) } : nil)
    }
    if !fresh, let known { return known }
    if unlisted == true {
      state.withLock { $0.controls[id] = .some(nil) }
      return nil
    }
    let control = store.control(id)
    state.withLock { $0.controls[id] = .some(control) }
    return control
  }

  /// Whether controls must be read again in this pass: sessions posted a request since the last read (read before
  /// the controls, so a post after it is seen by the next pass), or 2 s passed (a post made while the signal file
  /// was being created reaches no one).
  private func controlsMayHaveChanged() -> Bool {
    let sequence = store.requests.sequenceValue
    let now = MonotonicClock.nanoseconds()
    return state.withLock { s in
      guard s.controlsSequence != sequence || now &- s.controlsRead >= 2_000_000_000 else { return false }
      s.controlsSequence = sequence
      s.controlsRead = now
      return true
    }
  }

  private func forget(_ id: String) {
    let empty = state.withLock { s -> [UInt64] in
      s.statuses[id] = nil
      s.controls[id] = nil
      var empty: [UInt64] = []
      guard let key = TaskKey(id) else { return empty }
      for sequence in s.tasks.remove(key) {
        let left = (s.commitTasks[sequence] ?? 1) - 1
        s.commitTasks[sequence] = left > 0 ? left : nil
        if left <= 0 { empty.append(sequence) }
      }
      return empty
    }
    // A commit none of whose tasks is left has nothing more to restore.
    for sequence in empty { store.removeCommit(sequence) }
  }

  /// Tasks whose files are gone (removed, or the container emptied) are forgotten.
  private func forgetAllBut(_ ids: Set<String>) {
    state.withLock { s in
      if s.statuses.count > ids.count { s.statuses = s.statuses.filter { ids.contains($0.key) } }
      if s.controls.count > ids.count { s.controls = s.controls.filter { ids.contains($0.key) } }
      if s.durableRequests.count > ids.count { s.durableRequests = s.durableRequests.filter { ids.contains($0) } }
      if s.tasks.settledCount > ids.count {
        let keys = Set(ids.compactMap { TaskKey($0) })
        s.tasks.unsettle { !keys.contains($0) }
      }
    }
  }

  /// Gives a finished task its final status and events, made durable by the next group commit (`submit`): until
  /// then the task stays in `finishing`, and nothing visible says it finished.
  private func finalize(_ request: TaskRequest, _ status: inout TaskStatus, phase: TaskPhase, error: DownloadError?) {
    status.phase = phase
    status.error = error
    status.eventsQueued = true
    status.updated = Self.wallClock()
    status.finished = state.withLock { s in
      s.lastFinished = max(s.lastFinished + 1, UInt64(max(0, Self.wallClock())))
      return Int64(s.lastFinished)
    }
    submit(
      CommitRecord.Final(id: request.id, session: request.session, status: status, events: Self.events(request, status))
    )
    logger.info(
      "task \(request.id) \(phase.rawValue)\(error.map { ": \($0)" } ?? "") (\(status.resume.receivedBytes) bytes)")
  }

  /// A finished task's events: `finished` (a completed download) and `completed`; their names derive from the
  /// finish time, so writing them again replaces them, never doubles them.
  private static func events(_ request: TaskRequest, _ status: TaskStatus) -> [EventRecord] {
    let base = UInt64(max(0, status.finished ?? wallClock())) &* 2
    var events: [EventRecord] = []
    if status.phase == .completed {
      events.append(
        EventRecord(
          sequence: base, taskID: request.id, kind: .finished, location: request.destination,
          httpStatus: status.httpStatus))
    }
    events.append(
      EventRecord(
        sequence: base + 1, taskID: request.id, kind: .completed, error: status.error, httpStatus: status.httpStatus))
    return events
  }

  // MARK: Group commit

  /// Queues a final outcome for the group commit. The first finishing task that finds no commit being written has
  /// one written on `commits`, which goes on while outcomes wait: those that arrive during one commit's fsyncs share
  /// the next.
  private func submit(_ final: CommitRecord.Final) {
    let lead = state.withLock { s -> Bool in
      s.finishing.insert(final.id)
      s.pendingFinals.append(final)
      guard !s.committing else { return false }
      s.committing = true
      return true
    }
    if lead { commits.async(execute: SyscallRecorder.carryingLog { self.commitPending() }) }
  }

  /// Returns once the group commits queued so far are written (`commits` is serial): a shutdown waits for them.
  private func commitsWritten() async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in commits.async { done.resume() } }
  }

  /// Writes commits until no outcome waits: the commit durable first, then the visible files (events, then
  /// statuses), then the outcomes are known to the loop.
  private func commitPending() {
    while true {
      let next = state.withLock { s -> ([CommitRecord.Final], UInt64)? in
        guard !s.pendingFinals.isEmpty else {
          s.committing = false
          return nil
        }
        let batch = Array(s.pendingFinals.prefix(CommitRecord.maxEntries))
        s.pendingFinals.removeFirst(batch.count)
        defer { s.nextCommit += 1 }
        return (batch, s.nextCommit)
      }
      guard let (batch, sequence) = next else {
        // The loop learns that the outcomes left `finishing` (the transfers' own rings came before their commit).
        doorbell.ring()
        return
      }
      FaultPoint.pause("downloads.agent.commit")
      FaultPoint.reach("downloads.agent.before-commit")
      var written = false
      if stillTheAgent() == .agent {
        do {
          try store.commit(CommitRecord(sequence: sequence, finals: batch))
          written = true
        } catch {
          logger.error("cannot write a group commit of \(batch.count) outcomes (written one by one): \(error)")
        }
      }
      FaultPoint.reach("downloads.agent.committed")
      var visible = false
      if written {
        do {
          try store.materialize(batch)
          visible = true
        } catch {
          logger.error("cannot write the files of a group commit (the pass queues the events again): \(error)")
        }
      }
      state.withLock { s in
        for final in batch {
          s.finishing.remove(final.id)
          if visible {
            // Settled at once: the task's record is on disk, memory keeps its finish time only.
            if let key = TaskKey(final.id) {
              s.tasks[settled: key] = Settled(
                finished: final.status.finished ?? final.status.updated, session: s.sessionNames.index(final.session))
            }
            s.statuses[final.id] = nil
            s.controls[final.id] = nil
            s.durableRequests.remove(final.id)
          } else if written {
            // Not visible: the next scan queues the events and writes the status (`queueEvents`).
            var status = final.status
            status.eventsQueued = false
            s.statuses[final.id] = .some(status)
            s.rescan = true
          }
          if written {
            if let key = TaskKey(final.id) { s.tasks.append(sequence, for: key) }
            s.commitTasks[sequence, default: 0] += 1
          }
        }
      }
      if visible { for final in batch { store.forgetRequest(final.id) } }
      if !written {
        state.withLock { $0.rescan = true }
        // No commit: the old way, each status durable, then its events.
        for final in batch {
          var status = final.status
          status.eventsQueued = false
          do {
            try record(status, for: final.id, durable: true)
            if let request = store.request(final.id) { queueEvents(request, &status) }
          } catch {
            logger.error("task \(final.id): cannot write its final status: \(error)")
          }
        }
      }
      doorbell.ring()
    }
  }

  /// Makes the requests new since the last pass durable in one commit (they are restored from it after a power cut).
  private func commitRequests(_ requests: [TaskRequest]) {
    var rest = requests[...]
    while !rest.isEmpty {
      let chunk = Array(rest.prefix(CommitRecord.maxEntries))
      rest = rest.dropFirst(chunk.count)
      let sequence = state.withLock { s in
        defer { s.nextCommit += 1 }
        return s.nextCommit
      }
      do {
        try store.commit(CommitRecord(sequence: sequence, requests: chunk))
        state.withLock { s in
          s.commitTasks[sequence] = chunk.count
          for request in chunk {
            if let key = TaskKey(request.id) { s.tasks.append(sequence, for: key) }
          }
        }
      } catch {
        logger.error("cannot commit new task requests (a power cut may lose them): \(error)")
        state.withLock { s in for request in chunk { s.durableRequests.remove(request.id) } }
      }
    }
  }

  /// Queues the events of a final status written without them (an older agent's, or a commit whose files could not
  /// be written), durably, then marks them queued.
  private func queueEvents(_ request: TaskRequest, _ status: inout TaskStatus) {
    do {
      try store.queue(Self.events(request, status), for: request.session)
      status.eventsQueued = true
      // Not fsynced (two fsyncs less per task): only a power cut can lose this mark, and then the next agent queues
      // the same event names again — delivered twice at worst, which the spec allows (at least once, with ids).
      write(status, request.id, durable: false)
    } catch {
      logger.error("task \(request.id): cannot queue its events (the next pass tries again): \(error)")
    }
  }

  // MARK: Relaunch

  /// Starts the registered app of each session whose events wait with nobody attached. Returns whether a relaunch
  /// may still be due (keeps the agent up).
  private func relaunchSessions() -> Bool {
    var pending = false
    for sid in store.sessionIdentifiers() {
      let events = store.names(in: DownloadStore.sessionPath(sid) + "/events").filter { $0.hasSuffix(".event") }
      guard !events.isEmpty, !store.isHeld(DownloadStore.attachLockPath(sid)) else { continue }
      let record: RelaunchRecord
      switch store.relaunch(sid) {
      case nil: continue
      case .trusted(let trusted): record = trusted
      case .untrusted(let path, _, let problem):
        let message =
          "session '\(sid)': its app registration '\(store.container.path)/\(path)' is not started: \(problem); "
          + "only a registration nobody but this user (uid \(CurrentProcess.userID)) or root can write is run. "
          + "Start the session again from its app (DownloadSession with a relaunch configuration) to write a new one"
        logger.error("\(message)")
        continue
      }
      let now = MonotonicClock.nanoseconds()
      let interval = settings.relaunchInterval.nanoseconds
      let due = state.withLock { s -> Bool? in
        let r = s.relaunches[sid] ?? (0, 0)
        guard r.count < settings.relaunchAttempts else { return nil }
        guard r.count == 0 || now &- r.last >= interval else { return false }
        s.relaunches[sid] = (r.count + 1, now)
        return true
      }
      guard let due else { continue }
      pending = true
      guard due else { continue }
      var environment = ProcessInfo.processInfo.environment
      environment[DownloadSession.relaunchEnvironmentKey] = sid
      do {
        let pid = try ProcessSpawn.detached(
          executable: record.executable, arguments: record.arguments, environment: environment,
          output: SystemFD.view(2, path: "stderr"))
        logger.info("session '\(sid)': \(events.count) events wait: started \(record.executable) as pid \(pid)")
      } catch {
        logger.error("session '\(sid)': cannot start \(record.executable): \(error)")
      }
    }
    return pending
  }

  private func stopAll(_ reason: StopReason) async {
    let tasks = state.withLock { s -> [Task<Void, Never>] in
      for (id, var r) in s.running where r.stopReason == nil {
        r.stopReason = reason
        s.running[id] = r
      }
      return s.running.values.compactMap(\.task)
    }
    for task in tasks { task.cancel() }
    for task in tasks { await task.value }
    // Their outcomes are queued: written before the agent goes.
    await commitsWritten()
  }

  static func wallClock() -> Int64 { RealtimeClock.nanoseconds() }
}

/// Wakes the agent's loop: a ring before the wait is not lost.
final class Doorbell: Sendable {
  private struct State {
    var rung = false
    var waiter: CheckedContinuation<Void, Never>?
    /// Counts waits: a wait's timeout ends that wait only. As a ring, a timeout left pending by a wait a ring ended
    /// woke a later wait early, and left a timeout of its own in turn: after a burst of 10,000 tasks the loop kept
    /// passing over 100 times a second, for good (17 ms of CPU a second).
    var wait: UInt64 = 0
  }
  private let state = Mutex(State())

  func ring() {
    let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
      guard let w = s.waiter else {
        s.rung = true
        return nil
      }
      s.waiter = nil
      return w
    }
    waiter?.resume()
  }

  func wait(timeout: Duration) async {
    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
      let wait = state.withLock { s -> UInt64? in
        if s.rung {
          s.rung = false
          return nil
        }
        s.waiter = c
        s.wait &+= 1
        return s.wait
      }
      guard let wait else {
        c.resume()
        return
      }
      // On the loop's thread, not Dispatch's (`LoopThread`).
      LoopThread.shared.after(nanoseconds: timeout.nanoseconds, owner: self) { [weak self] in
        self?.timeOut(wait)
      }
    }
  }

  /// Ends wait number `wait` if it still waits.
  private func timeOut(_ wait: UInt64) {
    let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
      guard s.wait == wait, let w = s.waiter else { return nil }
      s.waiter = nil
      return w
    }
    waiter?.resume()
  }
}
