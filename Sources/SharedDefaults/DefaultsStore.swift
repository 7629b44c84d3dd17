import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
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
///
/// One file per layer and its rule (the SharedDefaults article has the table): the header's words
/// (SuiteHeader.swift), records (JournalFormat.swift) and the journal file (SuiteJournal.swift), the image
/// (SuiteImageFormat.swift, SuiteImageBuilder.swift) and the state in memory (SuiteValues.swift), reading
/// (DefaultsStore+CatchUp.swift), compaction's rules (SuiteCompactor.swift) and its building (+Compaction), the
/// export (+Export) and outside edits (ExportMirror.swift, +OutsideEdits), recovery (+Recovery), the suite's other
/// files (+Files), observers (+Observers), the suite's files removed under it (+RemovedFiles); here: opening, writing,
/// the lock order.
final class DefaultsStore: @unchecked Sendable {  // mutable state is in `state` (a Mutex); files are fixed
  typealias Slot = SuiteHeader.Slot
  typealias Identity = SuiteHeader.Identity
  static let logger = Logger(label: "GroupContainer.SharedDefaults")
  /// Lock-free reads that found committed bytes which were not records (tests check it stays 0: a writer that
  /// published the committed length before copying its record would make it grow).
  static let committedButUnreadable = TestCounter()
  /// Snapshots this process read and parsed (tests check that another process's compaction that kept the journal
  /// costs this one none).
  static let snapshotLoads = TestCounter()
  /// Background compactions this process installed (tests: which process compacted).
  static let compactionsInstalled = TestCounter()
  /// Own writes appended behind others' and left for the next read to apply (tests: that path ran).
  static let ownWritesLeftForTheNextRead = TestCounter()
  /// Merged tiers of changes this process installed (tests: the background merge ran).
  static let tiersMerged = TestCounter()
  /// The open stores, by suite path: weak, so a suite no `SharedDefaults` uses any more is released (its mappings,
  /// descriptors, watch and registrations), and a process may open any number of suites one after another.
  static let stores = Mutex<[String: WeakStore]>([:])
  struct WeakStore { weak var store: DefaultsStore? }

  /// Address space reserved for the journal mapping: the largest journal (sets past it fail with a clear error).
  static let journalReservation = 256 << 20
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
  static let preferences = "Library/Preferences"
  /// The export, and the snapshot (paths relative to the container).
  let plistItem: String
  let snapshotItem: String
  /// The image the export was written from (a hard link to a snapshot that was current then).
  let exportedItem: String
  let root: ContainerDirectory
  /// For error messages: the container's path.
  let containerPath: String
  let journalPath: String
  let fileMode: mode_t
  let header: SuiteHeader
  /// The header's file, flock'ed only to initialize the header, whose lock word cannot guard its own
  /// initialization (replaced when the store moves onto files made again: DefaultsStore+RemovedFiles.swift).
  let lockFile: Mutex<DescriptorBox>
  let directoryMode: mode_t
  /// The container may only be read here: writes fail with `EROFS`, nothing runs in the background, reads take the
  /// lock-free path only (the header and journal are private, read-only copies: a store would change nothing).
  let readOnly: Bool
  let lock: SharedMemoryLock
  let signal: ChangeSignal
  let journal: SuiteJournal
  /// When to compact, who does, and how a new snapshot is installed (SuiteCompactor.swift).
  let compactor: SuiteCompactor
  let deliveries: DispatchQueue
  let background: DispatchQueue
  /// Edits written into a replaced export, still read again in the background (`applyReplacedEditLater`): the
  /// replaced file is reachable only through this process's descriptor, so `synchronize()` waits for them before
  /// the process may exit.
  let replacedEdits = DispatchGroup()
  /// Compactions this process runs in the background (`startCompaction`): `synchronize()` and a process about to
  /// exit wait for them (`waitForBackgroundWork`).
  let compactions = DispatchGroup()

  struct Observer {
    var keys: Set<String>?
    var deliver: @Sendable (DefaultsChange) -> Void
  }

  struct State {
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
    /// Journal records a load left unread (DefaultsStore+LazyTail.swift): `values` holds the image and what came
    /// after them; nil when `values` is the whole state.
    var tail: LazyTail?

