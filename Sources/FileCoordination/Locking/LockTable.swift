import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// Who holds a lock inside this process: a coordinator instance. Accesses of one owner never block each other
/// (Apple: the same instance never blocks itself); a nested access by another coordinator made with the same
/// presenter borrows the outer access's owner (FileCoordinator.swift, `nestingOwners`).
enum LockOwner: Hashable, Sendable {
  case coordinator(UInt64)
}

/// Who in this process holds one lock, and how: a short list (one owner almost always), cheaper than a dictionary
/// on the path of every access.
struct Holders {
  private var list: [(owner: LockOwner, mode: FlockMode, count: Int)] = []

  var isEmpty: Bool { list.isEmpty }
  var hasExclusive: Bool { list.contains { $0.mode.isExclusive } }

  subscript(owner: LockOwner) -> (mode: FlockMode, count: Int)? {
    get {
      for hold in list where hold.owner == owner { return (hold.mode, hold.count) }
      return nil
    }
    set {
      let index = list.firstIndex { $0.owner == owner }
      switch (index, newValue) {
      case (let index?, let value?): list[index] = (owner, value.mode, value.count)
      case (let index?, nil):  // order does not matter: the last one takes its place (no elements moved)
        list.swapAt(index, list.count - 1)
        list.removeLast()
      case (nil, let value?): list.append((owner, value.mode, value.count))
      case (nil, nil): break
      }
    }
  }
}

extension FlockMode {
  /// Told by its case: `==` on an enum of another module went through its Equatable witness, seven calls a lock.
  fileprivate var isExclusive: Bool {
    if case .exclusive = self { return true }
    return false
  }
}

/// The in-process table on top of flock.
///
/// flock belongs to the open file description, so two threads of one process using one descriptor would both
/// "hold" it. This table keeps one descriptor per lock file and reader/writer counts per owner, and takes the
/// flock itself only on the first hold and drops it on the last release — except shared tree locks, which it
/// keeps *cached* after the last release, for the next access below the same directories (Rule 4a in
/// LockOrder.swift: the generation check, revocation and the linger).
final class LockTable: @unchecked Sendable {  // every field is guarded by `condition`
  /// A class, so an access updates it in place: one dictionary lookup per lock and no copy of `holders`.
  /// Its fields are `@exclusivity(unchecked)`: every access is under the table's lock, and the runtime's checks
  /// (a thread-local access set per read or write) were ~0.3 µs of the empty access's 5.5 µs.
  fileprivate final class Entry {
    @exclusivity(unchecked) var fd: DescriptorBox?
    @exclusivity(unchecked) var osMode: FlockMode?
    @exclusivity(unchecked) var holders = Holders()
    /// A thread is taking the flock for this entry; others wait for it to finish.
    @exclusivity(unchecked) var busy = false
    /// The revocation bucket of the key (`LockRevocation.bucket(of:)`).
    let bucket: Int
    /// The bucket's revocation generation read just before this process took the flock: a cached lock is trusted
    /// only while the generation is still this one (a revoker who found the lock taken bumped it since).
    @exclusivity(unchecked) var generation: UInt64 = 0
    /// When the last holder left a cached lock (monotonic ns); 0 when not cached.
    @exclusivity(unchecked) var idleSince: UInt64 = 0
    /// Still the table's entry of its key: an entry the last plan remembers is used only while it is.
    @exclusivity(unchecked) var inTable = true
    /// The sweep sequence (its `mark`, with the counters' epoch) read before `fd` was opened, or when its file was
    /// last seen linked under our flock (Rule 3b, LockFileSweep.swift).
    @exclusivity(unchecked) var sweepSeen: UInt64 = 0

    /// Holds the flock with no holder in the process: a cached shared tree lock.
    var isCached: Bool { osMode != nil && holders.isEmpty }

    init(bucket: Int) { self.bucket = bucket }
  }

