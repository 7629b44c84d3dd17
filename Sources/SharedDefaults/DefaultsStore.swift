import Dispatch
import FileCoordination
import Foundation
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// The storage engine of one suite, shared by every `SharedDefaults` of that suite in this process.
///
/// Files in `Library/Preferences/`:
/// - `<suite>.snapshot` — the state the journal starts from: an image (SuiteImageFormat.swift), mapped read-only
///   and looked up lazily (`SuiteValues`); replaced only by atomic replace;
/// - `<suite>.journal` — set/remove records appended since the snapshot (JournalFormat.swift), mapped shared;
/// - `<suite>.lock` — a stable file, mapped: the header (magic, generation, committed journal length, the snapshot's
///   and the export's identities, the journal's allocated size, the compactor's claim), the suite's lock word and
///   its change signal;
/// - `<suite>.plist` — the export other tools read and edit (`plutil`, `plistlib`): a binary plist written from an
///   image (`writeExport`, without the lock), whose base stays linked as `<suite>.snapshot.exported`. Never read as
///   the state: an edit of it is applied as what the tool changed (its difference from that base), so a tool's
///   stale read-modify-write cannot undo committed writes.
///
/// **Write**: lock → copy the record into the mapped journal at the committed length → publish the new length in
/// the header (the commit point) → unlock → signal listeners. A set does not catch up first: it comes after
/// whatever others appended, so it is applied at once and the records it jumped over are applied later (`catchUp`
/// skips those it supersedes), which keeps writers from decoding each other's records on every set. No system call
/// when the lock is free and the journal has room: this is what makes a set cheaper than even one flock pair (see
/// `SharedMemoryLock`). A writer killed before the commit leaves bytes past the committed length that nobody reads
/// and the next writer overwrites; the pages live in the page cache, so a committed record survives the death of
/// its writer.
/// **Read**: two atomic loads of the mapped header; when they match what this process applied, no system call.
/// Otherwise apply only the new records (or map the snapshot and replay the journal past it) without the lock, as
/// a seqlock reader (`catchUpWithoutLock`); only a repair takes the lock. Lock order: `exclusively`.
/// **Compaction** (journal twice the image past it, at least 1 MiB): the writer that crosses the threshold freezes
/// its changes and builds the next image in the background without the lock (`startCompaction`,
/// `finishCompaction`), then installs it with the lock (a rename and `snapshotAt`: where the image stands in the
/// journal) — nobody else notices, their journal goes on. Idle for 5 s, and `synchronize()`, compact with the lock
/// and then write the export. Past max(8 MiB, 4× the image) a compaction also empties the journal: bump the
/// generation, then reset the committed length (every process reloads; `compact` gives the order and why). A
/// process far behind reads the snapshot instead of the journal when that is cheaper (`reloadIsCheaper`). The
/// journal file is never shrunk (others map it: see SharedFileMapping).
/// **Recovery** (under the lock): an export that is not what the header recorded was edited by an outside tool
/// and its difference is committed; a snapshot that is not the recorded one was written by a compaction that died
/// before recording it, and is complete: it is read with the journal replayed over it (replaying records the
/// snapshot already holds changes nothing). A snapshot that is not a readable image is moved aside to
/// `<suite>.snapshot.corrupt-<time>` and rewritten from the last good state (or the export); a corrupt journal is
/// moved aside the same way after applying its good prefix. A file over a limit is refused, never treated as
/// corrupt.
final class DefaultsStore: @unchecked Sendable {  // mutable state is in `state` (a Mutex); files are fixed
  static let logger = Logger(label: "GroupContainer.SharedDefaults")
  /// Lock-free reads that found committed bytes which were not records (tests check it stays 0: a writer that
  /// published the committed length before copying its record would make it grow).
  static let committedButUnreadable = Atomic<Int>(0)
  /// Snapshots this process read and parsed (tests check that another process's compaction that kept the journal
  /// costs this one none).
  static let snapshotLoads = Atomic<Int>(0)
  /// Background compactions this process installed (tests: which process compacted).
  static let compactionsInstalled = Atomic<Int>(0)
  /// Own writes appended behind others' and left for the next read to apply (tests: that path ran).
  static let ownWritesLeftForTheNextRead = Atomic<Int>(0)
  /// The open stores, by suite path: weak, so a suite no `SharedDefaults` uses any more is released (its mappings,
  /// descriptors, watch and registrations), and a process may open any number of suites one after another.
  private static let stores = Mutex<[String: WeakStore]>([:])
  private struct WeakStore { weak var store: DefaultsStore? }

  private enum Slot {
    static let magic = 0, generation = 1, committed = 2, snapshotInode = 3, snapshotSize = 4, snapshotTime = 5
    /// Set by a plain compaction: the generation and committed length it folded into the snapshot. A reader
    /// that had applied exactly that much already holds the snapshot's contents and need not read it.
    static let foldedGeneration = 6, foldedLength = 7
    /// The lock word (SharedMemoryLock); bytes of the journal file allocated so far; the change signal.
    static let lock = 8, journalCapacity = 9, changeSequence = 10, listeners = 11
    /// The export's identity (`<suite>.plist`, 0 when none was written with the current snapshot).
    static let exportInode = 12, exportSize = 13, exportTime = 14
    /// Non-zero while the suite is over `snapshotLimits` (a compaction refused to write it): sets fail, removes work.
    static let overLimit = 15
    /// The inode of the journal every process must map (a removed journal is noticed and followed).
    static let journalInode = 16
    /// What the last compaction read to write the snapshot (`checkLimits`' estimate, in bytes): the compaction
    /// threshold follows it, not the snapshot's size, which dedup makes small for many identical values.
    static let compactionInput = 17
    /// Where the snapshot stands in the journal, for a compaction that kept the journal: the generation's low 32
    /// bits and the journal length the snapshot holds, in one word (one store, one load). Whoever loads the snapshot
    /// replays the journal from there; a word of another generation means from 0.
    static let snapshotAt = 18
    /// The generation the export was written in: replaying that generation's journal over the export gives the
    /// state (`recoverState`, when the snapshot is lost).
    static let exportGeneration = 19
    /// The process compacting in the background (its pid; 0: none) and since when (`MonotonicClock`): the others
    /// leave the compaction to it, for `compactionClaim` at most (a stopped or dead compactor is then replaced).
    static let compactor = 20, compactorSince = 21
    /// Listeners asleep on the change signal: a commit makes the wake-up system call only when one is.
    static let sleepers = 22
    /// A rewind in the background (`moveTail`): the journal range it moves to the start, and the generation it
    /// empties. `rewindTo` is non-zero while the bytes move: lock-free readers do not trust the journal then, and
    /// the next lock holder finishes a move whose process died during it.
    static let rewindFrom = 23, rewindTo = 24, rewindGeneration = 25
    /// The identity of the last tool's file at the export's name that was judged (`judgeExportAtName`): applied or
    /// kept aside once, never again.
    static let judgedInode = 26, judgedSize = 27, judgedTime = 28
  }
  private static let magic: UInt64 = 0x3454_4c46_4544_4347  // "GCDEFLT4"
  /// 0.1.0's header: the plist was the snapshot. Migrated in place (`initializeHeaderLocked`).
  private static let legacyMagic: UInt64 = 0x3254_4c46_4544_4347  // "GCDEFLT2"
  /// Address space reserved for the journal mapping: the largest journal (sets past it fail with a clear error).
  static let journalReservation = 256 << 20
  static let compactionThreshold = 1 << 20
  /// The journal's length past which a compaction also empties it (a new generation: every process reloads).
  static let rewindThreshold = 8 << 20
  static let idleCompaction: UInt64 = 5_000_000_000
  /// One set of limits for writing and reading the snapshot and the export: a suite a compaction wrote is always
  /// one the next process can read (a million keys are two million values). Writing past them is refused.
  static let snapshotLimits = PropertyListLimits(maxBytes: 512 << 20, maxObjects: 16_000_000)

  let suite: String
  let directory: String
  let plistPath: String
  /// The suite's directory and snapshot relative to `root`: every file of the suite is opened, created, checked
  /// and renamed beneath the container's descriptor, never by a path string (a directory on the way swapped for
  /// a symlink to outside makes the call fail, never land outside).
  private static let preferences = "Library/Preferences"
  /// The export, and the snapshot (paths relative to the container).
  private let plistItem: String
  private let snapshotItem: String
  /// The image the export was written from (a hard link to a snapshot that was current then).
  private let exportedItem: String
  private let root: ContainerDirectory
  /// For error messages: the container's path.
  private let containerPath: String
  let journalPath: String
  private let fileMode: mode_t
  private let header: MappedCounters
  /// flock'ed only to initialize the header, whose lock word cannot guard its own initialization.
  private let lockFD: SystemFD
  /// The container may only be read here: writes fail with `EROFS`, nothing runs in the background, reads take the
  /// lock-free path only (the header and journal are private, read-only copies: a store would change nothing).
  let readOnly: Bool
  private let lock: SharedMemoryLock
  private let signal: ChangeSignal
  private let journal: SharedFileMapping
  private let deliveries: DispatchQueue
  private let background: DispatchQueue
  /// Edits written into a replaced export, still read again in the background (`applyReplacedEditLater`): the
  /// replaced file is reachable only through this process's descriptor, so `synchronize()` waits for them before
  /// the process may exit.
  private let replacedEdits = DispatchGroup()
  /// Compactions this process runs in the background (`startCompaction`): `synchronize()` and a process about to
  /// exit wait for them (`waitForBackgroundWork`).
  private let compactions = DispatchGroup()

  struct Observer {
    var keys: Set<String>?
    var deliver: @Sendable (DefaultsChange) -> Void
  }

  private struct State {
    var values = SuiteValues(image: nil)
    var registered: [String: PropertyListValue] = [:]
    var generation: UInt64 = .max
    /// `values` holds the journal up to here (plus `pendingOwn`).
    var length = 0
    /// Own records appended past `length` without catching up first (their commit's start and end offsets), by
    /// key: already in `values`, and newer than any record before them in the journal. Kept only while this
    /// process has observers (they hear its own writes at once); otherwise see `ownWritesUnapplied`.
    var pendingOwn: [String: (start: Int, end: Int)] = [:]
    /// Own records were appended past `length` and left out of `values`: the next read catches up through them,
    /// in commit order, and waits for the lock rather than answer without them.
    var ownWritesUnapplied = false
    var observers: [UInt64: Observer] = [:]
    var nextObserver: UInt64 = 0
    var lastWrite: UInt64 = 0
    var idleCheckScheduled = false
    /// The journal up to here (in that generation, past `length`) was scanned by `catchUpForObservers` and changes
    /// no observed key: not applied yet, and not scanned again.
    var scanned = (generation: UInt64.max, to: 0)

    /// True when no idle check is scheduled yet (the caller schedules one).
    mutating func markIdleCheck() -> Bool {
      defer { idleCheckScheduled = true }
      return !idleCheckScheduled
    }
  }
  private let state = Mutex(State())
  /// Read by the watcher thread, which must never wait for `state` (a writer may hold it while it waits for flock).
  private let observerCount = Atomic<Int>(0)
  /// A repair is queued on `background` (reads never wait for it).
  private let repairPending = Atomic<Bool>(false)
  /// Serializes this process's threads before the suite's lock (which names a process, not a thread).
  private let writerGate = Mutex<Int>(0)
  /// The inode of the journal file this process maps.
  private let journalInode = Atomic<UInt64>(0)
  private let listener = Mutex<ChangeSignal.Listener?>(nil)
  /// SIGBUS faults of the mappings already dealt with (a new one means a file was truncated under us).
  private let seenHeaderFaults = Atomic<UInt32>(0)
  private let seenJournalFaults = Atomic<UInt32>(0)
  /// The lock file was truncated and set up again: the committed length is lost, so the journal cannot be trusted
  /// and this process's state (the last good one it knows) becomes the snapshot.
  private let headerLost = Atomic<Bool>(false)

  /// Why catching up needs the exclusive lock.
  private enum Repair: Error {
    /// The named file of the suite (the snapshot or the export) does not parse.
    case corruptSnapshot(String, String)
    case corruptJournal(String)
    /// A file is over `snapshotLimits` (no repair: it is valid, only too large; the operation fails with this).
    case overLimit(SharedDefaultsError)
    /// The suite's directory cannot be reached beneath the container (no repair: the operation fails with this).
    case unreachable(SharedDefaultsError)
  }

  static func open(suite: String, container: GroupContainer) throws(SharedDefaultsError) -> DefaultsStore {
    let directory = container.preferencesURL.path
    let key = directory + "/" + suite
    if let store = stores.withLock({ $0[key]?.store }) { return store }
    let store = try DefaultsStore(suite: suite, directory: directory, container: container)
    let (chosen, fresh) = stores.withLock { stores -> (DefaultsStore, Bool) in
      if let existing = stores[key]?.store { return (existing, false) }
      if stores.count >= 64 { stores = stores.filter { $0.value.store != nil } }
      stores[key] = WeakStore(store: store)
      store.startWatching()
      return (store, true)
    }
    if fresh {
      let registration = MemoryPressure.shared.onMemoryWarning(
        name: "shared defaults '\(suite)'", container: container
      ) { [weak store] _ in store?.dropValuesIfUnused() ?? 0 }
      store.registrations.withLock { $0.memory = registration }
      store.judgePendingEdit()
    }
    return chosen
  }

  /// A tool's file at the export's name, or written into a replaced export, that no process judged yet is judged
  /// before this process's first read when the suite's lock is free: a process started after a tool's edit reads it
  /// (running ones hear of it through inotify). With the lock held elsewhere it is judged in the background.
  private func judgePendingEdit() {
    guard !readOnly else { return }
    let kept = hasKeptExports()
    guard kept || (try? exportState()) == .edited else { return }
    do {
      // Never waits for another process (a reader must not): with the lock taken, the background check judges it.
      let judged = try writerGate.withLock { _ throws(SharedDefaultsError) -> Void? in
        try withLockIfFree { () throws(SharedDefaultsError) -> Void in
          try state.withLock { s throws(SharedDefaultsError) -> Void in
            try catchUpExclusively(&s)
            if kept, let dir = try? root.openDirectory(Self.preferences) {
              defer { dir.close() }
              try applyKeptExports(in: dir, &s)
            }
            if (try? exportState()) == .edited { _ = try judgeExportAtName(&s, durable: false) }
          }
        }
      }
      if judged == nil { scheduleExportCheck() }
    } catch {
      Self.logger.error("suite '\(suite)': could not apply the outside change: \(error)")
    }
  }