    /// True when no idle check is scheduled yet (the caller schedules one).
    mutating func markIdleCheck() -> Bool {
      defer { idleCheckScheduled = true }
      return !idleCheckScheduled
    }
  }
  let state = Mutex(State())
  /// Read by the watcher thread, which must never wait for `state` (a writer may hold it while it waits for flock).
  let observerCount = Atomic<Int>(0)
  /// A repair is queued on `background` (reads never wait for it).
  let repairPending = Atomic<Bool>(false)
  /// A move onto the files at the names is queued on `background` (`scheduleMoveCheck`), or under way.
  let movePending = Atomic<Bool>(false)
  /// A move is under way (its thread holds the writer gate): `locked` starts no other inside it.
  let moving = Atomic<Bool>(false)
  /// A rebase is queued on `background` (`scheduleRebase`).
  let rebasePending = Atomic<Bool>(false)
  /// A merge of sealed tiers is queued on `background` (`mergeTiersIfNeeded`).
  let mergePending = Atomic<Bool>(false)
  /// Serializes this process's threads before the suite's lock (which names a process, not a thread).
  let writerGate = Mutex<Int>(0)
  let listener = Mutex<ChangeSignal.Listener?>(nil)
  /// SIGBUS faults of the header's mapping already dealt with (a new one means the file was truncated under us).
  let seenHeaderFaults = Atomic<UInt32>(0)
  /// The lock file was truncated and set up again: the committed length is lost, so the journal cannot be trusted
  /// and this process's state (the last good one it knows) becomes the snapshot.
  let headerLost = Atomic<Bool>(false)

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
      s.tail = nil
      s.generation = .max  // the next access reloads
      s.length = 0
      return bytes
    }
  }

  init(suite: String, directory: String, container: GroupContainer) throws(SharedDefaultsError) {
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
    let lockName = "\(suite).lock"
    // A container this process may only read (a read-only file system, or no write permission): its files are
    // opened read-only and mapped privately, and only the lock-free reading path runs (`readOnly`).
    var readOnly = false
    header = try Self.beneath(Self.preferences + "/" + lockName, in: container.path) { () throws(FileSystemError) in
      do throws(FileSystemError) {
        return SuiteHeader(
          counters: try MappedCounters(
            fd: files.openOrCreate(lockName, mode: fileMode, size: Int64(MappedCounters.fileSize))))
      } catch  where error.errno == .readOnlyFileSystem || error.errno == .permissionDenied {
        readOnly = true
        return SuiteHeader(counters: try MappedCounters(fd: files.open(lockName, .readOnly), readOnly: true))
      }
    }
    self.readOnly = readOnly
    lockFile = Mutex(
      DescriptorBox(
        try SharedDefaultsError.wrap { () throws(FileSystemError) in
          try files.open(lockName, readOnly ? .readOnly : .readWrite)
        }))
    directoryMode = container.sharing.directoryMode
    lock = SharedMemoryLock(header.counters, index: Slot.lock) { [container] pid, start in
      container.processIsAlive(pid: pid, startTimeLow32: start)
    }
    signal = ChangeSignal(
      header.counters, sequence: Slot.changeSequence, listeners: Slot.listeners, sleepers: Slot.sleepers)
    do {
      let header = header
      journal = try SharedDefaultsError.wrap { () throws(FileSystemError) in
        try SuiteJournal(
          suite: suite, header: header, root: root, directoryItem: Self.preferences, directory: files, mode: fileMode,
          reservation: Self.journalReservation, readOnly: readOnly)
      }
    }  // on a throw `lockFile` closes with the partly made store
    compactor = SuiteCompactor(header: header, journal: journal)
    deliveries = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).deliveries")
    background = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).background")
    if readOnly {
      // Nothing here may be initialized or migrated: only a suite in the current format is read.
      guard header.load(Slot.magic) == SuiteHeader.magic else {
        throw .system(FileSystemError("open", directory + "/" + lockName, .readOnlyFileSystem))
      }
      return
    }
    if header.load(Slot.magic) != SuiteHeader.magic { try initializeHeaderLocked() }
    journal.recordInodeIfNone()
  }

  /// Released with the store.
  let registrations = Mutex<(watch: Watcher.Token?, memory: MemoryWarningRegistration?)>((nil, nil))

  deinit {
    let (watch, memory) = registrations.withLock { $0 }
    if let watch { Watcher.shared.cancel(watch) }
    memory?.cancel()
    // `lockFile` closes after this, with the store.
  }

  // MARK: Reading

  /// The current value: from memory when the header says nothing changed (no system call); after a load that left
  /// a lazy tail, from a scan of it for this key (DefaultsStore+LazyTail.swift).
  func value(forKey key: String) -> PropertyListValue? {
    for _ in 0..<3 {
      let answer = state.withLock { s -> PropertyListValue?? in
        guard refreshWithoutWaiting(&s) || readOnly else { return nil }
        let answer =
          s.tail == nil
          ? .some(s.values[key] ?? s.registered[key]) : lookUp(key, in: &s).map { $0 ?? s.registered[key] }
        if s.values.damage != nil { scheduleRepair() }  // the image did not read: this read answered without it
        return answer
      }
      if let answer { return answer }
    }
    return readCurrent { s in s.values[key] ?? s.registered[key] }
  }

  func snapshot(includingRegistered: Bool) -> [String: PropertyListValue] {
    readCurrent { s in
      let values = (try? s.values.dictionary()) ?? [:]
      return includingRegistered ? s.registered.merging(values) { $1 } : values
    }
  }

  func register(_ defaults: [String: PropertyListValue]) {
    state.withLock { s in s.registered.merge(defaults) { $1 } }
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
      try append(records, &s)
      return result
    }
    if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
    return result
  }

  /// Writing to a suite of a container this process may only read.
  func refuseIfReadOnly() throws(SharedDefaultsError) {
    guard readOnly else { return }
    throw .system(FileSystemError("write", journalPath, .readOnlyFileSystem))
  }

  /// `append` of `records` encoded here, under the lock (`write` encodes before it takes the lock).
  func append(_ records: [JournalFormat.Record], _ s: inout State) throws(SharedDefaultsError) {
    var bytes: [UInt8] = []
    for record in records { try JournalFormat.encode(record, into: &bytes) }
    try append(bytes, records, &s)
  }

  /// Called with the lock held, in the current generation (`needsCatchUpBeforeAppending` is false).
  func append(
    _ bytes: [UInt8], _ records: [JournalFormat.Record], _ s: inout State, mayCompact: Bool = true
  ) throws(SharedDefaultsError) {
    if header.load(Slot.overLimit) != 0, records.contains(where: { $0.operation != .remove }) {
      throw .suiteTooLarge(directory + "/\(suite).snapshot", "a compaction found it over the limits")
    }
    var offset = 0
    for attempt in 0..<2 {
      offset = header.length(Slot.committed)
      try journal.reserve(upTo: offset + bytes.count)
      if journal.write(bytes, at: offset) { break }
      // The file was truncated under us: the bytes went to a zero page. Repair, then write them again (once).
      guard attempt == 0 else { throw .system(FileSystemError("write", journalPath, .ioError)) }
      try repairAndCatchUp(&s, .corruptJournal("the journal file was truncated by another program"))
    }
    let end = offset + bytes.count
    header.store(Slot.lastRecord, JournalFormat.lastRecordWord(of: bytes))  // for a copy of the journal: `follow`
    header.store(Slot.committed, UInt64(end))  // the commit point
    if offset == s.length {
      s.length = end
      apply(records, to: &s)
    } else if s.observers.isEmpty {
      // Others wrote since this process caught up. Holding this write in memory now (pendingOwn) makes a process
      // that only writes keep every key it ever wrote, and 4 writers growing a suite spent half their time growing
      // those tables: the next read applies it with the others' records instead, from the journal.
      s.ownWritesUnapplied = true
      Self.ownWritesLeftForTheNextRead.add()
    } else {
      for record in records { s.pendingOwn[record.key] = (offset, end) }
      apply(records, to: &s)
    }
    s.lastWrite = MonotonicClock.nanoseconds()
    let thresholds = compactor.thresholds()
    let start = header.snapshotStart(generation: s.generation, committed: end)
    // Also by the number of changes held: the table grows by doubling, and growing a large one stalls a set.
    let manyChanges = s.values.changeCount > max(Self.changesBeforeCompaction, (s.values.image?.count ?? 0) / 4)
    guard mayCompact, end - start > thresholds.snapshot || end > thresholds.rewind || manyChanges else { return }
    // Most of the time a compaction is under way already (here or in another process): nothing to do. Past the
    // rewind threshold it also empties the journal (`finishCompaction`); only when background compactions did not
    // manage to — writes outpacing them (what was appended during a build must be no longer than what it holds),
    // or a stopped compactor holding its claim — is the journal emptied here, at four times the threshold (at
    // twice it, 4 writers' 16 MB benchmark runs reached it, and its O(suite) under the lock showed).
    let lastResort = end > min(journal.reservation / 4 * 3, 4 * thresholds.rewind)
    guard lastResort || (s.values.frozenToken == 0 && compactor.claimIsFree()) else { return }
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

  /// The changes this process holds over its image (tests: memory follows what it reads).
  func heldChanges() -> Int { state.withLock { $0.values.changeCount } }

  /// Serializes `writeExport` in this process.
  let exportGate = Mutex<Void>(())

  /// `synchronize()` calls under way in this process: an idle compaction leaves them the work (it would compact and
  /// export a second time beside them: a third of a 600,000-key writer's CPU).
  let synchronizing = Atomic<Int>(0)

  /// Waits (without the lock: the work takes it) until the compactions this process runs in the background are
  /// done, and the edits a tool wrote into exports this process replaced are committed or given up (bounded by
  /// their tries): before this process may exit.
  func waitForBackgroundWork() {
    compactions.wait()
    _ = replacedEdits.wait(timeout: .now() + .nanoseconds(Int(Self.exportRetryDelay) * (Self.replacedEditTries + 2)))
  }

  // MARK: Locking

  /// The lock order, in one place: this process's writer gate, then the suite's lock, then `state`. Nothing waits
  /// for the suite's lock while holding `state`, so a reader in this process never waits behind a thread of its
  /// own that waits for another process.
  func exclusively<T: Sendable, E: Error>(_ body: (inout State) throws(E) -> T) throws(E) -> T {
    try writerGate.withLock { _ throws(E) -> T in
      try withLock { () throws(E) -> T in
        try state.withLock { s throws(E) -> T in
          applyTail(&s)  // what runs with the lock works on the whole state
          defer { mergeTiersIfNeeded(s) }
          return try body(&s)
        }
      }
    }
  }

  /// Runs `body` holding the suite's lock (callers hold the writer gate, so one thread per process asks for it),
  /// then signals other processes' observers if the committed state changed.
  func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
    try locked(lock.lock(), body)
  }

  /// `withLock` when no other process holds the lock; nil, with nothing run, when one does (for work a reader may
  /// do on its way but must never wait for).
  func withLockIfFree<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T? {
    guard let acquired = lock.tryLock() else { return nil }
    return try locked(acquired, body)
  }

  /// The rest of `withLock` once the lock is `acquired`.
  func locked<T, E: Error>(_ first: SharedMemoryLock.Acquired, _ body: () throws(E) -> T) throws(E) -> T {
    var acquired = first
    var moved = false
    while true {
      let faults = header.faultCount
      if faults == seenHeaderFaults.load(ordering: .relaxed) {
        if header.load(Slot.filesRemoved) != 0, !moved, !moving.load(ordering: .acquiring) {
          // Another process moved onto new files (DefaultsStore+RemovedFiles.swift): so does this one, first.
          moved = true
          lock.unlock()
          _ = moveToFilesAtName()
          acquired = lock.lock()
          continue
        }
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
      if header.load(Slot.magic) != SuiteHeader.magic {
        headerLost.store(true, ordering: .relaxed)
        try? initializeHeaderLocked()
      }
      acquired = lock.lock()
    }
    if !journal.mapsRecordedFile, !headerIsElsewhere() { journal.follow() }
    let before = (header.load(Slot.generation), header.load(Slot.committed))
    if journal.isMoving {
      // Only a lock holder moves the journal, and it clears the flag before unlocking: that one died.
      Self.logger.warning("suite '\(suite)': finishing a rewind whose process died during it")
      journal.finishMove()
    }
    // Only a lock holder judges a tool's file, and it settles its decision before unlocking: that one died.
    header.settleJudging()
    defer {
      let changed = before != (header.load(Slot.generation), header.load(Slot.committed))
      lock.unlock()
      if changed { signal.post() }
    }
    return try body()
  }
}
