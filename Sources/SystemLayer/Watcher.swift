import Foundation
import Glibc
import Logging
import Synchronization
import SystemPackage

/// The process-wide inotify thread.
///
/// libinotifytools keeps global, non-thread-safe state and returns events in static buffers: exactly one thread ever
/// calls it, this one, through its backend (`InotifyTools`: add, remove and read watches). Other threads queue
/// requests and wake it through the backend's eventfd. Events are copied out before the next library call and
/// routed by watch descriptor to handlers, which run on this thread and must return quickly (hand work to a queue).
///
/// The thread also serves other descriptors (`watchReadable`: the inbox's datagram socket, MessageProtocol.swift),
/// so that what they deliver and the inotify events are handled on one thread, in causal order: before each
/// inotify event it runs their handlers, so a datagram sent before a change is always handled before that change's
/// event. It waits on all of them, the inotify instance and the wake-up in one `poll`.
package final class Watcher: @unchecked Sendable {  // mutable state lives in `state` (a Mutex) or on the thread
  /// One inotify event, copied out of the library's static buffer.
  package struct Event: Sendable {
    package var mask: UInt32
    package var cookie: UInt32
    /// The name of the entry inside a watched directory; empty for events on the watched item itself.
    package var name: String
  }

  package struct Token: Hashable, Sendable { let id: UInt64 }
  package typealias Handler = @Sendable (Event) -> Void

  // inotify bits (composed macros such as IN_ALL_EVENTS are not imported into Swift).
  package static let modify: UInt32 = 0x2
  package static let attrib: UInt32 = 0x4
  package static let closeWrite: UInt32 = 0x8
  package static let movedFrom: UInt32 = 0x40
  package static let movedTo: UInt32 = 0x80
  package static let create: UInt32 = 0x100
  package static let delete: UInt32 = 0x200
  package static let deleteSelf: UInt32 = 0x400
  package static let moveSelf: UInt32 = 0x800
  package static let overflow: UInt32 = 0x4000
  package static let ignored: UInt32 = 0x8000
  package static let isDirectory: UInt32 = 0x4000_0000
  /// Watch flags: fail unless the path is a directory; do not follow a symlink in its last component.
  package static let onlyDirectory: UInt32 = 0x0100_0000
  package static let dontFollow: UInt32 = 0x0200_0000
  /// Add to the inode's mask instead of replacing it (`IN_MASK_ADD`).
  static let maskAdd: UInt32 = 0x2000_0000
  /// What a watch asks for unless told otherwise: every change but IN_MODIFY, which fires on each write(2) and
  /// would wake this thread (in every process watching) once per append.
  package static let changeMask: UInt32 =
    attrib | closeWrite | movedFrom | movedTo | create | delete | deleteSelf | moveSelf

  package static let shared = Watcher()

  private static let logger = Logger(label: "GroupContainer.Watcher")

  private enum Request {
    case add(
      path: String, mask: UInt32, token: Token, handler: Handler,
      reply: @Sendable (Result<Void, FileSystemError>) -> Void)
    case remove(Token)
    case addReadable(fd: Int32, token: Token, handler: @Sendable () -> Void)
  }

  private struct State {
    var requests: [Request] = []
    var nextToken: UInt64 = 1
    var overflowHandlers: [Token: @Sendable () -> Void] = [:]
    var tickHandlers: [Token: @Sendable () -> Void] = [:]
    var stallUntil: UInt64 = 0
    /// `afterQueuedEvents` bodies not yet taken by the watcher thread.
    var unmarked: [@Sendable () -> Void] = []
    /// Quiets begun and not ended (`beginQuiet`), and when the current one stops holding back the queue.
    var quiets = 0
    var quietUntil: UInt64 = 0
    /// The inotify queue was polled since the last quiet began: only then may another begin.
    var queuePolled = true
    /// `stop` was called: the thread ends its turn, and requests are refused.
    var stopping = false
  }

  private let state = Mutex(State())
  /// libinotifytools' instance and the thread's wake-up; nil when watching is unavailable (`startError`).
  private let backend: InotifyTools?
  private let startError: FileSystemError?
  private nonisolated(unsafe) var threadID = pthread_t()
  /// Signalled when the thread has ended (`stop`).
  private let ended = DispatchSemaphore(value: 0)

  // Owned by the watcher thread only.
  /// inotify keeps one mask per inode, so a watch asks for the union of its handlers' masks.
  private var handlersByWD: [Int32: [Token: (mask: UInt32, handler: Handler)]] = [:]
  private var pathByWD: [Int32: String] = [:]
  private var wdByToken: [Token: Int32] = [:]
  /// Descriptors served with inotify (`watchReadable`), in the order they were added.
  private var readables: [(token: Token, fd: Int32, handler: @Sendable () -> Void)] = [] {
    didSet { polled = [] }  // made again from `readables` on the next wait (a swap keeps the count)
  }
  /// Bodies by the watch descriptor of their marker (owned by the watcher thread).
  private var markers: [Int32: [@Sendable () -> Void]] = [:]
  /// `afterQueuedEvents` bodies taken by the watcher thread, waiting to see the queue empty (or for their marker,
  /// once `markerDelay` has passed since the first was taken).
  private var drainWaiters: [@Sendable () -> Void] = []
  private var drainWaitersSince: UInt64 = 0
  /// The library holds no event it has read and not returned (its last `next_events` returned none), and the
  /// kernel queue was empty when the loop last looked; false once an event came (more may be buffered).
  private var libraryDrained = false
  /// The inotify descriptor was readable when `poll` last returned (or may be: it was not polled since). False
  /// after a poll in a quiet, which leaves it out.
  private var inotifyReadable = true
  /// `poll`'s array, kept between turns (one allocation per wake-up was measurable at 64 presenter processes).
  private var polled: [pollfd] = []
  /// Odd from just before the loop asks the library for events until the library returns none again: meanwhile
  /// events taken off the kernel's queue may not have reached their handlers yet (`hasHandledEveryEvent`). Written
  /// by the watcher thread only.
  private let reading = Atomic<UInt64>(0)

  private init() {
    var backend: InotifyTools?
    var error: FileSystemError?
    // Initialise before the process opens many files: the library's select() cannot wait on a descriptor ≥ 1024.
    if Self.simulatesNoInstance {
      // Tests: behave as a process whose user has no inotify instance left, without using them all up (the
      // limit is per user: exhausting it would break every other process of the user on this machine).
      error = FileSystemError("inotify_init", "", .tooManyOpenFiles)
    } else {
      do { backend = try InotifyTools() } catch let e { error = e }
    }
    self.backend = backend
    startError = error
    guard let backend else {
      Self.logger.error("file watching is unavailable: \(error!)")
      return
    }
    let thread = Thread { [unowned self] in
      self.threadID = pthread_self()
      self.run(backend)
      backend.close()
      self.ended.signal()
    }
    thread.name = "GroupContainer.Watcher"
    thread.start()
  }

  /// Starts the thread now (call early: see the FD_SETSIZE trap) and reports whether watching works.
  package func start() throws(FileSystemError) {
    if let startError { throw startError }
    if state.withLock({ $0.stopping }) { throw Self.stoppedError }
  }

  private static let stoppedError = FileSystemError(
    "inotify", "", .badFileDescriptor, reason: "the watcher was stopped (Watcher.stop)")

  /// Ends the watcher thread: it wakes through its eventfd, ends its turn and closes the library's instance; returns
  /// once it has (at once when called on that thread, which ends after the current handler). Watching is over for
  /// this process: later watches fail, and no handler is called again.
  package func stop() {
    guard let backend else { return }
    let first = state.withLock { s in
      defer { s.stopping = true }
      return !s.stopping
    }
    guard first else { return }
    backend.wake()
    if pthread_equal(pthread_self(), threadID) == 0 {
      ended.wait()
      ended.signal()  // for a later `stop` from another thread
    }
  }

  /// Set to "1" in a process's environment, the watcher fails to start as if the user's inotify instances
  /// were used up (`EMFILE` from `inotify_init`). A test hook: read only in a build with the `TestHooks` trait.
  #if GROUPCONTAINER_TEST_HOOKS
    package static let simulateNoInstanceVariable = "GROUP_CONTAINER_SIMULATE_NO_INOTIFY"
    private static var simulatesNoInstance: Bool { Environment.value(simulateNoInstanceVariable) == "1" }
  #else
    private static let simulatesNoInstance = false
  #endif

  /// Why watching does not work in this process, in words for the user, or nil when it works. Names the per-user
  /// limit and the sysctl that raises it when that is the cause.
  package var unavailableReason: String? {
    guard let startError else { return nil }
    guard startError.operation == "inotify_init", startError.errno == .tooManyOpenFiles else {
      return "file watching (inotify) is unavailable: \(startError)"
    }
    let limit =
      (try? FileSystem.readFile("/proc/sys/fs/inotify/max_user_instances", limit: 64))
      .map { String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "?"
    return "no inotify instance is left for this user (\(startError)): fs.inotify.max_user_instances is \(limit); "
      + "close other watching programs or raise it, e.g. `sudo sysctl fs.inotify.max_user_instances=1024`"
  }

  /// `watch` without waiting for the watcher thread: returns the token at once, and `placed` runs on the watcher
  /// thread (with the token) once the watch is in place or could not be, before any of its events is handled.
  /// Watches asked for one after the other are placed in that order. For callers that may hold a lock that some
  /// handler takes: a waiting `watch` would then wait for a thread that waits for it. The path is resolved when the
  /// watch is placed, always: `watch` answers a path watched before with that watch, which follows its directory
  /// wherever it was moved since (LinkFreePaths needs the directory the path names now).
  package func watchLater(
    _ path: String, mask: UInt32 = Watcher.changeMask, handler: @escaping Handler,
    placed: @escaping @Sendable (Token, Result<Void, FileSystemError>) -> Void
  ) -> Token {
    let token = newToken()
    if let startError {
      placed(token, .failure(startError))
      return token
    }
    submit(Request.add(path: path, mask: mask, token: token, handler: handler) { placed(token, $0) })
    return token
  }

  private func newToken() -> Token {
    state.withLock { s in
      defer { s.nextToken += 1 }
      return Token(id: s.nextToken)
    }
  }

  /// Performs `request` at once on the watcher thread; from another thread, queues it and wakes the watcher thread
  /// (then answers true: it is performed on the thread's next turn, in the order queued). Once stopped, refuses it.
  @discardableResult
  private func submit(_ request: Request) -> Bool {
    guard pthread_equal(pthread_self(), threadID) == 0 else {
      perform(request)
      return false
    }
    let queued = state.withLock { s in
      if !s.stopping { s.requests.append(request) }
      return !s.stopping
    }
    guard queued else {
      refuse(request)
      return false
    }
    wake()
    return true
  }

  /// Answers a request the stopped thread will never perform.
  private func refuse(_ request: Request) {
    if case .add(_, _, _, _, let reply) = request { reply(.failure(Self.stoppedError)) }
  }

  /// Watches `path` (a directory, or a file) and calls `handler` on the watcher thread for each event in `mask`.
  /// Returns once the watch is in place, so no later change is missed.
  package func watch(
    _ path: String, mask: UInt32 = Watcher.changeMask, handler: @escaping Handler
  ) throws(FileSystemError) -> Token {
    try start()
    let token = newToken()
    let result = Mutex<Result<Void, FileSystemError>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let request = Request.add(path: path, mask: mask, token: token, handler: handler) { r in
      result.withLock { $0 = r }
      done.signal()
    }
    if submit(request) { done.wait() }
    switch result.withLock({ $0 })! {
    case .success: return token
    case .failure(let e): throw e
    }
  }

  /// Whether `watchReadable` works in this process (the watcher runs).
  package var servesDescriptors: Bool { startError == nil }

  /// Calls `handler` on the watcher thread whenever `fd` is readable, and before every inotify event (so whatever
  /// `fd` received before a change is handled before the change's event). The handler must read everything
  /// waiting without blocking. Only when `servesDescriptors`; `fd` stays open until the token is cancelled.
  package func watchReadable(_ fd: Int32, handler: @escaping @Sendable () -> Void) -> Token {
    let token = newToken()
    submit(Request.addReadable(fd: fd, token: token, handler: handler))
    return token
  }

  /// Runs `body` on the watcher thread once every inotify event queued now has been handled. The loop then reads
  /// the queue until it finds it empty — the library's buffer drained and nothing in the kernel's queue — and runs
  /// `body`: every event queued before has been handled by then. Should the queue not empty for `markerDelay` (a
  /// steady stream of events), a marker — a watch added to a pipe nobody else watches and removed at once —
  /// queues `IN_IGNORED` with a watch descriptor of its own behind them (descriptors are never reused soon), and
  /// `body` runs when the loop reads it. (A marker per write's finish, two system calls that walk `/proc`, was a
  /// tenth of a presenter process's CPU with 64 of them.) A message received on a datagram socket may have been
  /// sent after a change whose event is still queued; what the message ends (a write's suppression of its own
  /// events, PresenterHost) ends only then. After a queue overflow, or when no marker can be made, bodies run at
  /// once (the handlers rescan anyway).
  package func afterQueuedEvents(_ body: @escaping @Sendable () -> Void) {
    guard startError == nil, !state.withLock({ $0.stopping }) else { return body() }  // no events to wait for
    // Called from a descriptor's handler after `poll` (the usual case: the events of the write a finish ends woke
    // this thread before the finish came), with nothing buffered in the library and nothing in the kernel's queue:
    // every event queued so far has been handled: nothing to wait for.
    if pthread_equal(pthread_self(), threadID) != 0 && libraryDrained && queuedBytes() == 0 {
      return body()
    }
    state.withLock { $0.unmarked.append(body) }
    if pthread_equal(pthread_self(), threadID) == 0 { wake() }  // the loop takes it on its next turn
  }

  /// The longest a quiet holds back the inotify queue, from its beginning.
  package static let quietLimit: UInt64 = 10_000_000

  /// Leaves the inotify queue unread while descriptors are served, until every quiet has ended or `quietLimit`
  /// has passed since the first began. For a coordinated write announced to this process (its prepare): the
  /// write's own events will be swallowed, and waking for them in the middle of the writer's access is waste — with
  /// 64 presenter processes, the rename woke 64 watcher threads, and their turns took the writer's CPUs for as long
  /// as the rest of its write. They are read after the finish, in the same wake-up. A quiet never extends
  /// itself: under overlapping writes it lapses, and events are read as they come. Nor does one begin before the
  /// queue was polled since the last began: back-to-back writes bring one's finish and the next one's prepare in
  /// the same turn, and quiet after quiet would leave the queue unread for as long as the writes go on. Datagrams
  /// and this watcher's own requests are served throughout.
  package func beginQuiet() {
    state.withLock { s in
      if s.quiets == 0 && s.queuePolled {
        s.quietUntil = MonotonicClock.nanoseconds() + Self.quietLimit
        s.queuePolled = false
      }
      s.quiets += 1
    }
  }

  /// Ends a quiet begun with `beginQuiet`. Events queued meanwhile are read on the loop's next turn.
  package func endQuiet() {
    state.withLock { s in s.quiets = max(0, s.quiets - 1) }
  }

  /// Quiets begun and not ended (for tests).
  package var quietsUnderWay: Int { state.withLock { $0.quiets } }

  /// Whether every inotify event queued until now has reached its handlers: nothing in the kernel's queue and
  /// nothing taken off it and not yet handled. False when that cannot be told. A handler's effects are then
  /// visible to the caller, so what a handler invalidates (LinkFreePaths) can be trusted without waiting: about
  /// 0.4 µs (one `ioctl`), where a wait for the watcher thread is tens.
  package func hasHandledEveryEvent() -> Bool {
    guard startError == nil else { return false }
    // The loop makes `reading` odd before it takes events off the kernel's queue and even once they are all
    // handled; seen even and unchanged around an empty queue, no event was in between.
    let before = reading.load(ordering: .sequentiallyConsistent)
    guard before & 1 == 0, queuedBytes() == 0 else { return false }
    return reading.load(ordering: .sequentiallyConsistent) == before
  }

  /// The bytes of events in the kernel's inotify queue (-1 when that cannot be told).
  private func queuedBytes() -> Int32 { backend?.queuedBytes() ?? -1 }

  /// How long `afterQueuedEvents` bodies wait for the queue to be seen empty before they get a marker.
  static let markerDelay: UInt64 = 5_000_000

  /// Takes what `afterQueuedEvents` got since the last turn, before the queue is next looked at (on the watcher
  /// thread); bodies that waited `markerDelay` get a marker.
  private func takeDrainWaiters(now: UInt64) {
    let bodies = state.withLock { s in
      defer { s.unmarked.removeAll() }
      return s.unmarked
    }
    if !bodies.isEmpty {
      if drainWaiters.isEmpty { drainWaitersSince = now }
      drainWaiters += bodies
    }
    if !drainWaiters.isEmpty && now &- drainWaitersSince >= Self.markerDelay {
      placeMarker(for: drainWaiters)
      drainWaiters = []
    }
  }

  /// Runs the waiting bodies if the kernel's queue is empty; call only when the library holds no event
  /// (`libraryDrained`): then every event queued before they were taken has been handled.
  private func queueSeenEmpty() {
    guard !drainWaiters.isEmpty, queuedBytes() == 0 else { return }
    let bodies = drainWaiters
    drainWaiters = []
    for body in bodies { body() }
  }

  /// One marker for `bodies` (on the watcher thread).
  private func placeMarker(for bodies: [@Sendable () -> Void]) {
    guard let wd = backend?.queueMarker() else {
      for body in bodies { body() }
      return
    }
    markers[wd, default: []] += bodies
  }

  /// Stops delivering events to the handler behind `token` (watch, overflow, tick or readable descriptor).
  package func cancel(_ token: Token) {
    state.withLock { s in
      s.overflowHandlers[token] = nil
      s.tickHandlers[token] = nil
      s.requests.append(.remove(token))
    }
    wake()
  }

  /// Called after the kernel dropped events (queue overflow): the handler must rescan what it cares about.
  package func onOverflow(_ handler: @escaping @Sendable () -> Void) -> Token {
    state.withLock { s in
      defer { s.nextToken += 1 }
      s.overflowHandlers[Token(id: s.nextToken)] = handler
      return Token(id: s.nextToken)
    }
  }

  /// Called about once a second on the watcher thread (liveness checks, pending work).
  package func onTick(_ handler: @escaping @Sendable () -> Void) -> Token {
    defer { wake() }  // a thread with no tick handler waits without a timeout: it must start counting
    return state.withLock { s in
      defer { s.nextToken += 1 }
      s.tickHandlers[Token(id: s.nextToken)] = handler
      return Token(id: s.nextToken)
    }
  }

  /// Test hook: the watcher reads no events for `nanoseconds`, so the kernel queue can overflow.
  package func stall(nanoseconds: UInt64) {
    state.withLock { $0.stallUntil = MonotonicClock.nanoseconds() + nanoseconds }
    wake()
  }

  private func wake() { backend?.wake() }

  private func run(_ backend: InotifyTools) {
    var lastTick = MonotonicClock.nanoseconds()
    while true {
      let (requests, stallUntil, stopping) = state.withLock { s in
        defer { s.requests.removeAll() }
        return (s.requests, s.stallUntil, s.stopping)
      }
      guard !stopping else {
        for request in requests { refuse(request) }
        // No event will come: what waits for the queued ones ends now.
        let unmarked = state.withLock { s in
          defer { s.unmarked.removeAll() }
          return s.unmarked
        }
        for body in drainWaiters + markers.values.flatMap({ $0 }) + unmarked { body() }
        return
      }
      for request in requests { perform(request) }
      let now = MonotonicClock.nanoseconds()
      takeDrainWaiters(now: now)
      if libraryDrained { queueSeenEmpty() }
      if stallUntil > now {
        MonotonicClock.sleep(nanoseconds: min(stallUntil - now, 50_000_000))
        continue
      }
      if now - lastTick >= 1_000_000_000 {
        lastTick = now
        IOFaultInjection.clockWork {
          for handler in state.withLock({ Array($0.tickHandlers.values) }) { handler() }
        }
      }
      // The library is asked only when it may have something (an event it read and has not returned, or a
      // readable queue), and never waits in it: the wait is `poll`, on the queue, the wake-up and the served
      // descriptors at once. `reading` is odd while events taken off the kernel's queue may not be handled yet.
      if libraryDrained && !inotifyReadable {
        waitForInotifyOrReadables(backend)
        continue
      }
      if reading.load(ordering: .relaxed) & 1 == 0 { reading.add(1, ordering: .sequentiallyConsistent) }
      guard let (wd, event) = backend.next() else {
        libraryDrained = true
        inotifyReadable = false
        reading.add(1, ordering: .sequentiallyConsistent)  // every event taken so far has been handled
        queueSeenEmpty()
        waitForInotifyOrReadables(backend)
        continue
      }
      libraryDrained = false
      // Whatever the descriptors received before this event was read is handled before it.
      for readable in readables { readable.handler() }
      if event.mask & Self.ignored != 0, let bodies = markers.removeValue(forKey: wd) {
        for body in bodies { body() }
        continue
      }
      if event.mask & Self.overflow != 0 {
        Self.logger.warning("inotify queue overflowed: rescanning")
        // Markers may have been dropped with the events: what waits for them ends now.
        for bodies in markers.values { for body in bodies { body() } }
        markers.removeAll()
        for body in drainWaiters { body() }
        drainWaiters = []
        for handler in state.withLock({ Array($0.overflowHandlers.values) }) { handler() }
        continue
      }
      if let handlers = handlersByWD[wd] {
        for entry in handlers.values where entry.mask & event.mask != 0 || event.mask & Self.ignored != 0 {
          entry.handler(event)
        }
      }
      if event.mask & Self.ignored != 0 {
        // The kernel dropped this watch (item deleted, or removed by `cancel`).
        handlersByWD[wd] = nil
        pathByWD[wd] = nil
      }
    }
  }

  /// Blocks until the inotify queue, the wake-up or a served descriptor is readable (at most until the next tick,
  /// without a timeout when nothing ticks), and runs the handlers of the readable descriptors. In a quiet, the
  /// inotify queue is left out (until the quiet lapses, at most).
  private func waitForInotifyOrReadables(_ backend: InotifyTools) {
    if polled.isEmpty {
      polled = readables.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
      polled.append(pollfd(fd: backend.wakeUpDescriptor, events: Int16(POLLIN), revents: 0))
      polled.append(pollfd(fd: backend.descriptor, events: Int16(POLLIN), revents: 0))
    }
    for index in polled.indices { polled[index].revents = 0 }
    let now = MonotonicClock.nanoseconds()
    let (quietUntil, ticks) = state.withLock { s -> (UInt64, Bool) in
      guard s.quiets > 0 && s.quietUntil > now else {
        s.queuePolled = true
        return (0, !s.tickHandlers.isEmpty)
      }
      return (s.quietUntil, !s.tickHandlers.isEmpty)
    }
    let quiet = quietUntil > now
    let (wakeUp, queue) = (polled.count - 2, polled.count - 1)
    polled[queue].fd = quiet ? -1 : backend.descriptor  // poll skips negative descriptors
    let timeout = quiet ? Int32((quietUntil - now) / 1_000_000 + 1) : ticks ? 1000 : -1
    guard case .success(let ready) = valueOrErrno({ Glibc.poll(&polled, nfds_t(polled.count), timeout) }), ready > 0
    else { return }
    inotifyReadable = polled[queue].revents != 0
    // The requests it announced are taken at the top of the loop.
    if polled[wakeUp].revents != 0 { backend.consumeWakeUps() }
    for (readable, entry) in zip(readables, polled) where entry.revents != 0 { readable.handler() }
  }

  private func perform(_ request: Request) {
    guard let backend else { return refuse(request) }
    switch request {
    case .addReadable(let fd, let token, let handler):
      readables.append((token, fd, handler))
    case .add(let path, let mask, let token, let handler, let reply):
      // The kernel resolves the path now and answers with the watch of the inode it names now; `IN_MASK_ADD`
      // keeps what others asked of that inode.
      let wd: Int32
      do { wd = try backend.add(path, mask: mask) } catch {
        reply(.failure(error))
        return
      }
      if pathByWD[wd] == nil { pathByWD[wd] = path }
      handlersByWD[wd, default: [:]][token] = (mask, handler)
      wdByToken[token] = wd
      reply(.success(()))
    case .remove(let token):
      readables.removeAll { $0.token == token }
      guard let wd = wdByToken.removeValue(forKey: token) else { return }
      let before = union(of: wd)
      handlersByWD[wd]?[token] = nil
      if handlersByWD[wd]?.isEmpty == true {
        handlersByWD[wd] = nil
        pathByWD[wd] = nil
        backend.remove(wd)
      } else if let path = pathByWD[wd], union(of: wd) != before {
        // Narrow the watch again (say, drop IN_MODIFY when its last handler left).
        _ = try? backend.add(path, mask: union(of: wd), replacing: true)
      }
    }
  }

  private func union(of wd: Int32) -> UInt32 {
    handlersByWD[wd]?.values.reduce(0) { $0 | $1.mask } ?? 0
  }
}