  /// The store of a suite that exists (its lock file or its snapshot plist is in `Library/Preferences`), or nil:
  /// a suite name that was never written (a typo) creates nothing. Checked beneath the container's descriptor.
  /// A suite removed between the check and the open is made again: it existed, so that is no typo's doing.
  static func openExisting(suite: String, container: GroupContainer) throws(SharedDefaultsError) -> DefaultsStore? {
    if let store = stores.withLock({ $0[container.preferencesURL.path + "/" + suite]?.store }) { return store }
    let root: ContainerDirectory
    do { root = try container.directory() } catch { throw .container(error) }
    for name in ["\(suite).lock", "\(suite).plist"] {
      let item = preferences + "/" + name
      if try beneath(item, in: container.path, { () throws(FileSystemError) in try root.status(item) }) != nil {
        return try open(suite: suite, container: container)
      }
    }
    return nil
  }

  /// On a memory warning: a suite not in use (no observers, no write for `idleCompaction`, nothing of its own
  /// pending, no compaction under way) drops its values — the changes and decoded values it holds, and its mapping
  /// of the image — which the next access reads again from the snapshot and journal (a reload, as after another
  /// process's compaction). Registered defaults stay: nothing could read them again. Returns about how many bytes
  /// it gave back (the image's mapped bytes counted whole).
  func dropValuesIfUnused() -> Int {
    state.withLock { s in
      guard s.observers.isEmpty, s.pendingOwn.isEmpty, s.generation != .max, s.values.frozenToken == 0,
        MonotonicClock.nanoseconds() &- s.lastWrite >= Self.idleCompaction
      else { return 0 }
      let bytes = s.values.approximateBytes + (s.values.image?.bytes.count ?? 0)
      s.values = SuiteValues(image: nil)
      s.generation = .max  // the next access reloads
      s.length = 0
      return bytes
    }
  }