  /// `.coordination/locks`, opened beneath the container once (again after the container was removed: `rebind`):
  /// lock files are created relative to it. Guarded by `condition`.
  @exclusivity(unchecked) private var directory: DescriptorBox
  private let fileMode: mode_t
  private let condition = NSCondition()
  @exclusivity(unchecked) private var entries: [LockOrder.Key: Entry] = [:]
  /// Idle descriptors beyond this many are closed (an idle lock file holds no lock, so closing is safe; a
  /// cached one is dropped with it).
  private let idleDescriptorLimit = 256
  /// The container's revocation words; nil: no caching (every lock is dropped on its last release).
  private let revocation: LockRevocation?
  /// Removing unused lock files (Rule 3b); nil: none are removed, by this process or any other of the container.
  private let fileSweep: LockFileSweep?
  /// A sweep of the lock files runs in this process.
  private let fileSweepRunning = Atomic<Bool>(false)
  /// How long (ns) a cached lock may stay idle before the sweeper drops it (Rule 4a: what a stopped process can
  /// block). Tests make it long, to see what revocation alone does.
  package static let lingerNanoseconds = Atomic<UInt64>(100_000_000)
  /// The sweeper thread runs (it exits when nothing is cached). Guarded by `condition`.
  @exclusivity(unchecked) private var sweeperRunning = false
  /// Cached locks used again without a flock (guarded by `condition`).
  @exclusivity(unchecked) private var hits = 0
  /// Threads waiting on `condition` in `take`: a release wakes them only when there are some (guarded by
  /// `condition`; a broadcast with nobody waiting was a call into the C library on every access).
  @exclusivity(unchecked) private var waiting = 0

  init(
    directory: consuming SystemFD, fileMode: mode_t, revocation: LockRevocation? = nil,
    fileSweep: LockFileSweep? = nil
  ) {
    self.directory = DescriptorBox(directory)
    self.fileMode = fileMode
    self.revocation = revocation
    self.fileSweep = fileSweep
    // Counted as a listener before anything is cached, so no revoker ever skips the wake-up (ChangeSignal.post
    // costs nothing only when no process listens).
    revocation?.signal.listenForever()
    if fileSweep?.needsRepair == true { startFileSweep() }
  }

  /// A one-item plan with its entries as last seen: what `acquire(_:_:owner:isCancelled:)` uses again for the same
  /// item, and what a coordinator's fast path (FastAccess.swift) takes and releases without looking anything up.
  /// An entry is used only while it is still its key's (`inTable`); otherwise the key is looked up again.
  final class RememberedPlan: @unchecked Sendable {  // immutable; the entries are only touched under `condition`
    let path: ContainerPath
    let access: LockOrder.Access
    let requests: [LockOrder.Request]
    fileprivate let entries: [Entry]

    fileprivate init(path: ContainerPath, access: LockOrder.Access, requests: [LockOrder.Request], entries: [Entry]) {
      self.path = path
      self.access = access
      self.requests = requests
      self.entries = entries
    }
  }

  /// The last one-item plan taken here: a process tends to access one item again and again, and the plan (an array
  /// of keys, one per depth) was two allocations of every access, the entries' lookups (hashing each key's path)
  /// 3 % of it. Guarded by `condition`.
  @exclusivity(unchecked) private var lastPlan: RememberedPlan?

  /// A lock `acquire` took, for `release`: its entry itself, so releasing looks nothing up (an entry with a
  /// holder is never dropped from the table).
  struct Hold: @unchecked Sendable {  // the entry is only touched under the table's `condition`
    let request: LockOrder.Request
    fileprivate let entry: Entry
  }

  /// The array of the last access's holds, given back by `release` (an array per access otherwise); its buffer is
  /// filled in place once the last access let go of it (`SpareArray`'s rule, kept under `condition` instead of a
  /// lock of its own).
  @exclusivity(unchecked) private var spareHolds: [Hold] = []

