import CInotifyTools
import Foundation
import Glibc
import Logging
import Synchronization
import SystemPackage

/// The process-wide inotify thread.
///
/// libinotifytools keeps global, non-thread-safe state and returns events in static buffers, and it never exposes
/// its descriptor. So exactly one thread ever calls it: this one. Other threads queue requests and wake it by
/// writing to a pipe that it watches (inotify reports IN_MODIFY on pipes; memfds stay silent). Events are copied
/// out before the next library call and routed by watch descriptor to handlers, which run on this thread and
/// must return quickly (hand work to a queue).
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
  }

  private struct State {
    var requests: [Request] = []
    var nextToken: UInt64 = 1
    var overflowHandlers: [Token: @Sendable () -> Void] = [:]
    var tickHandlers: [Token: @Sendable () -> Void] = [:]
    var stallUntil: UInt64 = 0
  }

  private let state = Mutex(State())
  private let wakeWrite: Int32
  private let wakeRead: Int32
  private let startError: FileSystemError?
  private nonisolated(unsafe) var threadID = pthread_t()

  // Owned by the watcher thread only.
  private var watchesByPath: [String: Int32] = [:]
  /// inotify keeps one mask per inode, so a watch asks for the union of its handlers' masks.
  private var handlersByWD: [Int32: [Token: (mask: UInt32, handler: Handler)]] = [:]
  private var pathByWD: [Int32: String] = [:]
  private var wdByToken: [Token: Int32] = [:]

  private init() {
    var fds: [Int32] = [-1, -1]
    var error: FileSystemError?
    // Initialise before the process opens many files: a descriptor ≥ 1024 aborts inside select().
    if Environment.value(Self.simulateNoInstanceVariable) == "1" {
      // Tests: behave as a process whose user has no inotify instance left, without using them all up (the
      // limit is per user: exhausting it would break every other process of the user on this machine).
      error = FileSystemError("inotify_init", "", .tooManyOpenFiles)
    } else if inotifytools_initialize() == 0 {
      error = FileSystemError("inotify_init", "", Errno(rawValue: inotifytools_error()))
    } else if gc_pipe2(&fds, O_CLOEXEC | O_NONBLOCK) != 0 {
      error = FileSystemError("pipe2", "", Errno(rawValue: errno))
    } else if inotifytools_watch_file("/proc/self/fd/\(fds[0])", Int32(Self.modify)) == 0 {
      error = FileSystemError("inotify_add_watch", "wake pipe", Errno(rawValue: inotifytools_error()))
    }
    wakeRead = fds[0]
    wakeWrite = fds[1]
    startError = error
    if let error {
      Self.logger.error("file watching is unavailable: \(error)")
      return
    }
    let wakeWD = inotifytools_wd_from_filename("/proc/self/fd/\(fds[0])")
    let thread = Thread { [unowned self] in
      self.threadID = pthread_self()
      self.run(wakeWD: wakeWD)
    }
    thread.name = "GroupContainer.Watcher"
    thread.start()
  }

  /// Starts the thread now (call early: see the FD_SETSIZE trap) and reports whether watching works.
  package func start() throws(FileSystemError) {
    if let startError { throw startError }
  }

  /// Set to "1" in a process's environment, the watcher fails to start as if the user's inotify instances
  /// were used up (`EMFILE` from `inotify_init`). For tests.
  package static let simulateNoInstanceVariable = "GROUP_CONTAINER_SIMULATE_NO_INOTIFY"

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

  /// Watches `path` (a directory, or a file) and calls `handler` on the watcher thread for each event in `mask`.
  /// Returns once the watch is in place, so no later change is missed.
  package func watch(
    _ path: String, mask: UInt32 = Watcher.changeMask, handler: @escaping Handler
  ) throws(FileSystemError) -> Token {
    try start()
    let token = state.withLock { s in
      defer { s.nextToken += 1 }
      return Token(id: s.nextToken)
    }
    let result = Mutex<Result<Void, FileSystemError>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let request = Request.add(path: path, mask: mask, token: token, handler: handler) { r in
      result.withLock { $0 = r }
      done.signal()
    }
    if pthread_equal(pthread_self(), threadID) != 0 {
      perform(request)
    } else {
      state.withLock { $0.requests.append(request) }
      wake()
      done.wait()
    }
    switch result.withLock({ $0 })! {
    case .success: return token
    case .failure(let e): throw e
    }
  }

  /// Stops delivering events to the handler behind `token` (watch, overflow or tick).
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
    state.withLock { s in
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

  private func wake() {
    var byte: UInt8 = 1
    _ = Glibc.write(wakeWrite, &byte, 1)  // EAGAIN means a wake-up is already pending: fine.
  }

  private func run(wakeWD: Int32) {
    var lastTick = MonotonicClock.nanoseconds()
    while true {
      let (requests, stallUntil) = state.withLock { s in
        defer { s.requests.removeAll() }
        return (s.requests, s.stallUntil)
      }
      for request in requests { perform(request) }
      let now = MonotonicClock.nanoseconds()
      if stallUntil > now {
        MonotonicClock.sleep(nanoseconds: min(stallUntil - now, 50_000_000))
        continue
      }
      if now - lastTick >= 1_000_000_000 {
        lastTick = now
        for handler in state.withLock({ Array($0.tickHandlers.values) }) { handler() }
      }
      // Always ask for one event: asking for more spins and ignores the timeout.
      guard let raw = inotifytools_next_events(1, 1) else { continue }
      let wd = raw.pointee.wd
      let event = Event(
        mask: raw.pointee.mask, cookie: raw.pointee.cookie,
        name: String(cString: gc_inotify_event_name(raw)))
      if wd == wakeWD {
        var buffer = [UInt8](repeating: 0, count: 256)
        while Glibc.read(wakeRead, &buffer, buffer.count) > 0 {}
        continue
      }
      if event.mask & Self.overflow != 0 {
        Self.logger.warning("inotify queue overflowed: rescanning")
        for handler in state.withLock({ Array($0.overflowHandlers.values) }) { handler() }
        continue
      }
      if let handlers = handlersByWD[wd] {
        for entry in handlers.values where entry.mask & event.mask != 0 || event.mask & Self.ignored != 0 {
          entry.handler(event)
        }
      }
      if event.mask & Self.ignored != 0 {
        // The kernel dropped this watch (item deleted). The library keeps answering lookups of the path with
        // this stale wd, so rename its entry: a later watch of the same path then gets its own.
        handlersByWD[wd] = nil
        pathByWD[wd] = nil
        watchesByPath = watchesByPath.filter { $0.value != wd }
        inotifytools_set_filename_by_wd(wd, "\u{1}dropped-watch-\(wd)")
      }
    }
  }

  private func perform(_ request: Request) {
    switch request {
    case .add(let path, let mask, let token, let handler, let reply):
      let existing = watchesByPath[path].flatMap { wd in handlersByWD[wd] != nil ? wd : nil }
      let wanted = (existing.map { union(of: $0) } ?? 0) | mask
      if existing == nil || wanted != union(of: existing!) {
        guard inotifytools_watch_file(path, Int32(bitPattern: wanted)) != 0 else {
          reply(.failure(FileSystemError("inotify_add_watch", path, Errno(rawValue: inotifytools_error()))))
          return
        }
      }
      var wd = existing ?? inotifytools_wd_from_filename(path)
      if wd < 0 { wd = inotifytools_wd_from_filename(path + "/") }
      guard wd >= 0 else {
        reply(.failure(FileSystemError("inotify_add_watch", path, .noSuchFileOrDirectory)))
        return
      }
      watchesByPath[path] = wd
      pathByWD[wd] = path
      handlersByWD[wd, default: [:]][token] = (mask, handler)
      wdByToken[token] = wd
      reply(.success(()))
    case .remove(let token):
      guard let wd = wdByToken.removeValue(forKey: token) else { return }
      let before = union(of: wd)
      handlersByWD[wd]?[token] = nil
      if handlersByWD[wd]?.isEmpty == true {
        handlersByWD[wd] = nil
        pathByWD[wd] = nil
        watchesByPath = watchesByPath.filter { $0.value != wd }
        _ = inotifytools_remove_watch_by_wd(wd)
      } else if let path = pathByWD[wd], union(of: wd) != before {
        // Narrow the watch again (say, drop IN_MODIFY when its last handler left).
        _ = inotifytools_watch_file(path, Int32(bitPattern: union(of: wd)))
      }
    }
  }

  private func union(of wd: Int32) -> UInt32 {
    handlersByWD[wd]?.values.reduce(0) { $0 | $1.mask } ?? 0
  }
}
