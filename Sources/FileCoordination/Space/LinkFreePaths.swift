import GroupContainerCore
import Synchronization
import SystemLayer

/// The rule for remembering that no symbolic link is on the way to an item: what a coordinated access would
/// otherwise ask the kernel each time (`ContainerDirectory.hasNoSymbolicLink`, an `openat2` that was 40 % of an
/// empty access). One per coordination space.
///
/// A path is remembered only while inotify proves that nothing changed on its way. The directories holding its
/// components are watched (the container root, then each directory on the way, outermost first, each watch in place
/// before the next directory is looked up) for `IN_CREATE | IN_MOVED_TO`: a name can only come to mean something
/// else — a symlink, another directory — by an entry being made or moved there (a rename exchange reports both
/// names moved). An answer from memory holds only when the watcher has handled every event queued until now
/// (`Watcher.hasHandledEveryEvent`, one `ioctl`): it is then what the kernel would have answered at that moment.
///
/// - An event for a remembered path forgets it; one for a watched directory's name forgets every path (`epoch`) and
///   drops the watches of that directory and of those beneath it: they may watch a directory that is no longer on
///   the way, so they are made again, by path, when next needed. So does `IN_IGNORED` (a watched directory was
///   deleted) and a queue overflow.
/// - A path is put down as being checked (with a ticket of its own) before its watches are looked at, and becomes
///   link-free only if no event touched it, and no directory was dropped, until that check ended: a change racing
///   with the check is never remembered as its result.
/// - Busy directories are not watched. Each event wakes the watcher thread, and the writer pays for the wake-up
///   (13 µs more per coordinated write on tmpfs when the written file's directory was watched). A directory with
///   more than `busyEvents` events in a second is dropped and left unwatched for `busyPause`; an item in it is then
///   remembered through its parent, and its own name is asked each time with one `readlinkat`
///   (`lastComponentIsNoSymbolicLink`, about half the `openat2`).
/// - Without a watcher (no inotify instance left, item 9 of the hardening issue) nothing is remembered and every
///   access asks the kernel, as before. The watches are the process's own instance's: none is added.
///
/// Not covered, as for the rest of the container: the container directory's own path being swapped (its parent is
/// not in the container; the root watch is checked to be the open container directory when placed), and mounts.
final class LinkFreePaths: Sendable {
  private enum State { case checking, linkFree, stale }
  private struct Entry {
    var state: State
    var epoch: UInt64
    /// Which check put it down: another thread's check of the same path must not finish this one's.
    var ticket: UInt64 = 0
  }
  /// A watched directory; `token` is nil while its watch is being placed.
  private struct Watch {
    var id: UInt64
    var token: Watcher.Token?
    /// Events in the current one-second window, and when it began.
    var events = 0
    var windowStart: UInt64 = 0
  }
  private struct Table {
    var entries: [ContainerPath: Entry] = [:]
    var watched: [ContainerPath: Watch] = [:]
    /// Directories found busy, and until when they stay unwatched.
    var busy: [ContainerPath: UInt64] = [:]
    /// Moves on whenever a watched directory is dropped: every entry checked before is then forgotten.
    var epoch: UInt64 = 0
    var nextWatch: UInt64 = 0
    var nextTicket: UInt64 = 0
    var counts = Counts()
  }

  /// How accesses were answered (tests: the memory must be used, or the tests of its invalidation prove nothing).
  struct Counts: Sendable {
    /// From memory alone.
    var remembered = 0
    /// The parent from memory, the item's own name asked (`readlinkat`).
    var parentRemembered = 0
  }

  /// Bounds: past `entryLimit` paths the memory starts again; past `directoryLimit` watched directories, paths in
  /// others are checked each time.
  static let entryLimit = 4096
  static let directoryLimit = 256
  static let busyEvents = 16
  static let busyPause: UInt64 = 10_000_000_000
  static let failurePause: UInt64 = 1_000_000_000
  static let mask = Watcher.create | Watcher.movedTo

  private let table = Mutex(Table())
  /// Moves on (under `table`'s lock) whenever anything remembered may have gone stale: an event handled, a watch
  /// dropped, everything forgotten. An answer from memory stays true while it has not moved and every event queued
  /// since has been handled (`Version.holds(_:)`).
  let version = Version()

  /// The memory's version, an object of its own: the fast path holds it (FastAccess.swift), and this type's watch
  /// handlers hold it weakly, which makes every retain of it a slow one (~30 ns an access).
  final class Version: Sendable {
    fileprivate let value = Atomic<UInt64>(0)