  /// Takes every lock of `plan` (already in lock order) for `owner`; on failure releases what it took.
  func acquire(
    _ plan: [LockOrder.Request], owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> [Hold] {
    // Asked once here, then only before each wait: a lock free at once is taken without asking again.
    if isCancelled() { throw .cancelled }
    condition.lock()
    defer { condition.unlock() }
    return try take(plan, entries: nil, owner: owner, isCancelled: isCancelled)
  }

  /// `acquire(LockOrder.plan(path, access), …)` for one item: the plan and its entries of the last call for the
  /// same item are used again, so a repeated access looks nothing up and makes nothing.
  func acquire(
    _ path: ContainerPath, _ access: LockOrder.Access, owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> [Hold] {
    if isCancelled() { throw .cancelled }
    condition.lock()
    defer { condition.unlock() }
    if let last = lastPlan, last.access == access, last.path == path {
      let taken = try take(last.requests, entries: last.entries, owner: owner, isCancelled: isCancelled)
      // An entry dropped from the table was looked up again: remember the one in use (the fast path takes only
      // entries still in the table, and would otherwise never serve this item again).
      if taken.indices.contains(where: { taken[$0].entry !== last.entries[$0] }) {
        lastPlan = RememberedPlan(path: path, access: access, requests: last.requests, entries: taken.map(\.entry))
      }
      return taken
    }
    let plan = LockOrder.plan(path, access)
    let taken = try take(plan, entries: nil, owner: owner, isCancelled: isCancelled)
    lastPlan = RememberedPlan(path: path, access: access, requests: plan, entries: taken.map(\.entry))
    return taken
  }

  /// The plan the last `acquire` of one item kept, if it was for `path` and `access`.
  func remembered(_ path: ContainerPath, _ access: LockOrder.Access) -> RememberedPlan? {
    condition.lock()
    defer { condition.unlock() }
    guard let last = lastPlan, last.access == access, last.path == path else { return nil }
    return last
  }

  /// Takes every lock of `plan` for `owner` if each can be had at once, under one hold of the table's lock: none
  /// held by a conflicting owner here, none busy, every entry still its key's, and each flock free (`LOCK_NB`).
  /// Otherwise takes nothing and answers false: the caller goes the whole way (`acquire`), which waits.
  func tryAcquire(_ plan: RememberedPlan, owner: LockOwner) -> Bool {
    condition.lock()
    defer { condition.unlock() }
    // Read in place through the buffers: an element copied out of an array was a retain and a release of its path
    // and entry per lock.
    return plan.requests.withUnsafeBufferPointer { requests in
      plan.entries.withUnsafeBufferPointer { entries in
        for index in requests.indices {
          let taken =
            entries[index].inTable
            ? ((try? take(requests[index], known: entries[index], owner: owner, waits: false)) ?? nil) : nil
          if taken == nil {
            var now: UInt64 = 0
            for undo in (0..<index).reversed() { release(requests[undo], entries[undo], owner, now: &now) }
            wakeWaiters()
            return false
          }
        }
        return true
      }
    }
  }

  /// Releases what `tryAcquire(plan, owner:)` took.
  func release(_ plan: RememberedPlan, owner: LockOwner) {
    condition.lock()
    defer {
      wakeWaiters()
      condition.unlock()
    }
    var now: UInt64 = 0
    plan.requests.withUnsafeBufferPointer { requests in
      plan.entries.withUnsafeBufferPointer { entries in
        for index in requests.indices.reversed() { release(requests[index], entries[index], owner, now: &now) }
      }
    }
    trimIdleDescriptors()
  }

  /// Takes every lock of `plan` under one hold of `condition` (held on entry and on return, also when it throws;
  /// waits and flocks let go of it meanwhile); `entries`, when given, are the plan's entries as last seen.
  private func take(
    _ plan: [LockOrder.Request], entries: [Entry]?, owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> [Hold] {
    var taken: [Hold] = []
    swap(&taken, &spareHolds)
    taken.removeAll(keepingCapacity: true)
    taken.reserveCapacity(plan.count)
    do throws(FileCoordinatorError) {
      for index in plan.indices {
        let entry = try take(plan[index], known: entries?[index], owner: owner, isCancelled: isCancelled)!
        taken.append(Hold(request: plan[index], entry: entry))
      }
    } catch {
      releaseTaken(taken, owner: owner)
      wakeWaiters()
      throw error
    }
    return taken
  }

  func release(_ held: [Hold], owner: LockOwner) {
    condition.lock()
    defer {
      wakeWaiters()
      condition.unlock()
    }
    releaseTaken(held, owner: owner)
    spareHolds = held
  }

  /// Called with `condition` held.
  private func releaseTaken(_ held: [Hold], owner: LockOwner) {
    var now: UInt64 = 0
    for taken in held.reversed() { release(taken.request, taken.entry, owner, now: &now) }
    trimIdleDescriptors()
  }

  /// Releases one lock of `owner` (called with `condition` held); `now` is read once per release, when needed.
  private func release(_ request: LockOrder.Request, _ entry: Entry, _ owner: LockOwner, now: inout UInt64) {
    guard var hold = entry.holders[owner] else { return }
    hold.count -= 1
    entry.holders[owner] = hold.count > 0 ? hold : nil
    if entry.holders.isEmpty, entry.osMode != nil {
      // The tick's time, a little early: "pending" then holds a tick longer (no caching, the safe side) and the
      // sweeper drops the lock a tick sooner; the precise clock was up to 0.1 µs of every access on a loaded VM.
      if now == 0 { now = MonotonicClock.coarseNanoseconds() }
      if request.key.kind == .tree, case .shared? = entry.osMode, let revocation,
        revocation.mayCache(entry.bucket, since: entry.generation, now: now)
      {
        // Kept for the next access below this directory (Rule 4a); the sweeper drops it after the linger.
        entry.idleSince = now
        startSweeper()
      } else {
        entry.fd?.fd.unlock()
        entry.osMode = nil
      }
    }
  }

  /// Drops a cached lock (called with `condition` held; the entry has no holder).
  private func drop(_ entry: Entry) {
    entry.fd?.fd.unlock()
    entry.osMode = nil
    entry.idleSince = 0
  }

  /// Sweeper threads started (for tests: one per run of accesses, not one per access).
  package let sweepersStarted = Atomic<Int>(0)

  /// Starts the sweeper unless it runs (called with `condition` held).
  private func startSweeper() {
    guard !sweeperRunning, let revocation else { return }
    sweeperRunning = true
    sweepersStarted.add(1, ordering: .relaxed)
    let thread = Thread { [self] in sweep(revocation) }
    thread.name = "GroupContainer lock cache"
    thread.start()
  }

  /// The sweeper: drops cached locks as soon as a revoker bumps the generation (it sleeps on the generation's
  /// futex) and those idle for `linger`; exits when nothing is cached and no access holds a shared tree lock (which
  /// its release would cache). Exiting while one was held started a thread for every other write: it found the
  /// locks of the next access in use, not cached (a new thread per 2.4 writes on tmpfs, a third of a write's time).
  private func sweep(_ revocation: LockRevocation) {
    let linger = Self.lingerNanoseconds.load(ordering: .relaxed)
    while true {
      let seen = revocation.signal.sequenceValue
      condition.lock()
      let now = MonotonicClock.nanoseconds()
      var next: UInt64?
      var cacheableInUse = false
      for (key, entry) in entries where entry.osMode?.isExclusive == false && key.kind == .tree {
        guard entry.isCached && !entry.busy else {
          cacheableInUse = true
          continue
        }
        if !revocation.mayCache(entry.bucket, since: entry.generation, now: now) || now &- entry.idleSince >= linger {
          drop(entry)
        } else {
          next = min(next ?? .max, entry.idleSince &+ linger &- now)
        }
      }
      if next == nil && cacheableInUse { next = linger }
      if next == nil { sweeperRunning = false }
      condition.unlock()
      guard let next else { return }
      revocation.signal.wait(whileSequenceIs: seen, nanoseconds: next)
    }
  }

  /// Takes one lock (called with `condition` held, which it holds again when it returns or throws); `known` is the
  /// key's entry as last seen. With `waits` false, nil where it would wait or let go of `condition`.
  private func take(
    _ request: LockOrder.Request, known: Entry?, owner: LockOwner, waits: Bool = true,
    isCancelled: @Sendable () -> Bool = { false }
  ) throws(FileCoordinatorError) -> Entry? {
    let key = request.key
    let mode = request.mode
    var first = true
    while true {
      if !first && isCancelled() { throw .cancelled }
      first = false
      let entry: Entry
      if let known, known.inTable {
        entry = known
      } else if let known = entries[key] {
        entry = known
      } else {
        entry = Entry(bucket: LockRevocation.bucket(of: key))
        entries[key] = entry
      }
      if entry.busy {
        guard waits else { return nil }
        waitForChange()
        continue
      }
      if entry.isCached, !entry.busy {
        // Trusted only while no revoker bumped the generation since the flock was taken, and never for an
        // exclusive request (it would be an SH→EX conversion: Rule 2).
        if !mode.isExclusive, let revocation, entry.generation == revocation.generation(entry.bucket) {
          entry.idleSince = 0
          entry.holders[owner] = (mode, 1)
          hits += 1
          return entry
        }
        drop(entry)
      }
      if let held = entry.holders[owner] {
        guard held.mode.isExclusive || !mode.isExclusive else { throw .lockUpgrade(key.path.string) }
        entry.holders[owner] = (held.mode, held.count + 1)
        return entry
      }
      let conflict = mode.isExclusive ? !entry.holders.isEmpty : entry.holders.hasExclusive
      if conflict {
        guard waits else { return nil }
        waitForChange()
        continue
      }
      if let os = entry.osMode, os.isExclusive || !mode.isExclusive {
        entry.holders[owner] = (mode, 1)
        return entry
      }
      // Nobody in this process holds it. Most such locks are free: one non-blocking try with the table's lock held
      // takes it without letting go of that lock and taking it again (two lock operations of every access). The
      // generation is read before the flock, as below.
      if let fd = entry.fd {
        let generation = revocation?.generation(entry.bucket) ?? 0
        if (try? fd.fd.lock(mode, nonBlocking: true)) == true {
          if let fileSweep {
            guard let seen = fileSweep.verify(fd.fd, seen: entry.sweepSeen) else {
              // Its file was removed since (Rule 3b): open the name again.
              fd.fd.unlock()
              entry.fd = nil
              continue
            }
            entry.sweepSeen = seen
          }
          entry.osMode = mode
          entry.generation = generation
          entry.idleSince = 0
          entry.holders[owner] = (mode, 1)
          return entry
        }
      }
      guard waits else { return nil }
      // Taken elsewhere, or not open yet: take the flock outside the table's lock.
      // `busy` keeps the entry in the table (trimming skips it) and everyone else off it until we are back.
      entry.busy = true
      var fd = entry.fd  // read under the lock: `entry` is shared
      var sweepSeen = entry.sweepSeen
      condition.unlock()
      // Read before the flock: a revoker that finds the lock taken bumps the generation after it, so a lock
      // cached from this flock is never mistaken for one taken after the revocation.
      let generation = revocation?.generation(entry.bucket) ?? 0
      // Only tree EX waits behind other processes' cached locks: ask them to drop theirs (Rule 4a).
      let revoke: LockRevocation.Revoker? =
        key.kind == .tree && mode.isExclusive ? revocation.map { LockRevocation.Revoker($0, entry.bucket) } : nil
      // An optional error, not a `Result`: `Result<_, FileCoordinatorError>`'s metadata is made at run time by
      // looking up the error's `Error` conformance, a scan of every conformance record the process has loaded
      // (~90 µs here) in a new process's first access.
      var failure: FileCoordinatorError?
      var removed = false
      do {
        if fd == nil {
          sweepSeen = fileSweep?.mark() ?? 0  // before the open (Rule 3b)
          fd = DescriptorBox(try openLockFile(key))
        }
        let locked = try Self.flock(
          fd!.fd, mode, isCancelled: isCancelled, contended: revoke?.contended, fileSweep: fileSweep)
        if !locked {
          fd = nil  // removed while we waited (not locked: nothing to unlock)
          removed = true
        } else if let fileSweep {
          if let seen = fileSweep.verify(fd!.fd, seen: sweepSeen) {
            sweepSeen = seen
          } else {
            fd!.fd.unlock()
            fd = nil
            removed = true
          }
        }
      } catch {
        failure = error
      }
      condition.lock()
      entry.busy = false
      entry.fd = fd
      if let failure {
        wakeWaiters()
        throw failure
      }
      if removed {
        // Its file was removed since it was opened (Rule 3b): open the name again.
        wakeWaiters()
        continue
      }
      entry.sweepSeen = sweepSeen
      entry.osMode = mode
      entry.generation = generation
      entry.idleSince = 0
      entry.holders[owner] = (mode, 1)
      wakeWaiters()
      return entry
    }
  }

  /// Waits for a release or a finished flock of another thread, 50 ms at most (called with `condition` held).
  private func waitForChange() {
    waiting += 1
    _ = condition.wait(until: Date(timeIntervalSinceNow: 0.05))
    waiting -= 1
  }

  /// Wakes the threads waiting in `take`, if any (called with `condition` held).
  private func wakeWaiters() {
    if waiting > 0 { condition.broadcast() }
  }

  /// Polls with LOCK_NB and a growing pause, so `cancel()` can stop a waiting access (a blocking flock cannot
  /// be interrupted). The pause stays ≤ 1 ms: a released lock is noticed quickly.
  /// `contended` runs after every refused attempt (a tree EX request revokes cached locks there). False: the file
  /// was removed while we waited (`LockFileSweep.isRemovedWhileWaiting`; its remover, stopped, still holds it):
  /// the caller opens the name again.
  private static func flock(
    _ fd: borrowing SystemFD, _ mode: FlockMode, isCancelled: @Sendable () -> Bool, contended: (() -> Void)? = nil,
    fileSweep: LockFileSweep? = nil
  ) throws(FileCoordinatorError) -> Bool {
    var pause: UInt64 = 20_000
    var spins = 0
    while true {
      let got = try FileCoordinatorError.wrap { () throws(FileSystemError) in try fd.lock(mode, nonBlocking: true) }
      if got { return true }
      contended?()
      if isCancelled() { throw .cancelled }
      if fileSweep?.isRemovedWhileWaiting(fd) == true { return false }
      if spins < 10 {
        spins += 1
        CurrentThread.yield()
        continue
      }
      MonotonicClock.sleep(nanoseconds: pause)
      pause = min(pause * 2, 1_000_000)
    }
  }

  /// After the container was removed and made again: lock files are created in the new `locks` directory, and the
  /// idle descriptors of deleted lock files are dropped (a flock on a deleted file excludes no one). Locks held now
  /// stay on their old files until released.
  func rebind(directory fresh: consuming SystemFD) {
    condition.lock()
    defer { condition.unlock() }
    // A thread may be opening a lock file through the old descriptor right now (outside `condition`): its
    // reference keeps it open until it is done.
    directory = DescriptorBox(fresh)
    for (key, entry) in entries where entry.holders.isEmpty && !entry.busy { remove(key, entry) }
  }

  private func openLockFile(_ key: LockOrder.Key) throws(FileCoordinatorError) -> SystemFD {
    let name = key.fileName
    // This reference keeps the directory open while a `rebind` replaces it.
    let directory = condition.withLock { self.directory }
    return try FileCoordinatorError.wrap { () throws(FileSystemError) -> SystemFD in
      // A sweep may remove the file between a refused create and the open of the existing one (Rule 3b): then
      // create it again. Each round means another process made the file and a sweep removed it meanwhile.
      while true {
        do throws(FileSystemError) {
          let fd = try directory.fd.open(name, [.readWrite, .exclusiveCreate], mode: fileMode)
          try fd.setPermissions(fileMode)
          // The path inside is for `groupctl status` (lock files are named by hash).
          try fd.writeAll(Array("\(key.kind == .tree ? "tree" : "item") \(key.path.string)\n".utf8))
          if fileSweep?.noteCreated() == true { startFileSweep() }
          return fd
        } catch {
          guard error.errno == .fileExists else { throw error }
        }
        let fd: SystemFD
        do throws(FileSystemError) {
          fd = try directory.fd.open(name, .readWrite)
        } catch {
          guard error.errno == .noSuchFileOrDirectory else { throw error }
          continue
        }
        // A planted FIFO or device is not ours to lock, nor to delete (another process may hold it already).
        guard (try? fd.status())?.kind == .regular else {
          throw FileSystemError(
            "open lock file of '\(key.path)' (it is not a regular file: remove it)", fd.path, .invalidArgument)
        }
        return fd
      }
    }
  }

  /// Sweeps the lock files in the background (Rule 3b), unless this process does already.
  private func startFileSweep() {
    guard fileSweep != nil, !fileSweepRunning.exchange(true, ordering: .acquiringAndReleasing) else { return }
    let thread = Thread { [self] in
      _ = removeUnusedLockFiles()
      fileSweepRunning.store(false, ordering: .releasing)
    }
    thread.name = "GroupContainer lock files"
    thread.start()
  }

  /// Removes the container's lock files that no process holds (Rule 3b, `LockFileSweep.sweep`); how many. 0 when
  /// another process sweeps now.
  func removeUnusedLockFiles(keepingOpen: Bool = true) -> Int {
    guard let fileSweep else { return 0 }
    // This reference keeps the directory open while a `rebind` replaces it.
    let directory = condition.withLock { self.directory }
    return fileSweep.sweep(directory.fd, keepingOpen: keepingOpen)
  }

  /// Takes an idle entry out of the table and closes its descriptor (called with `condition` held). Marked so: a
  /// plan that remembers it (`lastPlan`) looks the key up again.
  private func remove(_ key: LockOrder.Key, _ entry: Entry) {
    entry.fd = nil  // closes it
    entry.inTable = false
    entries[key] = nil
  }

  /// Called with `condition` held.
  private func trimIdleDescriptors() {
    guard entries.count > idleDescriptorLimit else { return }
    for (key, entry) in entries where entry.holders.isEmpty && !entry.busy {
      remove(key, entry)
      if entries.count <= idleDescriptorLimit / 2 { break }
    }
  }

  /// Closes every idle descriptor (no holder, no cached flock) and lets the table shrink: what a burst of accesses
  /// left open for later ones (`FileCoordinator.closeIdleLockFiles`).
  func closeIdleDescriptors() {
    condition.lock()
    defer { condition.unlock() }
    for (key, entry) in entries where entry.holders.isEmpty && !entry.busy && entry.osMode == nil {
      remove(key, entry)
    }
    if entries.capacity > 2 * entries.count + 16 {
      entries = Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.value) })
    }
  }

  /// What this process holds, for status and tests.
  func held() -> [(path: ContainerPath, kind: LockOrder.Kind, mode: FlockMode)] {
    condition.lock()
    defer { condition.unlock() }
    return entries.compactMap { key, entry in entry.osMode.map { (key.path, key.kind, $0) } }
  }

  /// How many times a cached lock was used again without a flock, for tests.
  var cacheHits: Int { condition.withLock { hits } }

  /// The locks this process keeps cached (held with no access in flight), for tests.
  func cached() -> [(path: ContainerPath, kind: LockOrder.Kind)] {
    condition.lock()
    defer { condition.unlock() }
    return entries.compactMap { key, entry in entry.isCached ? (key.path, key.kind) : nil }
  }
}