  private init(suite: String, directory: String, container: GroupContainer) throws(SharedDefaultsError) {
    let fileMode = container.sharing.fileMode
    self.suite = suite
    self.directory = directory
    self.plistPath = directory + "/\(suite).plist"
    self.plistItem = Self.preferences + "/\(suite).plist"
    self.snapshotItem = Self.preferences + "/\(suite).snapshot"
    self.exportedItem = Self.preferences + "/\(suite).snapshot.exported"
    do { root = try container.directory() } catch { throw .container(error) }
    self.containerPath = container.path
    self.journalPath = directory + "/\(suite).journal"
    self.fileMode = fileMode
    // The lock file and the journal stay open (mapped) for the life of the store: opened once, beneath the
    // container's descriptor, from one descriptor of the directory.
    let root = root
    let files = try Self.beneath(Self.preferences, in: container.path) { () throws(FileSystemError) in
      try root.openDirectory(Self.preferences)
    }
    defer { files.close() }
    let lockName = "\(suite).lock"
    // A container this process may only read (a read-only file system, or no write permission): its files are
    // opened read-only and mapped privately, and only the lock-free reading path runs (`readOnly`).
    var readOnly = false
    header = try Self.beneath(Self.preferences + "/" + lockName, in: container.path) { () throws(FileSystemError) in
      do throws(FileSystemError) {
        return try MappedCounters(fd: files.openOrCreate(lockName, mode: fileMode, size: Int64(MappedCounters.fileSize)))
      } catch where error.errno == .readOnlyFileSystem || error.errno == .permissionDenied {
        readOnly = true
        return try MappedCounters(fd: files.open(lockName, .readOnly), readOnly: true)
      }
    }
    self.readOnly = readOnly
    lockFD = try SharedDefaultsError.wrap { () throws(FileSystemError) in
      try files.open(lockName, readOnly ? .readOnly : .readWrite)
    }
    lock = SharedMemoryLock(header, index: Slot.lock) { [container] pid, start in
      container.processIsAlive(pid: pid, startTimeLow32: start)
    }
    signal = ChangeSignal(header, sequence: Slot.changeSequence, listeners: Slot.listeners, sleepers: Slot.sleepers)
    do {
      journal = try SharedDefaultsError.wrap { () throws(FileSystemError) in
        guard readOnly else {
          return try SharedFileMapping(
            name: "\(suite).journal", in: files, mode: fileMode, reservation: Self.journalReservation)
        }
        let fd = try files.open("\(suite).journal", .readOnly)
        do throws(FileSystemError) {
          return try SharedFileMapping(fd: fd, reservation: Self.journalReservation, privateCopy: true)
        } catch {
          fd.close()
          throw error
        }
      }
    } catch {
      lockFD.close()
      throw error
    }
    deliveries = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).deliveries")
    background = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).background")
    journalInode.store((try? journal.fileStatus().inode) ?? 0, ordering: .relaxed)
    if readOnly {
      // Nothing here may be initialized or migrated: only a suite in the current format is read.
      guard header.load(Slot.magic) == Self.magic else {
        lockFD.close()
        throw .system(FileSystemError("open", directory + "/" + lockName, .readOnlyFileSystem))
      }
      return
    }
    if header.load(Slot.magic) != Self.magic { try initializeHeaderLocked() }
    if header.load(Slot.journalInode) == 0 { header.store(Slot.journalInode, journalInode.load(ordering: .relaxed)) }
  }

  /// Released with the store.
  private let registrations = Mutex<(watch: Watcher.Token?, memory: MemoryWarningRegistration?)>((nil, nil))

  deinit {
    let (watch, memory) = registrations.withLock { $0 }
    if let watch { Watcher.shared.cancel(watch) }
    memory?.cancel()
    lockFD.close()
  }

  // MARK: Reading

  /// The current value: from memory when the header says nothing changed (no system call).
  func value(forKey key: String) -> PropertyListValue? {
    readCurrent { s in s.values[key] ?? s.registered[key] }
  }

  func snapshot(includingRegistered: Bool) -> [String: PropertyListValue] {
    readCurrent { s in
      let values = (try? s.values.dictionary()) ?? [:]
      return includingRegistered ? s.registered.merging(values) { $1 } : values
    }
  }

  /// Runs `read` on the current state. Waits for the suite's lock only when this process never loaded the suite
  /// and it cannot be read without the lock (damaged files, a compaction that did not finish) — and then without
  /// holding `state`.
  private func readCurrent<T: Sendable>(_ read: (State) -> T) -> T {
    if let done = state.withLock({ s -> T? in
      guard refreshWithoutWaiting(&s) || readOnly else { return nil }
      let result = read(s)
      if s.values.damage != nil { scheduleRepair() }  // the image did not read: this read answered without it
      return result
    }) {
      return done
    }
    do { try exclusively { s throws(SharedDefaultsError) in try catchUpExclusively(&s) } } catch {
      Self.logger.error("suite '\(suite)': could not recover: \(error)")
    }
    return state.withLock { s in read(s) }
  }

  func register(_ defaults: [String: PropertyListValue]) {
    state.withLock { s in s.registered.merge(defaults) { $1 } }
  }

  /// Brings `s` up to date without waiting for another process: what a read needs can be read without the
  /// suite's lock (`catchUpWithoutLock`). When that is not possible (a repair is needed), the repair is left to the
  /// background and `s` stays the last good state — unless it was never loaded: then returns false.
  private func refreshWithoutWaiting(_ s: inout State) -> Bool {
    guard header.load(Slot.generation) != s.generation || header.load(Slot.committed) != UInt64(s.length) else {
      return true
    }
    for _ in 0..<3 where catchUpWithoutLock(&s) { return true }
    // Never answer without this process's own writes: catch up under the lock instead.
    guard s.generation != .max, !s.ownWritesUnapplied else { return false }
    scheduleRepair()
    return true
  }

  /// Catches up under the lock in the background, repairing what needs it (reads never wait for that).
  private func scheduleRepair() {
    guard !readOnly, !repairPending.exchange(true, ordering: .acquiringAndReleasing) else { return }
    background.async { [self] in
      repairPending.store(false, ordering: .releasing)
      do { try exclusively { s throws(SharedDefaultsError) in try catchUpExclusively(&s) } } catch {
        Self.logger.error("suite '\(suite)': could not recover: \(error)")
      }
    }
  }

  // MARK: Writing

  /// Appends `records` as one commit; returns after they are visible to every process.
  func write(_ records: [JournalFormat.Record]) throws(SharedDefaultsError) {
    try refuseIfReadOnly()
    var bytes: [UInt8] = []
    for record in records { try JournalFormat.encode(record, into: &bytes) }
    let firstWriteSinceIdle = try exclusively { s throws(SharedDefaultsError) -> Bool in
      if needsCatchUpBeforeAppending(generation: s.generation, length: s.length), !adoptSnapshotOnly(&s) {
        try catchUpExclusively(&s)
      }
      try append(bytes, records, &s)
      return s.markIdleCheck()
    }
    if firstWriteSinceIdle { scheduleIdleCompaction() }
  }

  /// Read-modify-write under the exclusive lock: no other process can write in between.
  func update(
    _ key: String, pid: Int32, _ transform: (PropertyListValue?) throws -> PropertyListValue?
  ) throws -> PropertyListValue? {
    try transaction { values, registered in
      let new = try transform(values[key] ?? registered[key])
      return ([JournalFormat.Record(key: key, operation: new.map { .set($0) } ?? .remove, pid: pid)], new)
    }
  }

  /// The general read-modify-write: `body` gets the current values (and the registered defaults) under the
  /// exclusive lock and returns the records to append as one commit (all visible at once, or none).
  func transaction<T: Sendable>(
    _ body: (_ values: SuiteValues, _ registered: [String: PropertyListValue]) throws -> (
      records: [JournalFormat.Record], result: T
    )
  ) throws -> T {
    try refuseIfReadOnly()
    let result = try exclusively { s throws -> T in
      try catchUpExclusively(&s)
      let (records, result) = try body(s.values, s.registered)
      guard !records.isEmpty else { return result }
      var bytes: [UInt8] = []
      for record in records { try JournalFormat.encode(record, into: &bytes) }
      try append(bytes, records, &s)
      return result
    }
    if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
    return result
  }

  /// Makes the snapshot current and durable (survives power loss). `emptyingJournal` (tests) forces the
  /// compaction that starts a new generation, which otherwise waits for the journal to grow.
  ///
  /// The image is built as a background compaction builds it — from the recorded snapshot and the journal up to
  /// now, without the lock (a set waited 272 ms behind a `synchronize()` of 400,000 keys that built it with the
  /// lock) — then written and synced, and installed with the lock. Overtaken by another compaction, it is built
  /// again once, then with the lock. An export edited by another tool, and `emptyingJournal`, take the lock for the
  /// whole compaction, as before.
  func synchronize(emptyingJournal: Bool = false) throws(SharedDefaultsError) {
    try refuseIfReadOnly()
    waitForBackgroundWork()
    for attempt in 0..<3 {
      let work = try exclusively { s throws(SharedDefaultsError) -> Compaction? in
        if attempt == 2 || emptyingJournal || (try? exportState()) == .edited {
          try catchUpExclusively(&s)
          let rewind = emptyingJournal || s.length > compactionThresholds().rewind
          try compact(&s, durable: true, handOver: true, rewind: rewind)
          return nil
        }
        let generation = header.load(Slot.generation)
        let committed = Int(header.load(Slot.committed))
        return Compaction(
          token: 0, image: nil, frozen: [:], generation: generation,
          start: snapshotStart(generation: generation, committed: committed), length: committed,
          snapshot: recordedSnapshot())
      }
      guard let work, !finishCompaction(work, durable: true) else { break }
    }
    try writeExport(durable: true)
  }

  /// Writing to a suite of a container this process may only read.
  private func refuseIfReadOnly() throws(SharedDefaultsError) {
    guard readOnly else { return }
    throw .system(FileSystemError("write", journalPath, .readOnlyFileSystem))
  }

  /// Whether the journal changed in a way only a full catch-up handles (a compaction, a repair, damage).
  private func needsCatchUpBeforeAppending(generation: UInt64, length: Int) -> Bool {
    headerLost.load(ordering: .relaxed) || journal.faultCount != seenJournalFaults.load(ordering: .relaxed)
      || header.load(Slot.generation) != generation || Int(header.load(Slot.committed)) < length
  }

  /// Before a set in a new generation (another process emptied the journal), a process without observers takes
  /// the snapshot as its state — mapped, O(1) — and leaves the journal past it to its next read: a full catch-up
  /// here would cost every writer, under the lock, the records appended while the rewind's image was built. False
  /// when that is not possible (observers, which need the difference; damage; a snapshot not yet recorded).
  private func adoptSnapshotOnly(_ s: inout State) -> Bool {
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    guard s.observers.isEmpty, s.generation != .max, generation != s.generation, s.values.frozenToken == 0,
      !headerLost.load(ordering: .relaxed), journal.faultCount == seenJournalFaults.load(ordering: .relaxed),
      header.load(Slot.rewindTo) == 0, let image = try? loadImage(), isRecordedSnapshot(image.status)
    else { return false }
    replaceValues(with: SuiteValues(image: image), in: &s)
    s.generation = generation
    s.length = snapshotStart(generation: generation, committed: committed)
    s.pendingOwn = [:]
    s.ownWritesUnapplied = true  // whatever it wrote in the last generation is in the snapshot or past `length`
    return true
  }

  /// Called with the lock held, in the current generation (`needsCatchUpBeforeAppending` is false).
  private func append(
    _ bytes: [UInt8], _ records: [JournalFormat.Record], _ s: inout State, mayCompact: Bool = true
  ) throws(SharedDefaultsError) {
    if header.load(Slot.overLimit) != 0, records.contains(where: { $0.operation != .remove }) {
      throw .suiteTooLarge(directory + "/\(suite).snapshot", "a compaction found it over the limits")
    }
    var offset = 0
    for attempt in 0..<2 {
      offset = Int(header.load(Slot.committed))
      try reserveJournal(upTo: offset + bytes.count)
      let faults = journal.faultCount
      bytes.withUnsafeBytes { (journal.base + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
      if journal.faultCount == faults { break }
      // The file was truncated under us: the bytes went to a zero page. Repair, then write them again (once).
      guard attempt == 0 else { throw .system(FileSystemError("write", journalPath, .ioError)) }
      try repairAndCatchUp(&s, .corruptJournal("the journal file was truncated by another program"))
    }
    let end = offset + bytes.count
    header.store(Slot.committed, UInt64(end))  // the commit point
    if offset == s.length {
      s.length = end
      apply(records, to: &s)
    } else if s.observers.isEmpty {
      // Others wrote since this process caught up. Holding this write in memory now (pendingOwn) makes a process
      // that only writes keep every key it ever wrote, and 4 writers growing a suite spent half their time growing
      // those tables: the next read applies it with the others' records instead, from the journal.
      s.ownWritesUnapplied = true
      Self.ownWritesLeftForTheNextRead.add(1, ordering: .relaxed)
    } else {
      for record in records { s.pendingOwn[record.key] = (offset, end) }
      apply(records, to: &s)
    }
    s.lastWrite = MonotonicClock.nanoseconds()
    let thresholds = compactionThresholds()
    let start = snapshotStart(generation: s.generation, committed: end)
    // Also by the number of changes held: the table grows by doubling, and growing a large one stalls a set.
    let manyChanges = s.values.changeCount > max(Self.changesBeforeCompaction, (s.values.image?.count ?? 0) / 4)
    guard mayCompact, end - start > thresholds.snapshot || end > thresholds.rewind || manyChanges else { return }
    // Most of the time a compaction is under way already (here or in another process): nothing to do. Past the
    // rewind threshold it also empties the journal (`finishCompaction`); only when background compactions did not
    // manage to — writes outpacing them (what was appended during a build must be no longer than what it holds),
    // or a stopped compactor holding its claim — is the journal emptied here, at four times the threshold (at
    // twice it, 4 writers' 16 MB benchmark runs reached it, and its O(suite) under the lock showed).
    let lastResort = end > min(journal.reservation / 4 * 3, 4 * thresholds.rewind)
    guard lastResort || (s.values.frozenToken == 0 && compactionClaimIsFree()) else { return }
    // The write is committed whatever happens now: a compaction that fails (full disk) is retried by the next one.
    do {
      if lastResort {
        try catchUpExclusively(&s)
        try compact(&s, durable: false, handOver: true, rewind: true)
      } else {
        startCompaction(&s)  // no catching up here: that is O(what others wrote), done in the background
      }
    } catch {
      Self.logger.warning("suite '\(suite)': compaction failed, the journal keeps growing: \(error)")
    }
  }

  // MARK: Compaction in the background

  /// Changes held over the image past which a set starts a compaction, whatever the journal's size (at least; a
  /// quarter of the image's keys for large suites).
  static let changesBeforeCompaction = 65_536

  /// How long a process's claim to compact holds the others back.
  static let compactionClaim: UInt64 = 10_000_000_000

  private func compactionClaimIsFree() -> Bool {
    header.load(Slot.compactor) == 0
      || MonotonicClock.nanoseconds() &- header.load(Slot.compactorSince) > Self.compactionClaim
  }

  /// What a compaction in the background folds, into the state at (generation, length): this process's frozen
  /// changes over its image (`token` non-zero), or else the journal from `start` over the snapshot. Not the whole
  /// `SuiteValues`: holding its `changes` would make the writer's next set copy them.
  private struct Compaction: @unchecked Sendable {  // the image is immutable; the frozen table is a value
    var token: UInt64
    var image: SuiteImage?
    var frozen: [String: PropertyListValue?]
    var generation: UInt64
    var start: Int
    var length: Int
    var snapshot: Identity
  }

  /// With the lock held: builds the next snapshot on the background queue, without the lock (`finishCompaction`).
  /// When this process holds the committed state (a lone writer), from its changes, frozen — writers go on into a
  /// new table, and the process goes on from the new image; otherwise from the snapshot and the journal past it,
  /// read in the background (catching up here would cost the lock what other processes wrote).
  private func startCompaction(_ s: inout State) {
    guard compactionClaimIsFree(), s.values.frozenToken == 0 else { return }
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    let current =
      s.generation == generation && s.length == committed && s.pendingOwn.isEmpty && s.values.damage == nil
      && !headerLost.load(ordering: .relaxed) && journal.faultCount == seenJournalFaults.load(ordering: .relaxed)
    let token = current ? s.values.freeze() ?? 0 : 0
    header.store(Slot.compactorSince, MonotonicClock.nanoseconds())
    header.store(Slot.compactor, UInt64(UInt32(bitPattern: getpid())))
    let work = Compaction(
      token: token, image: s.values.image, frozen: token == 0 ? [:] : s.values.frozen, generation: generation,
      start: snapshotStart(generation: generation, committed: committed), length: committed,
      snapshot: recordedSnapshot())
    compactions.enter()
    background.async { [weak self, compactions] in
      defer { compactions.leave() }
      self?.finishCompaction(work)
    }
  }

  /// The recorded snapshot of `work` and the journal's records from `work.start` to `work.length`, as changes
  /// (last one wins), read without the lock: a seqlock read, checked against the generation after.
  private struct Superseded: Error {}

  private func snapshotAndJournal(_ work: Compaction) throws -> (SuiteImage?, [String: PropertyListValue?]) {
    let image = try loadImage(counted: false)
    guard Self.identity(image?.status) == work.snapshot else { throw Superseded() }  // another compaction came first
    let (bytes, problem) = readJournal(from: work.start, to: work.length)
    guard problem == nil, header.loadAfterFence(Slot.generation) == work.generation, header.load(Slot.rewindTo) == 0
    else { throw Superseded() }
    var records: [JournalFormat.Record] = []
    try JournalFormat.decode(bytes, base: work.start, into: &records)
    var changes: [String: PropertyListValue?] = [:]
    changes.reserveCapacity(records.count)
    for record in records {
      switch record.operation {
      case .set(let value): changes.updateValue(value, forKey: record.key)
      case .remove: changes.updateValue(nil, forKey: record.key)
      }
    }
    return (image, changes)
  }

  /// Builds the image of `work` and writes it beside the snapshot (no lock); then, with the lock, installs it as
  /// the snapshot if nothing replaced the snapshot or emptied the journal meanwhile (else drops it: the state it
  /// holds is in the journal still). Installing is a rename and three header stores: the kill points of a
  /// compaction that keeps the journal (`defaults.snapshot.*`) hold here as in `compact`.
  @discardableResult
  private func finishCompaction(_ work: Compaction, durable: Bool = false) -> Bool {
    // A temp name of this process (`AtomicReplace`'s form): swept if it dies before the rename. `synchronize()`'s
    // own: a background compaction of this process may be building meanwhile.
    let kind = durable ? "sync" : "next"
    let next = Self.preferences + "/\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-\(kind)-\(suite).snapshot"
    var built: (bytes: Int, status: FileStatus)?
    var installed = false
    do {
      var (image, changes) = (work.image, work.frozen)
      if work.token == 0 { (image, changes) = try snapshotAndJournal(work) }
      let bytes = try SuiteImage.merged(
        base: image, changes: changes, generation: work.generation, position: UInt64(work.length))
      guard bytes.count <= Self.snapshotLimits.maxBytes else {
        throw SharedDefaultsError.suiteTooLarge(directory + "/\(suite).snapshot", "it would be \(bytes.count) bytes")
      }
      let check = try SuiteImage(bytes: bytes)
      _ = try checkLimits(objects: check.objects, payload: check.payloadBytes)
      let status = try Self.beneath(next, in: containerPath) { () throws(FileSystemError) in
        try root.replaceFile(next, with: bytes, mode: fileMode, durability: durable ? .powerLoss : .processCrash)
      }
      built = (bytes.count, status)
    } catch is Superseded {
      // Another compaction came first: nothing to do.
    } catch {
      Self.logger.warning("suite '\(suite)': compaction failed, the journal keeps growing: \(error)")
    }
    FaultPoint.pause("defaults.compaction.installing")
    do {
      try exclusively { s throws(SharedDefaultsError) in
        defer {
          if header.load(Slot.compactor) == UInt64(UInt32(bitPattern: getpid())) { header.store(Slot.compactor, 0) }
        }
        guard let built, header.load(Slot.generation) == work.generation, recordedSnapshot() == work.snapshot else {
          try? root.removeFile(next)
          s.values.thaw(token: work.token)
          return
        }
        FaultPoint.reach("defaults.snapshot.writing")
        try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in
          try root.rename(next, to: "\(suite).snapshot")
          if durable {
            let dir = try root.openDirectory(Self.preferences)
            defer { dir.close() }
            try dir.sync()
          }
        }
        FaultPoint.reach("defaults.snapshot.written")
        recordSnapshotIdentity(built.status)
        header.store(Slot.compactionInput, UInt64(built.bytes))
        Self.compactionsInstalled.add(1, ordering: .relaxed)
        // Past the rewind threshold the journal is emptied too: what was appended while the image was built moves
        // to its start, in a new generation (when it is no longer than what the image holds: see `moveTail`).
        let committed = Int(header.load(Slot.committed))
        let rewind = committed > compactionThresholds().rewind && committed - work.length <= work.length
        if rewind {
          moveTail(from: work.length, to: committed)
        } else {
          header.store(Slot.snapshotAt, (work.generation & 0xFFFF_FFFF) << 32 | UInt64(work.length))
          FaultPoint.reach("defaults.snapshot.recorded")
        }
        // This process goes on from the new image when it holds at least what the image does (else it reloads
        // at its next access, as other processes do after a rewind).
        let image = mapSnapshot(written: built.status)
        let holds = !rewind || (s.generation == work.generation && s.length >= work.length)
        if holds, let image, let dropped = s.values.install(image, token: work.token) {
          release(dropped)
          if rewind {
            // The same records, `work.length` bytes earlier, in the new generation.
            s.generation = header.load(Slot.generation)
            s.length -= work.length
            s.pendingOwn = s.pendingOwn.compactMapValues {
              $0.start >= work.length ? ($0.start - work.length, $0.end - work.length) : nil
            }
          }
        } else {
          s.values.thaw(token: work.token)
        }
        if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
        installed = true
      }
    } catch {
      Self.logger.warning("suite '\(suite)': could not install the compacted snapshot: \(error)")
      state.withLock { $0.values.thaw(token: work.token) }
    }
    return installed
  }

  /// Empties the journal in the background's way (with the lock, after installing an image that holds the journal
  /// up to `from`): the records in `from..<to`, appended while the image was built, move to the start of the
  /// journal, in a new generation. Never longer than `from` (the caller checks), so the bytes moved never overlap
  /// where they come from, and a move cut short can be made again from the same bytes.
  ///
  /// Order (each step a kill point the next lock holder finishes from, `finishMove`): the range and the generation
  /// are stored, then the flag `rewindTo`; the bytes move; the committed length and `snapshotAt` (this generation,
  /// from 0) are set; the generation is bumped; the flag cleared. A lock-free reader does not trust the journal
  /// while the flag is set, and one that read before it was set sees the generation changed after its read.
  private func moveTail(from: Int, to: Int) {
    header.store(Slot.rewindFrom, UInt64(from))
    header.store(Slot.rewindGeneration, header.load(Slot.generation))
    header.store(Slot.rewindTo, UInt64(to))
    finishMove()
  }

  /// Moves the range `moveTail` stored and completes the rewind (again, if a process died during it).
  private func finishMove() {
    let from = Int(header.load(Slot.rewindFrom))
    let to = Int(header.load(Slot.rewindTo))
    let rewound = header.load(Slot.rewindGeneration)
    let count = to - from
    guard from >= 0, count >= 0, count <= from, to <= Int(header.load(Slot.journalCapacity)),
      to <= journal.reservation
    else {
      // Not written by `moveTail` (an outside write): the journal's own checks decide what it holds.
      Self.logger.error("suite '\(suite)': '\(header.path)' names an impossible journal move; ignored")
      header.store(Slot.rewindTo, 0)
      return
    }
    let half = count / 2
    memmove(journal.base, journal.base + from, half)
    FaultPoint.reach("defaults.rewind.moving")
    memmove(journal.base + half, journal.base + from + half, count - half)
    header.store(Slot.committed, UInt64(count))
    FaultPoint.reach("defaults.rewind.committed")
    header.store(Slot.snapshotAt, ((rewound &+ 1) & 0xFFFF_FFFF) << 32)
    header.store(Slot.foldedGeneration, .max)
    if header.load(Slot.generation) == rewound { _ = header.increment(Slot.generation) }
    FaultPoint.reach("defaults.rewind.bumped")
    header.store(Slot.rewindTo, 0)
  }

  /// When to compact: once the journal holds `snapshot` bytes past the snapshot, and when to empty the journal as
  /// well: past `rewind` bytes.
  ///
  /// A compaction costs O(suite); waiting until the journal holds twice what it reads keeps it amortized O(1).
  /// What it reads, not what it writes: 10,000 keys sharing one 4 KB value are a 100 KB snapshot that takes 40 MB
  /// to encode, and were compacted every 256 sets (a set cost 20× one of distinct values). Most compactions keep
  /// the journal (no new generation), so no other process re-reads the suite because of them; emptying it makes
  /// every process reload, so it waits for 8 MiB or four times what a compaction reads. Both come before the
  /// journal's reservation is half used, or a large suite would fill it and sets fail.
  private func compactionThresholds() -> (snapshot: Int, rewind: Int) {
    let input = max(Int(header.load(Slot.snapshotSize)), Int(header.load(Slot.compactionInput)))
    let cap = journal.reservation / 2
    return (min(max(Self.compactionThreshold, 2 * input), cap), min(max(Self.rewindThreshold, 4 * input), cap))
  }

  /// The journal offset from which records are not in the snapshot, in `generation` (0 unless a compaction of
  /// this generation kept the journal).
  private func snapshotStart(generation: UInt64, committed: Int) -> Int {
    let word = header.load(Slot.snapshotAt)
    guard word >> 32 == generation & 0xFFFF_FFFF else { return 0 }
    let length = Int(word & 0xFFFF_FFFF)
    return length <= committed ? length : 0
  }

  /// Makes sure the journal file has disk blocks for its first `end` bytes (a full disk fails here, cleanly).
  private func reserveJournal(upTo end: Int) throws(SharedDefaultsError) {
    let capacity = Int(header.load(Slot.journalCapacity))
    guard end > capacity else { return }
    guard end <= journal.reservation else { throw .valueTooLarge("(journal)", journal.reservation) }
    // Grow geometrically so allocation stays off the per-write cost.
    let page = 4096
    let wanted = min(journal.reservation, max(end, 2 * capacity, 64 << 10))
    var size = (wanted + page - 1) / page * page
    do { try journal.allocate(upTo: size) } catch {
      // A nearly full disk: the doubling does not fit, what this set needs may.
      guard error.errno == .noSpace, size > end else { throw .system(error) }
      size = (end + page - 1) / page * page
      try SharedDefaultsError.wrap { () throws(FileSystemError) in try journal.allocate(upTo: size) }
    }
    header.store(Slot.journalCapacity, UInt64(size))
  }

  // MARK: Catching up

  /// Catches up without the suite's lock, as a seqlock reader: a writer only writes past the committed length,
  /// and a compaction bumps the generation before anything is written over (or the snapshot's recorded identity
  /// changes), so what was read is good if the generation is the same after reading it (`loadAfterFence`).
  /// Returns false when it must be tried again or done under the lock (the files changed meanwhile, or need a
  /// repair: damage, a snapshot whose compaction did not finish).
  private func catchUpWithoutLock(_ s: inout State) -> Bool {
    guard !headerLost.load(ordering: .relaxed), journal.faultCount == seenJournalFaults.load(ordering: .relaxed)
    else { return false }
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    guard header.load(Slot.rewindTo) == 0 else { return false }  // the journal's bytes are moving (`moveTail`)
    var values: SuiteValues?
    var start = s.length
    if generation != s.generation || committed < s.length
      || reloadIsCheaper(s, generation: generation, committed: committed)
    {
      let folded =
        s.generation != .max && s.pendingOwn.isEmpty && header.load(Slot.foldedGeneration) == s.generation
        && header.load(Slot.foldedLength) == UInt64(s.length)
      if folded {
        start = 0  // a compaction folded exactly what we have into the snapshot: skip reading it
      } else {
        // Read before the snapshot: a compaction that keeps the journal replaces the file first, then moves this
        // (replaying from an older point over a newer snapshot changes nothing).
        start = snapshotStart(generation: generation, committed: committed)
        let image: SuiteImage?
        do { image = try loadImage() } catch { return false }
        guard isRecordedSnapshot(image?.status) else { return false }
        values = SuiteValues(image: image)
      }
    }
    // Between the header's load and the journal's read: another process may empty the journal and write over it
    // here, which only the generation's second load below tells (tests pause here).
    if values == nil { FaultPoint.pause("defaults.read.headerLoaded") }
    let (bytes, problem) = readJournal(from: start, to: committed)
    guard problem == nil, header.loadAfterFence(Slot.generation) == generation, header.load(Slot.rewindTo) == 0
    else { return false }
    var records: [JournalFormat.Record] = []
    var offsets: [Int] = []
    do { try JournalFormat.decode(bytes, base: start, into: &records, offsets: &offsets) } catch {
      // Committed, in an unchanged generation, and still not a record: rule 1 was broken, or the file damaged.
      Self.committedButUnreadable.add(1, ordering: .relaxed)
      return false
    }
    if var values {
      for record in records { apply(record, to: &values) }
      replaceValues(with: values, in: &s)
      s.pendingOwn = [:]
      if (try? exportState()) != .current || hasKeptExports() { scheduleExportCheck() }
    } else {
      if start == 0 { s.pendingOwn = [:] }
      records = withoutSuperseded(records, at: offsets, by: s.pendingOwn)
      s.pendingOwn = [:]
      apply(records, to: &s)
    }
    s.generation = generation
    s.length = committed
    s.ownWritesUnapplied = false
    if values == nil, rebaseIsWorthIt(s) { rebase(&s) }
    return true
  }

  /// Whether this process, current, holds many changes over an older image than the recorded snapshot, and taking
  /// that snapshot and the journal past it instead — the same state — applies fewer records than it holds: a
  /// reader of a growing suite otherwise keeps every change it applied until the next rewind, and its memory
  /// follows what others write, not what it reads.
  private func rebaseIsWorthIt(_ s: State) -> Bool {
    guard s.values.changeCount > Self.changesBeforeCompaction, s.values.frozenToken == 0, s.values.damage == nil,
      s.generation == header.load(Slot.generation), s.length == Int(header.load(Slot.committed)),
      Self.identity(s.values.image?.status) != recordedSnapshot()
    else { return false }
    let start = snapshotStart(generation: s.generation, committed: s.length)
    return (s.length - start) / 32 < s.values.changeCount  // a record takes 32 bytes or more
  }

  /// With `s` current: the recorded snapshot and the journal past it become its values (the same state, fewer
  /// changes held), read without the suite's lock as `catchUpWithoutLock` reads; if that fails, nothing changes.
  /// Observers hear nothing: no value changed.
  private func rebase(_ s: inout State) {
    let (generation, committed) = (s.generation, s.length)
    guard header.load(Slot.rewindTo) == 0, let image = try? loadImage(counted: false),
      isRecordedSnapshot(image.status)
    else { return }
    let start = snapshotStart(generation: generation, committed: committed)
    let (bytes, problem) = readJournal(from: start, to: committed)
    var records: [JournalFormat.Record] = []
    guard problem == nil, header.loadAfterFence(Slot.generation) == generation, header.load(Slot.rewindTo) == 0,
      (try? JournalFormat.decode(bytes, base: start, into: &records)) != nil
    else { return }
    var values = SuiteValues(image: image)
    for record in records { apply(record, to: &values) }
    release(s.values)
    s.values = values
    s.pendingOwn = [:]
  }

  /// The changes this process holds over its image (tests: memory follows what it reads).
  func heldChanges() -> Int { state.withLock { $0.values.changeCount } }

  /// Brings `s` to the committed state. Needs the lock. Throws `Repair` when files need repairing first.
  private func catchUp(_ s: inout State) throws(Repair) {
    if journal.faultCount != seenJournalFaults.load(ordering: .relaxed) {
      throw .corruptJournal("the journal file was truncated by another program")
    }
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    if let damage = s.values.damage {
      // A lookup found the image damaged: the snapshot is repaired if it is that image, else read again.
      guard !isRecordedSnapshot(s.values.image?.status) else {
        throw .corruptSnapshot("\(suite).snapshot", damage.description)
      }
      try reload(&s, generation: generation, committed: committed)
      return
    }
    // Shorter than what we applied, same generation: a compaction stored its generation and then set the length
    // back (or died between the two); its snapshot is complete (it was written first), so reload from it.
    if generation != s.generation || committed < s.length
      || reloadIsCheaper(s, generation: generation, committed: committed)
    {
      try reload(&s, generation: generation, committed: committed)
      return
    }
    guard committed != s.length else { return }
    let (bytes, truncated) = readJournal(from: s.length, to: committed)
    var records: [JournalFormat.Record] = []
    var offsets: [Int] = []
    var corruption = truncated
    do { try JournalFormat.decode(bytes, base: s.length, into: &records, offsets: &offsets) } catch {
      corruption = corruption ?? error.description
    }
    records = withoutSuperseded(records, at: offsets, by: s.pendingOwn)
    if corruption == nil { s.pendingOwn = [:] }  // every pending commit ends at or before `committed`
    apply(records, to: &s)
    if let corruption { throw .corruptJournal(corruption) }
    s.length = committed
    s.ownWritesUnapplied = false
    if rebaseIsWorthIt(s) {
      // Not here, under the suite's lock: its reading is O(the journal past the snapshot).
      background.async { [weak self] in
        self?.state.withLock { s in if self?.rebaseIsWorthIt(s) == true { self?.rebase(&s) } }
      }
    }
  }

  /// Whether reading the snapshot and the journal past it costs less than the journal from where `s` stands: a
  /// process that only writes catches up only when it compacts, and 4 writers decoding megabytes of each other's
  /// records under the lock ran at 0.7× the speed of reloading their 60 KB snapshot. Per value, parsing the
  /// snapshot and replacing the state costs about what decoding and applying a record does, and a record takes
  /// 2–3 times the bytes of a snapshot entry: so the snapshot wins when the journal behind it is over 4 times
  /// its size (a process that reads often never comes to that).
  private func reloadIsCheaper(_ s: State, generation: UInt64, committed: Int) -> Bool {
    let start = snapshotStart(generation: generation, committed: committed)
    return start > s.length && 4 * Int(header.load(Slot.snapshotSize)) < start - s.length
  }

  /// `records` (at `offsets`) less those that this process's own pending commits supersede: those are applied
  /// already, and newer than any record of the same key before them.
  private func withoutSuperseded(
    _ records: [JournalFormat.Record], at offsets: [Int], by pending: [String: (start: Int, end: Int)]
  ) -> [JournalFormat.Record] {
    guard !pending.isEmpty else { return records }
    return zip(records, offsets).filter { record, offset in
      guard let own = pending[record.key] else { return true }
      return offset >= own.end
    }.map(\.0)
  }

  /// The journal's bytes in `start..<end`, and why they cannot all be trusted (a length beyond the allocated
  /// bytes, or pages lost to an outside truncation, which read as zeros and fail their checksums), if so.
  private func readJournal(from start: Int, to end: Int) -> (bytes: [UInt8], problem: String?) {
    let capacity = Int(header.load(Slot.journalCapacity))
    guard start <= end, end <= capacity, capacity <= journal.reservation else {
      return ([], "the committed length \(end) lies beyond the journal's \(capacity) allocated bytes")
    }
    let bytes = [UInt8](UnsafeRawBufferPointer(start: journal.base + start, count: end - start))
    if journal.faultCount != seenJournalFaults.load(ordering: .relaxed) {
      return (bytes, "the journal file was truncated by another program")
    }
    return (bytes, nil)
  }

  /// Reads the snapshot and the whole journal (after a compaction somewhere, or on first use). The snapshot and
  /// the journal's good records are applied even when the journal is damaged: the repair that follows then
  /// starts from everything that can still be read, never from an empty state.
  private func reload(_ s: inout State, generation: UInt64, committed: Int) throws(Repair) {
    let recorded = try snapshotIsTheRecordedOne()
    if recorded, s.generation != .max, s.pendingOwn.isEmpty, header.load(Slot.foldedGeneration) == s.generation,
      header.load(Slot.foldedLength) == UInt64(s.length), header.load(Slot.generation) == generation
    {
      // A compaction folded exactly what we have into the snapshot: skip reading it.
      s.generation = generation
      s.length = 0
      try catchUp(&s)
      return
    }
    // A snapshot that is not the recorded one was written by a compaction that died before recording it: it holds
    // everything up to the journal's committed length, so replaying the journal over it changes nothing.
    let start = snapshotStart(generation: generation, committed: committed)
    let image = try loadImage()
    var values = SuiteValues(image: image)
    if !recorded {
      Self.logger.warning("suite '\(suite)': adopting a snapshot whose compaction did not finish")
      recordSnapshotIdentity(image?.status)
    }
    let (bytes, truncated) = readJournal(from: start, to: committed)
    var records: [JournalFormat.Record] = []
    var corruption = truncated
    do { try JournalFormat.decode(bytes, base: start, into: &records) } catch {
      corruption = corruption ?? error.description
    }
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
    s.pendingOwn = [:]
    s.generation = generation
    s.length = committed
    s.ownWritesUnapplied = false
    if let corruption { throw .corruptJournal(corruption) }
    // Checked in the background: an export edited by another tool never delays or fails this operation.
    if (try? exportState()) != .current || hasKeptExports() { scheduleExportCheck() }
  }

  /// Reads the dictionary in the plist `item` (the export, or a tool's edit of it) with its status; an absent file
  /// is empty. A file over `snapshotLimits` is `overLimit` (refused, left where it is); one that does not parse is
  /// corrupt.
  private func loadPlist(_ item: String) throws(Repair) -> ([String: PropertyListValue], FileStatus?) {
    let name = (item as NSString).lastPathComponent
    let path = directory + "/" + name
    let read: (bytes: [UInt8], status: FileStatus)
    do {
      read = try root.readFile(item, limit: Self.snapshotLimits.maxBytes)
    } catch {
      switch error.errno {
      case .noSuchFileOrDirectory: return ([:], nil)
      case .improperLink: throw .unreachable(.container(.pathEscapesContainer(item, container: containerPath)))
      case .fileTooLarge:
        throw .overLimit(.suiteTooLarge(path, "the file is over \(Self.snapshotLimits.maxBytes) bytes"))
      default: throw .corruptSnapshot(name, "cannot read: \(error)")
      }
    }
    let value: PropertyListValue
    do { value = try PropertyListValue(bytes: read.bytes, limits: Self.snapshotLimits) } catch {
      if error.kind == .limitExceeded { throw .overLimit(.suiteTooLarge(path, error.message)) }
      throw .corruptSnapshot(name, "\(error)")
    }
    guard case .dictionary(let dictionary) = value else {
      throw .corruptSnapshot(name, "the top level is not a dictionary")
    }
    return (dictionary, read.status)
  }

  /// Maps the image `item` (the snapshot, or the one before it): O(1), its header checked; nil when there is none.
  /// One that is not an image is corrupt; one over `snapshotLimits.maxBytes` is `overLimit`.
  private func loadImage(_ item: String? = nil, counted: Bool = true) throws(Repair) -> SuiteImage? {
    let item = item ?? snapshotItem
    if item == snapshotItem && counted { Self.snapshotLoads.add(1, ordering: .relaxed) }
    let name = (item as NSString).lastPathComponent
    let fd: SystemFD
    do {
      fd = try root.openFile(item, .readOnly)
    } catch {
      switch error.errno {
      case .noSuchFileOrDirectory: return nil
      case .improperLink: throw .unreachable(.container(.pathEscapesContainer(item, container: containerPath)))
      default: throw .corruptSnapshot(name, "cannot open: \(error)")
      }
    }
    do { return try SuiteImage(mapping: fd) } catch {
      switch error {
      case .corrupt(let corruption): throw .corruptSnapshot(name, corruption.description)
      case .system(let error) where error.errno == .fileTooLarge:
        throw .overLimit(.suiteTooLarge(directory + "/" + name, "the file is over \(Self.snapshotLimits.maxBytes) bytes"))
      case .system(let error): throw .corruptSnapshot(name, "cannot map: \(error)")
      }
    }
  }

  /// The snapshot this process just wrote (`written`), mapped; nil if the name leads elsewhere or it cannot be.
  private func mapSnapshot(written: FileStatus) -> SuiteImage? {
    guard let fd = try? root.openFile(snapshotItem, .readOnly), let image = try? SuiteImage(mapping: fd),
      image.status?.inode == written.inode
    else { return nil }
    return image
  }

  /// Whether `status` is the snapshot the header recorded (else a compaction died before recording it).
  private func isRecordedSnapshot(_ st: FileStatus?) -> Bool { Self.identity(st) == recordedSnapshot() }

  /// Whether the snapshot on disk is the one the header recorded (else a compaction died before recording it).
  private func snapshotIsTheRecordedOne() throws(Repair) -> Bool {
    let st: FileStatus?
    do { st = try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in try root.status(snapshotItem) } } catch {
      throw .unreachable(error)
    }
    return isRecordedSnapshot(st)
  }

  private enum ExportState { case current, edited, stale }

  /// Whether `<suite>.plist` is what the last compaction exported (`current`), was changed by another tool since
  /// (`edited`), or was not rewritten with the current snapshot (`stale`: a compaction died, or the disk was full).
  private func exportState() throws(Repair) -> ExportState {
    let recorded = header.load(Slot.exportInode)
    if recorded == .max { return .stale }
    let st: FileStatus?
    do { st = try Self.beneath(plistItem, in: containerPath) { () throws(FileSystemError) in try root.status(plistItem) } } catch {
      throw .unreachable(error)
    }
    guard let st else { return recorded == 0 ? .current : .edited }
    let same =
      recorded == st.inode && header.load(Slot.exportSize) == UInt64(st.size)
      && header.load(Slot.exportTime) == UInt64(bitPattern: st.modificationNanoseconds)
    if same { return .current }
    // A tool's file already judged (applied or kept aside): rewritten, never judged again.
    let judged =
      header.load(Slot.judgedInode) == st.inode && header.load(Slot.judgedSize) == UInt64(st.size)
      && header.load(Slot.judgedTime) == UInt64(bitPattern: st.modificationNanoseconds)
    return judged ? .stale : .edited
  }

  /// With the lock held: catch up, repairing whatever needs it.
  private func catchUpExclusively(_ s: inout State) throws(SharedDefaultsError) {
    if headerLost.exchange(false, ordering: .relaxed) && s.generation != .max { try compact(&s, durable: false) }
    do { try catchUp(&s) } catch { try repairAndCatchUp(&s, error) }
  }

  private func repairAndCatchUp(_ s: inout State, _ first: Repair) throws(SharedDefaultsError) {
    var problem: Repair? = first
    for _ in 0..<4 {
      // Another process may have repaired it already while we waited for the lock.
      if problem == nil {
        do { try catchUp(&s); return } catch { problem = error }
      }
      switch problem! {
      case .unreachable(let error), .overLimit(let error):
        throw error
      case .corruptSnapshot(let name, let reason):
        Self.logger.error(
          "suite '\(suite)': '\(directory)/\(name)' is corrupt (\(reason)); moved aside, recovering the last good state"
        )
        quarantine(name)
        try recoverState(&s)
        try compact(&s, durable: false)
      case .corruptJournal(let reason):
        Self.logger.error(
          "suite '\(suite)': journal '\(journalPath)' is corrupt (\(reason)); moved aside after its good records")
        if s.generation == .max {
          // Never loaded here: start from the snapshot and the journal's good records, never from nothing.
          do { try reload(&s, generation: header.load(Slot.generation), committed: Int(header.load(Slot.committed))) }
          catch {
            if case .unreachable(let error) = error { throw error }
            if case .overLimit(let error) = error { throw error }
          }
          guard s.generation != .max else { throw .system(FileSystemError("recover", journalPath, .ioError)) }
        }
        quarantineJournal()
        try compact(&s, durable: false)
      }
      problem = nil
    }
    try catchUpOrThrow(&s)
  }

  private func catchUpOrThrow(_ s: inout State) throws(SharedDefaultsError) {
    do { try catchUp(&s) } catch {
      if case .overLimit(let error) = error { throw error }
      throw .system(FileSystemError("recover", plistPath, .ioError))
    }
  }

  /// After the snapshot was lost: the export when it holds the same bytes (the header says so), else the last good
  /// state in memory; plus whatever the journal still holds.
  private func recoverState(_ s: inout State) throws(SharedDefaultsError) {
    // The last good state in memory, unless its image is what was damaged.
    var values = (try? s.values.dictionary()).map(SuiteValues.init(dictionary:)) ?? SuiteValues(image: nil)
    if s.generation == .max || s.length != 0 || s.values.damage != nil {
      if (try? exportState()) == .current, header.load(Slot.exportGeneration) == header.load(Slot.generation),
        let (exported, _) = try? loadPlist(plistItem)
      {
        Self.logger.notice("suite '\(suite)': recovering from the export '\(plistPath)'")
        values = SuiteValues(dictionary: exported)
      } else if s.generation == .max {
        Self.logger.error("suite '\(suite)': no good copy of the snapshot; only the journal's records are left")
      }
    }
    let (bytes, _) = readJournal(from: 0, to: Int(header.load(Slot.committed)))
    var records: [JournalFormat.Record] = []
    try? JournalFormat.decode(bytes, base: 0, into: &records)
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
    s.generation = header.load(Slot.generation)
    s.length = Int(header.load(Slot.committed))
    s.ownWritesUnapplied = false
    s.pendingOwn = [:]
  }

  /// What became of a tool's file at the export's name (`judgeExportAtName`).
  private enum Judged { case none, applied, keptAside, later }

  /// With the lock and `s` current: a tool's file at the export's name is judged once (ExportMirror's rule) —
  /// its change committed, or the file kept aside — and its identity recorded as judged, so that neither this
  /// process nor another judges it again (`exportState` calls it `stale`: rewritten, never applied twice). A file
  /// that does not parse but may be one being written (`ExportMirror.mayBeUnfinished`) is left `later`
  /// (`durable`: not waited for — a later write lands in the file the export replaces, `publishExport`); any other
  /// is moved aside as corrupt.
  private func judgeExportAtName(_ s: inout State, durable: Bool) throws(SharedDefaultsError) -> Judged {
    let read: (bytes: [UInt8], status: FileStatus)
    let fd: SystemFD
    do {
      fd = try root.openFile(plistItem, .readOnly)
    } catch {
      if error.errno == .noSuchFileOrDirectory { return .none }
      if error.errno == .improperLink { throw .container(.pathEscapesContainer(plistItem, container: containerPath)) }
      Self.logger.error("suite '\(suite)': '\(plistPath)' written by another tool cannot be read (\(error)); moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    defer { fd.close() }
    do { read = try fd.readRegularFile(limit: Self.snapshotLimits.maxBytes) } catch {
      Self.logger.error("suite '\(suite)': '\(plistPath)' written by another tool cannot be read (\(error)); moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    guard let edited = Self.parseEdit(read.bytes) else {
      if ExportMirror.mayBeUnfinished(read.bytes, fd, modified: read.status.modificationNanoseconds) {
        if !durable { scheduleExportCheck(after: Self.exportRetryDelay) }
        return .later
      }
      Self.logger.error("suite '\(suite)': '\(plistPath)' written by another tool is not a property list; moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    // Recorded first: judging compacts, which looks at the name again. Forgotten if judging fails (retried).
    recordJudged(read.status)
    do { return try judgeEdit(edited, bytes: read.bytes, base: try? loadImage(exportedItem), &s) } catch {
      recordJudged(nil)
      throw error
    }
  }

  private func recordJudged(_ st: FileStatus?) {
    header.store(Slot.judgedSize, UInt64(st?.size ?? 0))
    header.store(Slot.judgedTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
    header.store(Slot.judgedInode, st?.inode ?? 0)
  }

  /// With the lock and `s` current: applies `edited` (a tool's version of the export, `bytes` as read) as what it
  /// changed against `base` (the image of the export it replaced or was written into) when ExportMirror's rule
  /// says that is certain; else keeps it aside as `<suite>.plist.unapplied-…` and reports it (error log, `groupctl
  /// defaults read`, `groupctl doctor`). Either way the history learns the pairs it showed.
  private func judgeEdit(
    _ edited: [String: PropertyListValue], bytes: [UInt8], base: SuiteImage?, _ s: inout State
  ) throws(SharedDefaultsError) -> Judged {
    let baseValues = base.flatMap { try? SuiteValues(image: $0).dictionary() } ?? [:]
    var history = loadHistory()
    let (judgement, learned) = ExportMirror.judge(edited, base: baseValues, history: history)
    history.insert(learned)
    try saveHistory(history)  // first: a kill after it leaves pairs learned, never an edit judged without them
    switch judgement {
    case .keepAside(let keys):
      let name =
        ExportMirror.unappliedPrefix(suite) + "\(Int(Date().timeIntervalSince1970 * 1000))-\(getpid())-\(UInt16.random(in: 0...0xFFFF))"
      _ = try Self.beneath(Self.preferences + "/" + name, in: containerPath) { () throws(FileSystemError) in
        try root.replaceFile(Self.preferences + "/" + name, with: bytes, mode: fileMode)
      }
      Self.logger.error(
        "suite '\(suite)': an edit of '\(plistPath)' by another tool was not applied: \(keys.prefix(5).joined(separator: ", ")) hold values the export showed before (the tool may have read an older export); kept as '\(directory)/\(name)'"
      )
      return .keptAside
    case .apply(let changes):
      // What already holds the tool's value needs no record (and observers no event).
      let records = changes.keys.sorted().compactMap { key -> JournalFormat.Record? in
        let value = changes[key]!
        guard s.values[key] != value else { return nil }
        return JournalFormat.Record(key: key, operation: value.map { .set($0) } ?? .remove, pid: 0)
      }
      Self.logger.info("suite '\(suite)': applying \(records.count) change(s) made to '\(plistPath)' by another tool")
      guard !records.isEmpty else { return .applied }
      var encoded: [UInt8] = []
      for record in records { try JournalFormat.encode(record, into: &encoded) }
      try append(encoded, records, &s, mayCompact: false)
      try catchUpOrThrow(&s)
      // Into the snapshot at once: exports are made from it, and the next one must show the change.
      try compact(&s, durable: false, handOver: true, rewind: s.length > compactionThresholds().rewind)
      return .applied
    }
  }

  /// The history of what the export's name showed (`ExportMirror`); empty when there is none.
  private func loadHistory() -> ExportHistory {
    ExportHistory(bytes: try? root.readFile(Self.preferences + "/" + ExportMirror.historyName(suite), limit: 1 << 24).bytes)
  }

  private func saveHistory(_ history: ExportHistory) throws(SharedDefaultsError) {
    guard history.changed else { return }
    let item = Self.preferences + "/" + ExportMirror.historyName(suite)
    _ = try Self.beneath(item, in: containerPath) { () throws(FileSystemError) in
      try root.replaceFile(item, with: history.bytes, mode: fileMode)
    }
  }

  /// The names of this suite's outside edits that were kept aside, not applied (`ExportMirror`).
  func unappliedEdits() -> [String] {
    guard let dir = try? root.openDirectory(Self.preferences) else { return [] }
    defer { dir.close() }
    return ExportMirror.unapplied(suite, in: dir).map { directory + "/" + $0 }
  }

  /// The dictionary in a tool's version of the export (nil when it does not parse, or is not a dictionary).
  private static func parseEdit(_ bytes: [UInt8]) -> [String: PropertyListValue]? {
    guard case .dictionary(let edited)? = try? PropertyListValue(bytes: bytes, limits: Self.snapshotLimits) else {
      return nil
    }
    return edited
  }

  // MARK: Compaction

  /// Rewrites the snapshot from `s`, and with `rewind` empties the journal. Needs the lock and a current `s`.
  ///
  /// The snapshot is an image: the last image's entries copied as they are and the changes over them encoded,
  /// O(bytes) with no value decoded. The export (`writeExport`) is written after, and without the lock.
  ///
  /// Order (each step a kill point that the others recover from): the snapshot is written (a complete state: readers that find it unrecorded replay the journal over it, which changes
  /// nothing); its identity is recorded. Then, keeping the journal: `snapshotAt` moves to the length the snapshot
  /// holds (until it does, whoever loads the snapshot replays from the older point: nothing changes); nobody else
  /// notices — their journal goes on. Emptying it: the **generation** is bumped and only then the committed length
  /// set back to 0 — a process that last saw this generation with length 0 must see the change, whatever point
  /// the compactor died at.
  ///
  /// An export being edited by another tool that cannot be read yet is left alone (its base, the image it was
  /// written from, stays pinned as `<suite>.snapshot.exported`, whatever the snapshot becomes) and looked at again.
  private func compact(
    _ s: inout State, durable: Bool, handOver: Bool = false, rewind: Bool = true
  ) throws(SharedDefaultsError) {
    guard s.generation != .max else {
      // Never write a state this process did not load: that would drop the suite.
      throw .system(FileSystemError("compact", directory + "/\(suite).snapshot", .ioError))
    }
    // An export edited by another tool is judged first (one that may be half-written is looked at again later).
    if (try? exportState()) == .edited { _ = try judgeExportAtName(&s, durable: durable) }
    // Only a plain compaction (the state is exactly the committed journal) may let readers skip the snapshot.
    let folded = (generation: header.load(Slot.generation), length: UInt64(s.length))
    // The image of the state: the last image's entries copied as they are, the changes over them encoded.
    let bytes = try s.values.imageBytes(
      generation: rewind ? header.load(Slot.generation) &+ 1 : s.generation, position: rewind ? 0 : s.length)
    guard bytes.count <= Self.snapshotLimits.maxBytes else {
      header.store(Slot.overLimit, 1)
      throw .suiteTooLarge(directory + "/\(suite).snapshot", "it would be \(bytes.count) bytes")
    }
    let input: Int
    do {
      let built = try SuiteImage(bytes: bytes)
      _ = try checkLimits(objects: built.objects, payload: built.payloadBytes)
      // What the next compaction reads: this image (copied entry by entry) and the journal past it.
      input = bytes.count
    } catch let error as SharedDefaultsError {
      throw error
    } catch {
      throw .unsupportedValue("the suite's image does not read back: \(error)")
    }
    let durability: AtomicReplace.Durability = durable ? .powerLoss : .processCrash
    try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in
      if !rewind { FaultPoint.reach("defaults.snapshot.writing") }
      let written = try root.replaceFile(snapshotItem, with: bytes, mode: fileMode, durability: durability)
      if rewind {
        FaultPoint.reach("defaults.compact.snapshotWritten")
      } else {
        FaultPoint.reach("defaults.snapshot.written")
      }
      recordSnapshotIdentity(written)
      // This process goes on from the image it wrote (the changes it held are in it).
      if let image = mapSnapshot(written: written) { release(s.values.rebase(onto: image)) }
    }
    header.store(Slot.compactionInput, UInt64(input))
    if rewind {
      header.store(Slot.foldedGeneration, handOver && folded.generation == s.generation ? folded.generation : .max)
      header.store(Slot.foldedLength, folded.length)
      s.generation = header.increment(Slot.generation)
      FaultPoint.reach("defaults.compact.generationBumped")
      header.store(Slot.committed, 0)
      s.length = 0
      s.ownWritesUnapplied = false
      s.pendingOwn = [:]
    } else {
      header.store(Slot.snapshotAt, (s.generation & 0xFFFF_FFFF) << 32 | folded.length)
      FaultPoint.reach("defaults.snapshot.recorded")
    }
    header.store(Slot.overLimit, 0)
    if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
  }

  /// Writes the export (`<suite>.plist`, a binary plist of the snapshot's state, for other tools). The costly
  /// part — decoding every value and encoding the plist — runs without the lock: the lock is held only to pin the
  /// snapshot the export is made from (a hard link: compactions meanwhile cannot take it away) and to publish the
  /// export, if no tool edited it meanwhile (else that edit is applied first and the export made again). The
  /// pinned image becomes `<suite>.snapshot.exported`, the base an edit of this export is diffed against.
  /// `durable`: survives power loss (`synchronize()`).
  private func writeExport(durable: Bool) throws(SharedDefaultsError) {
    // One at a time in this process (they share their temp names); taken before any other lock.
    try exportGate.withLock { _ throws(SharedDefaultsError) in
      guard exportIsBehind() else { return }  // another one just wrote it
      try writeExportAlone(durable: durable)
    }
  }

  /// Serializes `writeExport` in this process.
  private let exportGate = Mutex<Void>(())

  private func writeExportAlone(durable: Bool) throws(SharedDefaultsError) {
    // One descriptor of the suite's directory for the whole export: resolved once beneath the container (a swap of
    // a directory on the way for a symlink fails here, cleanly), every name after it relative to it.
    let dir = try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
      try root.openDirectory(Self.preferences)
    }
    let pinned = "\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-export-\(suite).snapshot"
    let temp = "\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-export-\(suite).plist"
    defer {
      try? dir.removeFile(pinned)
      try? dir.removeFile(temp)
      dir.close()
    }
    for _ in 0..<3 {
      // 1. Pin the snapshot, after judging a tool's file at the name (an applied one is compacted into the
      // snapshot: the export shows it); with the image of the export it replaces, whose pairs it stops showing.
      let start = try exclusively { s throws(SharedDefaultsError) -> (SuiteImage, SuiteImage?, UInt64)? in
        try catchUpExclusively(&s)
        try applyKeptExports(in: dir, &s)
        if (try? exportState()) == .edited, try judgeExportAtName(&s, durable: durable) == .later, !durable {
          return nil  // being written by the tool: looked at again later
        }
        do throws(FileSystemError) {
          try dir.removeFile(pinned)
          try dir.link("\(suite).snapshot", to: pinned)
        } catch {
          if error.errno == .noSuchFileOrDirectory { return nil }  // no snapshot yet: nothing to export
          throw .system(error)
        }
        guard let fd = try? dir.open(pinned, .readOnly), let image = try? SuiteImage(mapping: fd) else {
          return nil  // damaged: repaired at the next catch-up, exported after
        }
        let previous = (try? dir.open("\(suite).snapshot.exported", .readOnly)).flatMap { try? SuiteImage(mapping: $0) }
        return (image, previous, header.load(Slot.generation))
      }
      guard let (image, previous, generation) = start else { return }
      // 2. Without the lock: the plist, in a temp file (durable: synced); the pairs the name stops showing.
      let written: FileStatus
      do {
        let bytes = try PropertyListValue.dictionary(SuiteValues(image: image).dictionary()).encoded(as: .binary)
        written = try SharedDefaultsError.wrap { () throws(FileSystemError) in
          try AtomicReplace.write(bytes, in: dir, name: temp, mode: fileMode, durability: durable ? .powerLoss : .processCrash)
        }
      } catch let error as SharedDefaultsError {
        throw error
      } catch {
        throw .unsupportedValue("the suite cannot be written as a property list: \(error)")
      }
      let superseded = previous.flatMap { ExportMirror.superseded(from: $0, to: image) }
      if previous != nil, superseded == nil {
        Self.logger.warning("suite '\(suite)': the image of the last export does not read; its values are not remembered")
      }
      // 3. Publish it — unless another process exported meanwhile (the pairs are not of the export at the name),
      // or a tool's file there, judged now, changed the state (this export lacks it): then start again.
      let published = try exclusively { s throws(SharedDefaultsError) -> Bool in
        guard (try? dir.status(of: "\(suite).snapshot.exported"))??.inode == previous?.status?.inode else { return false }
        var unfinished = false
        if (try? exportState()) == .edited {
          try catchUpExclusively(&s)
          switch try judgeExportAtName(&s, durable: durable) {
          case .applied: return false
          case .later: unfinished = true  // durable only: the tool's write lands in the replaced file
          case .none, .keptAside: break
          }
        }
        try publishExport(
          temp, in: dir, written: written, pinned: pinned, generation: generation, durable: durable,
          accounted: unfinished ? (0, 0, 0) : accountedAtName(dir), superseded: superseded ?? [], &s)
        return true
      }
      if published {
        if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
        return
      }
    }
    scheduleExportCheck(after: Self.exportRetryDelay)  // overtaken three times: later
  }

  /// Whether the export does not hold the snapshot's state (stale, edited, or written from an older snapshot).
  private func exportIsBehind() -> Bool {
    guard (try? exportState()) == .current else { return true }
    return (try? root.status(exportedItem))??.inode != header.load(Slot.snapshotInode)
  }

  /// The identity of the file at the export's name when it is accounted for — the recorded export, or a tool's
  /// file already judged — else nil (none, or an export whose recording a kill interrupted: never a tool's).
  private func accountedAtName(_ dir: SystemFD) -> Identity? {
    guard let st = try? dir.status(of: "\(suite).plist") else { return nil }
    let identity = Self.identity(st)
    if let recorded = recordedExport(), identity == recorded { return identity }
    let judged = (header.load(Slot.judgedInode), Int64(header.load(Slot.judgedSize)),
      Int64(bitPattern: header.load(Slot.judgedTime)))
    return identity == judged ? identity : nil
  }

  /// With the lock: the temp file `temp` (in `dir`, the suite's directory) becomes the export, the pinned image
  /// its base; the export is recorded, and the history learns the pairs the name stops showing (`superseded`).
  /// The file it replaces, `accounted` for as that identity, is kept under a second name for a tool's write
  /// into it (a tool that opened it before the rename writes there).
  private func publishExport(
    _ temp: String, in dir: SystemFD, written: FileStatus, pinned: String, generation: UInt64, durable: Bool,
    accounted: Identity?, superseded: [UInt128], _ s: inout State
  ) throws(SharedDefaultsError) {
    // First: a kill after it leaves pairs learned, never an export shown without its predecessor's pairs.
    var history = loadHistory()
    history.insert(superseded)
    try saveHistory(history)
    // The file being replaced, kept open: a tool may write into it (in place) while this runs, and that write
    // must not vanish with the file's name.
    let replaced = try? dir.open("\(suite).plist", .readOnly)
    var handedOver = false
    defer { if !handedOver { replaced?.close() } }
    // And given a second name, for any process to apply a tool's write into it later, whatever becomes of this one.
    let keptName = accounted.map { keptExportName($0) }
    if let keptName {
      try? dir.removeFile(keptName)
      try? dir.link("\(suite).plist", to: keptName)
      // With the image of the export it shows or replaced: the base of a write into it, whatever exports follow.
      try? dir.removeFile(Self.keptBase(keptName))
      try? dir.link("\(suite).snapshot.exported", to: Self.keptBase(keptName))
    }
    header.store(Slot.exportInode, .max)  // stale until recorded: a kill in between leaves it to be rewritten
    try SharedDefaultsError.wrap { () throws(FileSystemError) in
      FaultPoint.pause("defaults.export.replacing")
      try dir.rename(temp, to: "\(suite).plist")
      if durable { try dir.sync() }
      FaultPoint.reach("defaults.compact.exportWritten")
      try dir.rename(pinned, to: "\(suite).snapshot.exported")
      header.store(Slot.exportGeneration, generation)
      // The identity of what was written, not of what is at the name by now: a tool that wrote into the new
      // export at once must still be seen as an edit.
      recordExportIdentity(written)
    }
    guard let replaced, let accounted, let now = try? replaced.status(), now.kind == .regular,
      Self.identity(now) != accounted
    else {
      // Untouched so far: the second name stays for a while (`applyKeptExports`), a tool may write still.
      if keptName != nil { scheduleExportCheck(after: Self.keptExportGrace + Self.exportRetryDelay) }
      return
    }
    // Written by a tool since it was accounted for (in place, during this rename): judged against its base.
    guard let (edited, bytes) = Self.readEdit(replaced) else {
      // Perhaps half-written: a tool that writes in place truncates the file, encodes, then writes (plistlib
      // takes tens of milliseconds in between). Read it again later; its write lands in this inode.
      handedOver = true
      replacedEdits.enter()
      applyReplacedEditLater(replaced, keptAs: keptName, tries: Self.replacedEditTries)
      return
    }
    try catchUpExclusively(&s)
    try commitReplacedEdit(edited, bytes: bytes, &s, keptAs: keptName)
    if let keptName { Self.dropKept(keptName, in: dir) }
  }

  /// The second name of a file about to be replaced by an export, accounted for as `identity`:
  /// `<suite>.plist.replaced-<inode>-<size>-<modified ns>-<now, s>`. A file there that no longer has that identity
  /// was written by a tool.
  private func keptExportName(_ identity: Identity) -> String {
    "\(suite).plist.replaced-\(identity.inode)-\(identity.size)-\(identity.time)-\(Int(Date().timeIntervalSince1970))"
  }

  /// Whether a replaced export is kept under a second name (`keptExportName`), waiting for `applyKeptExports`.
  private func hasKeptExports() -> Bool {
    let prefix = "\(suite).plist.replaced-"
    guard let dir = try? root.openDirectory(Self.preferences) else { return false }
    defer { dir.close() }
    return ((try? dir.entries()) ?? []).contains { $0.name.hasPrefix(prefix) }
  }

  /// The name of the image a kept export was made from (pinned beside it).
  private static func keptBase(_ keptName: String) -> String {
    keptName.replacingOccurrences(of: ".plist.replaced-", with: ".snapshot.replaced-")
  }

  /// Removes a kept export and its base.
  private static func dropKept(_ keptName: String, in dir: SystemFD) {
    try? dir.removeFile(keptName)
    try? dir.removeFile(keptBase(keptName))
  }

  /// How long an untouched replaced export keeps its second name at least: a tool that opened the export before
  /// it was replaced writes into it (plistlib's read-modify-write takes milliseconds; a loaded machine, seconds).
  /// It is kept longer while any process still has it open (`SystemFD.isOpenElsewhere`).
  static let keptExportGrace = 2.0
  /// Where it cannot be told whether a file is open elsewhere (leases refused): how long it is kept instead.
  static let keptExportLimit = 120.0

  /// With the lock: applies the tools' writes into replaced exports kept by any process
  /// (`keptExportName`) — the replacing one may have died or exited before it could — and removes those done
  /// with: judged (applied or kept aside), untouched past `keptExportGrace` and open nowhere, or written but not
  /// a property list and no longer being written (moved aside, logged). Returns whether some are left for later.
  @discardableResult
  private func applyKeptExports(in dir: SystemFD, _ s: inout State) throws(SharedDefaultsError) -> Bool {
    let prefix = "\(suite).plist.replaced-"
    let now = Date().timeIntervalSince1970
    var left = false
    for (name, _) in (try? dir.entries()) ?? [] where name.hasPrefix(prefix) {
      let fields = name.dropFirst(prefix.count).split(separator: "-").compactMap { Int64($0) }
      guard fields.count == 4, let fd = try? dir.open(name, .readOnly) else {
        Self.dropKept(name, in: dir)
        continue
      }
      defer { fd.close() }
      guard let st = try? fd.status(), st.kind == .regular else {
        Self.dropKept(name, in: dir)
        continue
      }
      if Self.identity(st) == (UInt64(fields[0]), fields[1], fields[2]) {
        // Untouched: dropped once no tool can write into it any more (nobody else has it open).
        let age = now - Double(fields[3])
        let openElsewhere = fd.isOpenElsewhere() ?? (age < Self.keptExportLimit)
        if age > Self.keptExportGrace, !openElsewhere {
          Self.dropKept(name, in: dir)
        } else {
          left = true
        }
        continue
      }
      if let (edited, bytes) = Self.readEdit(fd) {
        try catchUpExclusively(&s)  // only now: a kept export left untouched costs the lock no catching up
        try commitReplacedEdit(edited, bytes: bytes, &s, keptAs: name)
        Self.dropKept(name, in: dir)
      } else if !ExportMirror.mayBeUnfinished([], fd, modified: st.modificationNanoseconds) {
        Self.logger.error(
          "suite '\(suite)': '\(directory)/\(name)', an export another tool wrote while it was replaced, is not a property list; moved aside")
        quarantine(name)
        try? dir.removeFile(Self.keptBase(name))
      } else {
        left = true
      }
    }
    // Bases whose export is gone (a process died between the two removals).
    let kept = Set(((try? dir.entries()) ?? []).map(\.name))
    for name in kept where name.hasPrefix("\(suite).snapshot.replaced-") {
      if !kept.contains(name.replacingOccurrences(of: ".snapshot.replaced-", with: ".plist.replaced-")) {
        try? dir.removeFile(name)
      }
    }
    return left
  }

  /// Judges the edit a tool wrote into an export that was replaced, against the image that export was made from
  /// (pinned beside its second name; else the last export's — then any value it shows that changed since keeps
  /// it aside). An applied one is compacted into the snapshot, and the export, which lacks it, rewritten soon.
  private func commitReplacedEdit(
    _ edited: [String: PropertyListValue], bytes: [UInt8], _ s: inout State, keptAs keptName: String?
  ) throws(SharedDefaultsError) {
    let base = keptName.flatMap { try? loadImage(Self.preferences + "/" + Self.keptBase($0)) } ?? (try? loadImage(exportedItem))
    guard try judgeEdit(edited, bytes: bytes, base: base, &s) == .applied else { return }
    scheduleExportCheck()
  }

  /// The dictionary in a tool's version of the export, open as `fd`, and its bytes (nil when it does not parse yet).
  private static func readEdit(_ fd: SystemFD) -> ([String: PropertyListValue], [UInt8])? {
    guard let st = try? fd.status(), st.kind == .regular,
      let read = try? fd.read(at: 0, count: Int(min(st.size, Int64(Self.snapshotLimits.maxBytes)))),
      let edited = parseEdit(read)
    else { return nil }
    return (edited, read)
  }

  /// Waits (without the lock: the work takes it) until the compactions this process runs in the background are
  /// done, and the edits a tool wrote into exports this process replaced are committed or given up (bounded by
  /// their tries): before this process may exit.
  func waitForBackgroundWork() {
    compactions.wait()
    _ = replacedEdits.wait(timeout: .now() + Self.exportRetryDelay * Double(Self.replacedEditTries + 2))
  }

  /// How many times a replaced export is read again (`exportRetryDelay` apart) before it is left to its second
  /// name (`applyKeptExports`, in any process).
  static let replacedEditTries = 8

  /// Reads `replaced` (an export a tool was writing when a compaction replaced it) every `exportRetryDelay`
  /// until it parses, then judges it; closes it. After `tries` it is left under its second name, and logged.
  /// Entered in `replacedEdits` by the caller; leaves it when done.
  private func applyReplacedEditLater(_ replaced: SystemFD, keptAs keptName: String?, tries: Int) {
    background.asyncAfter(deadline: .now() + Self.exportRetryDelay) { [weak self, replacedEdits] in
      guard let self else {
        replaced.close()
        return replacedEdits.leave()
      }
      guard let (edited, bytes) = Self.readEdit(replaced) else {
        if tries > 1 { return applyReplacedEditLater(replaced, keptAs: keptName, tries: tries - 1) }
        defer { replacedEdits.leave() }
        replaced.close()
        // Still kept under its second name: the next export, here or in any process, tries again.
        Self.logger.warning(
          "suite '\(suite)': '\(plistPath)' was written by another tool while it was replaced, and does not read yet")
        if keptName != nil { scheduleExportCheck(after: Self.keptExportGrace) }
        return
      }
      replaced.close()
      defer { replacedEdits.leave() }
      do {
        try exclusively { s throws(SharedDefaultsError) in
          // Judged once: by whoever still finds its second name (another process may have judged it from there).
          if let keptName, (try? root.status(Self.preferences + "/" + keptName)) ?? nil == nil { return }
          try catchUpExclusively(&s)
          try commitReplacedEdit(edited, bytes: bytes, &s, keptAs: keptName)
          if let keptName {
            try? root.removeFile(Self.preferences + "/" + keptName)
            try? root.removeFile(Self.preferences + "/" + Self.keptBase(keptName))
          }
        }
      } catch {
        Self.logger.error("suite '\(suite)': could not apply the edit of '\(plistPath)' by another tool: \(error)")
      }
    }
  }

  /// Refuses a state whose export the next process could not read back (the same limits as reading it), and
  /// records that the suite is over them: sets then fail with `suiteTooLarge` until removals bring it back under.
  /// `objects` and `payload` are the image's counts (its header): property-list objects, and bytes of strings,
  /// data and keys.
  private func checkLimits(objects: Int, payload: Int) throws(SharedDefaultsError) -> Int {
    let limits = Self.snapshotLimits
    guard objects <= limits.maxObjects, payload <= limits.maxBytes else {
      header.store(Slot.overLimit, 1)
      throw .suiteTooLarge(
        directory + "/\(suite).snapshot",
        "it holds \(objects) values and \(payload) bytes of strings and data; the limits are \(limits.maxObjects) and \(limits.maxBytes)"
      )
    }
    return payload + 16 * objects
  }

  private func recordSnapshotIdentity(_ st: FileStatus?) {
    header.store(Slot.snapshotInode, st?.inode ?? 0)
    header.store(Slot.snapshotSize, UInt64(st?.size ?? 0))
    header.store(Slot.snapshotTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
  }

  /// A file's identity as the header records it: inode, size, modification time.
  private typealias Identity = (inode: UInt64, size: Int64, time: Int64)

  /// A file's identity (0s for none), to compare with one the header recorded.
  private static func identity(_ st: FileStatus?) -> Identity {
    (st?.inode ?? 0, st?.size ?? 0, st?.modificationNanoseconds ?? 0)
  }

  /// The snapshot's identity as the header records it.
  private func recordedSnapshot() -> Identity {
    (header.load(Slot.snapshotInode), Int64(header.load(Slot.snapshotSize)), Int64(bitPattern: header.load(Slot.snapshotTime)))
  }

  /// The recorded export's identity (nil when none or stale).
  private func recordedExport() -> Identity? {
    let inode = header.load(Slot.exportInode)
    guard inode != 0 && inode != .max else { return nil }
    return (inode, Int64(header.load(Slot.exportSize)), Int64(bitPattern: header.load(Slot.exportTime)))
  }

  /// Links the snapshot as `<suite>.snapshot.exported`, the image the export holds (a suite adopted from its plist,
  /// or converted), in the current generation.
  private func pinExportBase() throws(FileSystemError) {
    try root.link(snapshotItem, to: "\(suite).snapshot.exported")
    header.store(Slot.exportGeneration, header.load(Slot.generation))
  }

  private func recordExportIdentity(_ st: FileStatus?) {
    header.store(Slot.exportSize, UInt64(st?.size ?? 0))
    header.store(Slot.exportTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
    header.store(Slot.exportInode, st?.inode ?? 0)
  }

  /// A new or damaged header, set up under flock: its lock word cannot guard its own initialization.
  private func initializeHeaderLocked() throws(SharedDefaultsError) {
    do { try lockFD.lock(.exclusive) } catch { Self.logger.critical("suite '\(suite)': flock failed: \(error)") }
    defer { lockFD.unlock() }
    guard header.load(Slot.magic) != Self.magic else { return }
    if header.load(Slot.magic) == Self.legacyMagic {
      // 0.1.0 kept the state in the plist: it becomes the snapshot; the journal and its length stay valid.
      try adoptPlistAsSnapshot(reason: "migrating from 0.1.0")
      header.store(Slot.overLimit, 0)
      header.store(Slot.magic, Self.magic)
      return
    }
    if header.load(Slot.generation) != 0 || header.load(Slot.committed) != 0 {
      // Not ours or damaged: the committed length cannot be trusted, so the journal is set aside.
      Self.logger.error("suite '\(suite)': header '\(directory)/\(suite).lock' is damaged; resetting it")
      quarantineJournal()
    }
    if try snapshotStatus() == nil {
      // A plist put there before the suite was first used (or a suite copied without its snapshot): the state.
      try adoptPlistAsSnapshot(reason: "a new suite starts from it")
    } else {
      recordSnapshotIdentity(try snapshotStatus())
      recordExportIdentity(nil)
      header.store(Slot.exportInode, .max)  // unknown: rewritten by the next compaction
    }
    header.store(Slot.committed, 0)
    header.store(Slot.lock, 0)
    header.store(Slot.journalCapacity, 0)  // unknown: the next write allocates what it needs
    header.store(Slot.overLimit, 0)
    header.store(Slot.journalInode, journalInode.load(ordering: .relaxed))
    header.increment(Slot.generation)
    header.store(Slot.exportGeneration, header.load(Slot.generation))
    header.store(Slot.magic, Self.magic)
  }

  /// With the lock held: the journal this process maps is not the one the header records — the file was removed
  /// (`rm`) or replaced. If another process already made a new one, this one maps it too (same bytes). If this
  /// process still maps the recorded journal, its committed records are copied into the file now at the name, so
  /// nothing is lost. Otherwise they are gone with the file: the journal starts empty in a new generation (every
  /// process reloads from the snapshot), and that is logged.
  private func followJournal() {
    let recorded = header.load(Slot.journalInode)
    let mine = journalInode.load(ordering: .relaxed)
    do {
      let files = try root.openDirectory(Self.preferences)
      defer { files.close() }
      let fd = try files.openOrCreate("\(suite).journal", mode: fileMode, size: 0)
      let inode = try fd.status().inode
      if inode == recorded {
        try journal.remap(onto: fd)
      } else {
        let committed = min(Int(header.load(Slot.committed)), Int(header.load(Slot.journalCapacity)))
        let salvaged =
          mine == recorded ? [UInt8](UnsafeRawBufferPointer(start: journal.base, count: max(committed, 0))) : nil
        let size = max((committed + 4095) / 4096 * 4096, 64 << 10)
        try journal.remap(onto: fd)
        try journal.allocate(upTo: size)
        header.store(Slot.journalCapacity, UInt64(size))
        if let salvaged {
          salvaged.withUnsafeBytes { journal.base.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
          Self.logger.warning("suite '\(suite)': '\(journalPath)' was removed; its records were copied into a new one")
        } else {
          Self.logger.error(
            "suite '\(suite)': '\(journalPath)' was removed; the writes it held since the last compaction are lost")
          header.store(Slot.committed, 0)
          header.increment(Slot.generation)
        }
        header.store(Slot.journalInode, inode)
      }
      journalInode.store(inode, ordering: .relaxed)
      seenJournalFaults.store(journal.faultCount, ordering: .relaxed)
    } catch {
      Self.logger.error("suite '\(suite)': cannot open '\(journalPath)' again: \(error)")
    }
  }

  /// Makes the plist's bytes the snapshot (when it parses) and records both: the plist is then the current export.
  private func adoptPlistAsSnapshot(reason: String) throws(SharedDefaultsError) {
    recordExportIdentity(nil)
    let plist: [String: PropertyListValue]
    let status: FileStatus?
    do {
      (plist, status) = try loadPlist(plistItem)
    } catch .unreachable(let error) {
      throw error
    } catch {
      Self.logger.error("suite '\(suite)': '\(plistPath)' cannot be used (\(error)); moved aside")
      quarantine("\(suite).plist")
      recordSnapshotIdentity(try snapshotStatus())
      return
    }
    guard let status else {
      recordSnapshotIdentity(try snapshotStatus())
      return
    }
    Self.logger.notice("suite '\(suite)': '\(plistPath)' becomes the suite's snapshot (\(reason))")
    try writeImage(of: plist)
    try SharedDefaultsError.wrap { () throws(FileSystemError) in try pinExportBase() }
    recordExportIdentity(status)
  }

  /// Replaces the snapshot with an image of `values` (a suite adopted from a plist) and records it.
  private func writeImage(of values: [String: PropertyListValue]) throws(SharedDefaultsError) {
    let bytes = try SuiteValues(dictionary: values).imageBytes(generation: header.load(Slot.generation), position: 0)
    _ = try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in
      try root.replaceFile(snapshotItem, with: bytes, mode: fileMode)
    }
    recordSnapshotIdentity(try snapshotStatus())
  }

  /// Moves the file `name` of the suite's directory aside (`<name>.corrupt-<time>-<pid>`), renamed relative to
  /// the directory's descriptor.
  private func quarantine(_ name: String) {
    let aside = name + ".corrupt-\(Int(Date().timeIntervalSince1970))-\(getpid())"
    do { try root.rename(Self.preferences + "/" + name, to: aside) } catch {
      if error.errno != .noSuchFileOrDirectory {
        Self.logger.error("could not move '\(directory)/\(name)' aside: \(error)")
      }
    }
  }

  /// The snapshot's status (nil when there is none), read beneath the container's descriptor.
  private func snapshotStatus() throws(SharedDefaultsError) -> FileStatus? {
    try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in try root.status(snapshotItem) }
  }

  /// Runs a call that reaches `item` beneath the container; a way out (a directory on the way swapped for a
  /// symlink that leads outside, which `RESOLVE_BENEATH` refuses with `EXDEV`) is `pathEscapesContainer`.
  private static func beneath<T>(
    _ item: String, in container: String, _ body: () throws(FileSystemError) -> T
  ) throws(SharedDefaultsError) -> T {
    do { return try body() } catch {
      guard error.errno == .improperLink else { throw .system(error) }
      throw .container(.pathEscapesContainer(item, container: container))
    }
  }

  private func quarantineJournal() {
    let committed = min(Int(header.load(Slot.committed)), Int(header.load(Slot.journalCapacity)), journal.reservation)
    if committed > 0 {
      let bytes = [UInt8](UnsafeRawBufferPointer(start: journal.base, count: committed))
      let aside = journalPath + ".corrupt-\(Int(Date().timeIntervalSince1970))-\(getpid())"
      do {
        let name = (aside as NSString).lastPathComponent
        try root.replaceFile("Library/Preferences/" + name, with: bytes, mode: fileMode)
      } catch {
        // The copy is for whoever investigates; the suite recovers without it.
        Self.logger.warning("suite '\(suite)': could not keep the damaged journal aside as '\(aside)': \(error)")
      }
    }
    header.store(Slot.committed, 0)
    // If the file was truncated, map it again and believe only the blocks it still has.
    let faults = journal.faultCount
    if faults != seenJournalFaults.load(ordering: .relaxed) {
      do { try journal.remap() } catch { Self.logger.critical("suite '\(suite)': \(error)") }
      seenJournalFaults.store(faults, ordering: .relaxed)
    }
    let size = ((try? journal.fileSize()) ?? 0) / 4096 * 4096
    header.store(Slot.journalCapacity, min(header.load(Slot.journalCapacity), UInt64(size)))
  }

  /// Called after `markIdleCheck()` said so: checks again once writes have stopped for a while.
  private func scheduleIdleCompaction() {
    // Weak: a store nobody uses is released without waiting for its idle compaction (the journal keeps its writes).
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.idleCompaction))) { [weak self] in
      guard let self else { return }
      let idle = state.withLock { s -> Bool in
        s.idleCheckScheduled = false
        return MonotonicClock.nanoseconds() - s.lastWrite >= Self.idleCompaction
      }
      guard idle else {
        if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
        return
      }
      // (A compaction started in the background ran before this: both are on the serial `background` queue.
      // Waiting for `compactions` here would wait for work queued behind this closure.)
      let committed = Int(header.load(Slot.committed))
      do {
        if committed > snapshotStart(generation: header.load(Slot.generation), committed: committed) {
          try exclusively { s throws(SharedDefaultsError) in
            try catchUpExclusively(&s)
            guard s.length > snapshotStart(generation: s.generation, committed: s.length) else { return }
            let rewind = s.length > compactionThresholds().rewind
            try compact(&s, durable: false, handOver: true, rewind: rewind)
          }
        }
        // The export follows the snapshot once writes stop (compactions while they go on leave it behind).
        if exportIsBehind() { try writeExport(durable: false) }
      } catch {
        Self.logger.warning("suite '\(suite)': idle compaction failed: \(error)")
      }
    }
  }

  // MARK: Applying and events

  private func apply(_ record: JournalFormat.Record, to values: inout SuiteValues) {
    switch record.operation {
    case .set(let value): values.set(value, forKey: record.key)
    case .remove: values.set(nil, forKey: record.key)
    }
  }

  private func apply(_ records: [JournalFormat.Record], to s: inout State) {
    guard !s.observers.isEmpty else {
      for record in records { apply(record, to: &s.values) }
      return
    }
    var changes: [DefaultsChange] = []
    for record in records {
      let old: PropertyListValue?
      let new: PropertyListValue?
      switch record.operation {
      case .set(let value):
        new = value
      case .remove:
        new = nil
      }
      old = s.values[record.key]
      s.values.set(new, forKey: record.key)
      // Process id 0: an edit of the export by another tool.
      let origin = record.pid == 0 ? nil : record.pid
      changes.append(DefaultsChange(key: record.key, oldValue: old, newValue: new, originProcessID: origin))
    }
    deliver(changes, to: s.observers)
  }

  /// Replaces the whole state (reload, adoption) and reports the keys whose values differ.
  private func replaceValues(with values: SuiteValues, in s: inout State) {
    let first = s.generation == .max
    if !first && !s.observers.isEmpty {
      // O(suite) with observers only: what every key was and is.
      let before = (try? s.values.dictionary()) ?? [:]
      let after = (try? values.dictionary()) ?? [:]
      var changes: [DefaultsChange] = []
      for key in Set(before.keys).union(after.keys) where before[key] != after[key] {
        changes.append(DefaultsChange(key: key, oldValue: before[key], newValue: after[key], originProcessID: nil))
      }
      deliver(changes.sorted { $0.key < $1.key }, to: s.observers)
    }
    release(s.values)
    s.values = values
  }

  /// Frees a dropped state on the background queue: a table of many values takes milliseconds to free.
  private func release(_ values: SuiteValues) {
    guard values.changeCount > 1024 else { return }
    background.async { withExtendedLifetime(values) {} }
  }

  /// Queued in application order on one serial queue, so observers see changes in commit order.
  private func deliver(_ changes: [DefaultsChange], to observers: [UInt64: Observer]) {
    guard !changes.isEmpty, !observers.isEmpty else { return }
    let targets = Array(observers.values)
    deliveries.async {
      for change in changes {
        for observer in targets where observer.keys?.contains(change.key) ?? true { observer.deliver(change) }
      }
    }
  }

  func addObserver(keys: Set<String>?, _ deliver: @escaping @Sendable (DefaultsChange) -> Void) -> UInt64 {
    _ = readCurrent { _ in 0 }  // start from the current state: later changes only
    return state.withLock { s in
      _ = refreshWithoutWaiting(&s)
      s.nextObserver += 1
      s.observers[s.nextObserver] = Observer(keys: keys, deliver: deliver)
      if observerCount.add(1, ordering: .relaxed).newValue == 1 { listenForWrites(true) }
      return s.nextObserver
    }
  }

  func removeObserver(_ id: UInt64) {
    if state.withLock({ $0.observers.removeValue(forKey: id) }) != nil,
      observerCount.subtract(1, ordering: .relaxed).newValue == 0
    {
      listenForWrites(false)
    }
  }

  // MARK: Other processes' writes

  /// inotify on `Library/Preferences`: a snapshot replaced (compaction, or an outside tool) — always watched.
  private func startWatching() {
    let plistName = "\(suite).plist"
    do {
      let journalName = "\(suite).journal"
      let token = try Watcher.shared.watch(directory) { [weak self] event in
        guard let self else { return }
        if event.name == plistName { self.scheduleExportCheck() }
        if event.name == journalName { self.scheduleJournalCheck() }
      }
      registrations.withLock { $0.watch = token }
    } catch {
      Self.logger.warning("suite '\(suite)': cannot watch '\(directory)' (\(error)); changes are seen on access only")
    }
  }

  /// Commits by any process (written through the mapping, so inotify never sees them) arrive through the
  /// suite's change signal; listened to only while this process has observers. The listener thread catches up
  /// itself: one thread hop from the writer's commit to the delivery queue.
  private func listenForWrites(_ on: Bool) {
    // Read-only: listening counts this process in the header, which it may not write (and nothing changes there).
    guard !readOnly else { return }
    let old = listener.withLock { current -> ChangeSignal.Listener? in
      defer {
        current =
          on
          ? signal.listen(name: "GroupContainer.SharedDefaults.\(suite)", coalesce: Self.observerCoalescing) {
            [weak self] in
            guard let self else { return }
            self.state.withLock { self.catchUpForObservers(&$0) }
          } : nil
      }
      return current
    }
    old?.cancel()
  }

  /// How long an observing process lets commits gather when they come faster than it catches up: a flood of
  /// commits then wakes it about 2,000 times a second, not once per commit, and costs the writers no system call.
  static let observerCoalescing: UInt64 = 500_000

  /// A wake-up of the listener: when every observer names its keys, the new records' keys are scanned in the
  /// mapping (no value decoded, nothing applied) and the state catches up only if one of those keys changed —
  /// otherwise it stays behind until something reads it. A process that observes one key of a busy suite then
  /// costs the writers almost nothing (4 such processes took 42 % of their throughput on two cores, applying
  /// every record). Anything unusual (a new generation, damage, a record that does not scan) catches up fully.
  private func catchUpForObservers(_ s: inout State) {
    var observed: [[UInt8]] = []
    var observedKeys = Set<String>()
    for observer in s.observers.values {
      guard let keys = observer.keys else { return _ = refreshWithoutWaiting(&s) }
      observedKeys.formUnion(keys)
    }
    for key in observedKeys { observed.append(Array(key.utf8)) }
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    // A rewind is moving the journal: its process posts again when done (catching up now would wait for its lock).
    guard header.load(Slot.rewindTo) == 0 else { return }
    if generation != s.generation, !followRewindForObservers(&s, observedKeys, generation, committed) {
      return _ = refreshWithoutWaiting(&s)
    }
    let capacity = Int(header.load(Slot.journalCapacity))
    var offset = s.scanned.generation == s.generation ? max(s.length, s.scanned.to) : s.length
    guard generation == s.generation, s.generation != .max, !headerLost.load(ordering: .relaxed),
      journal.faultCount == seenJournalFaults.load(ordering: .relaxed), offset <= committed,
      committed <= capacity, capacity <= journal.reservation
    else { return _ = refreshWithoutWaiting(&s) }
    let base = UnsafeRawPointer(journal.base)
    // A record: u32 length, u32 checksum, then op (1 byte), pid (4), key length (4), key.
    while offset < committed {
      guard committed - offset >= JournalFormat.headerBytes + 9 else { return _ = refreshWithoutWaiting(&s) }
      let length = Int(base.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
      let keyLength = Int(base.loadUnaligned(fromByteOffset: offset + 13, as: UInt32.self).littleEndian)
      guard length >= 9 + keyLength, length <= committed - offset - JournalFormat.headerBytes else {
        return _ = refreshWithoutWaiting(&s)
      }
      let key = UnsafeRawBufferPointer(start: base + offset + 17, count: keyLength)
      if observed.contains(where: { $0.count == keyLength && $0.withUnsafeBytes { $0.elementsEqual(key) } }) {
        return _ = refreshWithoutWaiting(&s)
      }
      offset += JournalFormat.headerBytes + length
    }
    // Scanned without the lock: good only if no compaction emptied the journal meanwhile.
    guard header.loadAfterFence(Slot.generation) == generation else { return _ = refreshWithoutWaiting(&s) }
    guard header.load(Slot.rewindTo) == 0 else { return }  // as above: scanned again after the rewind's post
    s.scanned = (generation, committed)
  }

  /// After a rewind (a new generation), for observers that all name their keys: the new snapshot becomes this
  /// process's image and the observed keys' values in it are compared with the old ones; the journal past it is
  /// then scanned like any other. A full catch-up would decode everything appended since the rewind began — every
  /// observing process, at every rewind. False when that cannot be done without the lock (then it catches up).
  private func followRewindForObservers(
    _ s: inout State, _ keys: Set<String>, _ generation: UInt64, _ committed: Int
  ) -> Bool {
    guard s.generation != .max, s.values.damage == nil, !headerLost.load(ordering: .relaxed),
      journal.faultCount == seenJournalFaults.load(ordering: .relaxed), header.load(Slot.rewindTo) == 0,
      let image = try? loadImage(), isRecordedSnapshot(image.status)
    else { return false }
    let values = SuiteValues(image: image)
    var changes: [DefaultsChange] = []
    for key in keys.sorted() {
      let (old, new) = (s.values[key], values[key])
      if old != new { changes.append(DefaultsChange(key: key, oldValue: old, newValue: new, originProcessID: nil)) }
    }
    // Good only if the image read is the generation's (no other rewind meanwhile) and read whole.
    guard values.damage == nil, s.values.damage == nil, header.loadAfterFence(Slot.generation) == generation,
      header.load(Slot.rewindTo) == 0
    else { return false }
    release(s.values)
    s.values = values
    s.ownWritesUnapplied = s.ownWritesUnapplied || !s.pendingOwn.isEmpty
    s.pendingOwn = [:]
    s.generation = generation
    s.length = snapshotStart(generation: generation, committed: committed)
    deliver(changes, to: s.observers)
    return true
  }

  /// The journal's name changed (removed, replaced): if it no longer leads to the file this process maps, follow
  /// it (`followJournal`, which carries the committed records over when this process maps the recorded one).
  private func scheduleJournalCheck() {
    guard !readOnly else { return }
    background.async { [self] in
      let atName = (try? root.status(Self.preferences + "/\(suite).journal"))??.inode
      guard atName != journalInode.load(ordering: .relaxed) else { return }
      do {
        try exclusively { s throws(SharedDefaultsError) in
          if header.load(Slot.journalInode) == journalInode.load(ordering: .relaxed) { followJournal() }
          try catchUpExclusively(&s)
        }
      } catch {
        Self.logger.error("suite '\(suite)': could not follow the journal: \(error)")
      }
    }
  }

  /// How long a half-written export is given before it is moved aside as unusable.
  static let exportRetryDelay = 0.25

  /// Looks at the export in the background (it changed, or a reload found it edited or stale): applies an outside
  /// edit, rewrites a stale export.
  private func scheduleExportCheck(after delay: Double = 0) {
    guard !readOnly else { return }
    background.asyncAfter(deadline: .now() + delay) { [self] in
      // The whole container went away (deleted): nothing to adopt.
      guard (try? root.status(Self.preferences)) ?? nil != nil else { return }
      guard state.withLock({ $0.generation != .max }) else { return }
      if hasKeptExports() {
        // Replaced exports kept for a tool's late write: applied (which marks the export stale) or dropped.
        do {
          let dir = try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
            try root.openDirectory(Self.preferences)
          }
          defer { dir.close() }
          let pending = try exclusively { s throws(SharedDefaultsError) -> Bool in try applyKeptExports(in: dir, &s) }
          if pending { scheduleExportCheck(after: Self.keptExportGrace) }
        } catch {
          Self.logger.error("suite '\(suite)': could not apply a replaced export's edit: \(error)")
        }
      }
      guard (try? exportState()) != .current else { return }
      do {
        // Applies an edit (`applyOutsideEdit`; a half-written one schedules this check again) and rewrites the
        // export (another process may have done it meanwhile: then the edit is not there any more).
        try writeExport(durable: false)
      } catch {
        Self.logger.error("suite '\(suite)': could not apply the outside change: \(error)")
      }
    }
  }

  // MARK: Locking

  /// The lock order, in one place: this process's writer gate, then the suite's lock, then `state`. Nothing waits
  /// for the suite's lock while holding `state`, so a reader in this process never waits behind a thread of its
  /// own that waits for another process.
  private func exclusively<T: Sendable, E: Error>(_ body: (inout State) throws(E) -> T) throws(E) -> T {
    try writerGate.withLock { _ throws(E) -> T in
      try withLock { () throws(E) -> T in
        try state.withLock { s throws(E) -> T in try body(&s) }
      }
    }
  }

  /// Runs `body` holding the suite's lock (callers hold the writer gate, so one thread per process asks for it),
  /// then signals other processes' observers if the committed state changed.
  private func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
    try locked(lock.lock(), body)
  }

  /// `withLock` when no other process holds the lock; nil, with nothing run, when one does (for work a reader may
  /// do on its way but must never wait for).
  private func withLockIfFree<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T? {
    guard let acquired = lock.tryLock() else { return nil }
    return try locked(acquired, body)
  }

  /// The rest of `withLock` once the lock is `acquired`.
  private func locked<T, E: Error>(_ first: SharedMemoryLock.Acquired, _ body: () throws(E) -> T) throws(E) -> T {
    var acquired = first
    while true {
      let faults = header.faultCount
      if faults == seenHeaderFaults.load(ordering: .relaxed) {
        if case .fromDeadOwner(let pid) = acquired {
          // What it left is safe by construction: bytes past the committed length are never read; a snapshot it
          // wrote but did not record is complete and read with the journal replayed over it; an export it did not
          // finish is marked stale and rewritten by the next reload.
          Self.logger.warning("suite '\(suite)': process \(pid) died holding the lock; took it over")
        }
        break
      }
      // The lock file was truncated: what we just took was a zero page of our own. Restore it and start again.
      lock.unlock()
      Self.logger.error("suite '\(suite)': '\(header.path)' was truncated by another program; restoring it")
      do { try header.restore() } catch { Self.logger.critical("suite '\(suite)': \(error)") }
      seenHeaderFaults.store(faults, ordering: .relaxed)
      if header.load(Slot.magic) != Self.magic {
        headerLost.store(true, ordering: .relaxed)
        try? initializeHeaderLocked()
      }
      acquired = lock.lock()
    }
    if header.load(Slot.journalInode) != journalInode.load(ordering: .relaxed) { followJournal() }
    let before = (header.load(Slot.generation), header.load(Slot.committed))
    if header.load(Slot.rewindTo) != 0 {
      // Only a lock holder moves the journal, and it clears the flag before unlocking: that one died.
      Self.logger.warning("suite '\(suite)': finishing a rewind whose process died during it")
      finishMove()
    }
    defer {
      let changed = before != (header.load(Slot.generation), header.load(Slot.committed))
      lock.unlock()
      if changed { signal.post() }
    }
    return try body()
  }
}