    /// Whether an answer from memory given at `version` still holds, with no lock and no lookup: nothing went stale
    /// since (the version did not move) and every event queued until now has been handled — the same proof as an
    /// answer from memory (the one `ioctl` stays: only the kernel knows its queue; see the type). A handler moves
    /// the version before the watcher counts its events handled, so an event seen handled here has moved it.
    func holds(_ version: UInt64) -> Bool {
      Watcher.shared.hasHandledEveryEvent() && value.load(ordering: .acquiring) == version
    }

    fileprivate func moveOn() { value.add(1, ordering: .releasing) }
  }
  private let containerPath: String
  private let root: ContainerDirectory

  init(containerPath: String, root: ContainerDirectory) {
    self.containerPath = containerPath
    self.root = root
    _ = Watcher.shared.onOverflow { [weak self] in self?.forgetAll() }
  }

  /// Whether no symbolic link is on `path`'s way, its last component included: from memory when nothing changed on
  /// the way since it was last checked, else the kernel's answer, after which the path (or, if its directory is
  /// busy, its parent) is remembered.
  func isLinkFree(_ path: ContainerPath) -> Bool {
    var remembered: UInt64?
    return isLinkFree(path, remembered: &remembered)
  }

  /// `isLinkFree(path)`; when answered from memory, `remembered` is the version that answer holds at, for
  /// `version.holds(_:)`.
  func isLinkFree(_ path: ContainerPath, remembered: inout UInt64?) -> Bool {
    guard !path.isRoot else { return true }
    let root = root
    let settled = Watcher.shared.hasHandledEveryEvent()
    let answer = table.withLock { t -> Answer in
      func known(_ path: ContainerPath) -> Bool {
        settled && t.entries[path].map { $0.state == .linkFree && $0.epoch == t.epoch } == true
      }
      if known(path) {
        t.counts.remembered += 1
        // Read under the lock, with the entry: every event that could have made it stale since moves it on.
        remembered = version.value.load(ordering: .relaxed)
        return .remembered
      }
      guard !t.busy.isEmpty else { return .unknown(busy: false) }
      let parent = path.parent!  // made only here: an allocation
      var busy = false
      if let until = t.busy[parent] {
        if until > MonotonicClock.nanoseconds() { busy = true } else { t.busy[parent] = nil }
      }
      guard busy else { return .unknown(busy: false) }
      guard parent.isRoot || known(parent) else { return .unknown(busy: true) }
      t.counts.parentRemembered += 1
      return .parentRemembered
    }
    let check = { path.withCString { root.hasNoSymbolicLink(cString: $0) } }
    switch answer {
    case .remembered:
      return true
    case .parentRemembered:
      return path.withCString { root.lastComponentIsNoSymbolicLink(cString: $0) } || check()
    case .unknown(let busy):
      guard Watcher.shared.servesDescriptors else { return check() }
      // Remember the item itself, unless its directory may not be watched: then its parent.
      return remember(busy ? path.parent! : path, check: check)
    }
  }

  private enum Answer {
    case remembered, parentRemembered
    case unknown(busy: Bool)
  }

  /// Runs `check` (the kernel's answer for a path that includes `target`) and remembers `target` when it says no
  /// link is on the way — if `target`'s way is watched already; if not, asks for the watches, and `target` is
  /// remembered on a later access.
  private func remember(_ target: ContainerPath, check: () -> Bool) -> Bool {
    guard !target.isRoot else { return check() }
    // Put down first, the watches looked at next: a directory dropped in between is missing, one dropped later
    // moves the epoch on.
    let (epoch, ticket) = table.withLock { t in
      if t.entries.count >= Self.entryLimit { t.entries.removeAll(keepingCapacity: true) }
      t.nextTicket += 1
      t.entries[target] = Entry(state: .checking, epoch: t.epoch, ticket: t.nextTicket)
      return (t.epoch, t.nextTicket)
    }
    guard watchWay(to: target) else {
      table.withLock { t in if t.entries[target]?.ticket == ticket { t.entries[target] = nil } }
      return check()
    }
    let free = check()
    table.withLock { t in
      guard let entry = t.entries[target], entry.state == .checking, entry.ticket == ticket else { return }
      t.entries[target] = free && t.epoch == epoch ? Entry(state: .linkFree, epoch: epoch) : nil
    }
    return free
  }

  /// How accesses were answered so far (tests).
  var counts: Counts { table.withLock { $0.counts } }

  /// Forgets everything and drops every watch: after a queue overflow, or the container was made again
  /// (`recreateAfterRemoval`).
  func forgetAll() {
    let tokens = table.withLock { t in
      version.moveOn()
      defer {
        t.entries.removeAll()
        t.watched.removeAll()
        t.epoch += 1
      }
      return t.watched.values.compactMap(\.token)
    }
    for token in tokens { Watcher.shared.cancel(token) }
  }

  /// Whether every directory holding `path`'s components is watched. If not, asks for the missing watches and
  /// answers false; the watcher thread places them in the order asked, outermost first, so each is in place before
  /// the next directory is looked up. The accessing thread never waits for the watcher thread: it may hold a lock
  /// that a handler there takes.
  private func watchWay(to path: ContainerPath) -> Bool {
    let now = MonotonicClock.nanoseconds()
    var asked: [(ContainerPath, UInt64)] = []
    let ready = table.withLock { t -> Bool in
      var ready = true
      var directory = ContainerPath.root
      for index in 0..<path.depth {
        if index > 0 { directory = directory.appending(path.components[index - 1]) }
        if let watch = t.watched[directory] {
          ready = ready && watch.token != nil
          continue
        }
        if let until = t.busy[directory], until > now { return false }
        guard t.watched.count < Self.directoryLimit else { return false }
        t.nextWatch += 1
        t.watched[directory] = Watch(id: t.nextWatch, token: nil)
        asked.append((directory, t.nextWatch))
        ready = false
      }
      return ready
    }
    for (directory, id) in asked { ask(directory, id: id) }
    return ready
  }

  /// Asks the watcher thread to watch `directory`, put down as watch `id`.
  private func ask(_ directory: ContainerPath, id: UInt64) {
    let absolute = directory.isRoot ? containerPath : containerPath + "/" + directory.string
    // The root's path is followed (the container may be reached through a symlinked parent); below it, a name
    // that is a symlink is not: the watch fails.
    let flags = directory.isRoot ? Watcher.onlyDirectory : Watcher.onlyDirectory | Watcher.dontFollow
    _ = Watcher.shared.watchLater(absolute, mask: Self.mask | flags) { [weak self] event in
      self?.changed(in: directory, event)
    } placed: { [weak self] token, result in
      self?.placed(directory, id: id, token: token, succeeded: (try? result.get()) != nil)
    }
  }

  /// The watch of `directory` is in place, or could not be (on the watcher thread). A failed one takes those
  /// beneath it along: they were asked for after it and must not stay without it.
  private func placed(_ directory: ContainerPath, id: UInt64, token: Watcher.Token, succeeded: Bool) {
    var placed = succeeded
    if placed && directory.isRoot {
      // The watched directory must be the one open (what the checks resolve beneath).
      if let watchedDirectory = try? FileSystem.status(containerPath), let open = try? root.fd.status() {
        placed = watchedDirectory.device == open.device && watchedDirectory.inode == open.inode
      } else {
        placed = false
      }
    }
    let cancelled = table.withLock { t -> [Watcher.Token] in
      guard t.watched[directory]?.id == id else { return [token] }  // dropped meanwhile
      guard placed else {
        // Not asked again for a while: a path into a directory yet to be made would ask on every access.
        t.busy[directory] = MonotonicClock.nanoseconds() + Self.failurePause
        return [token] + drop(directory, in: &t)
      }
      t.watched[directory]?.token = token
      return []
    }
    for token in cancelled { Watcher.shared.cancel(token) }
  }

  /// An event in the watched `directory` (on the watcher thread).
  private func changed(in directory: ContainerPath, _ event: Watcher.Event) {
    let dropped = table.withLock { t -> [Watcher.Token] in
      version.moveOn()  // any event, before its effects (see `version`)
      if event.mask & Watcher.ignored != 0 {  // the directory is gone: its watch with it
        return drop(directory, in: &t)
      }
      guard event.mask & Self.mask != 0 else { return [] }
      let name = directory.appending(event.name)
      t.entries[name]?.state = .stale
      var dropped = t.watched[name] != nil ? drop(name, in: &t) : []
      if var watch = t.watched[directory] {
        let now = MonotonicClock.nanoseconds()
        if now &- watch.windowStart >= 1_000_000_000 { (watch.events, watch.windowStart) = (0, now) }
        watch.events += 1
        t.watched[directory] = watch
        if watch.events > Self.busyEvents {
          t.busy[directory] = now + Self.busyPause
          dropped += drop(directory, in: &t)
        }
      }
      return dropped
    }
    for token in dropped { Watcher.shared.cancel(token) }
  }

  /// Forgets `directory`'s watch and those beneath it, and every entry; returns the watches to cancel.
  private func drop(_ directory: ContainerPath, in t: inout Table) -> [Watcher.Token] {
    version.moveOn()
    t.epoch += 1
    let gone = t.watched.keys.filter { $0 == directory || $0.isDescendant(of: directory) }
    return gone.compactMap { t.watched.removeValue(forKey: $0)?.token }
  }
}
