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
/// - `<suite>.plist` — the snapshot, a binary plist any plist tool reads; replaced only by atomic replace;
/// - `<suite>.journal` — set/remove records appended since the snapshot (JournalFormat.swift), mapped shared;
/// - `<suite>.lock` — a stable file, mapped: the header (magic, generation, committed journal length, the
///   snapshot's identity, the journal's allocated size), the suite's lock word and its change signal.
///
/// **Write**: lock → copy the record into the mapped journal at the committed length → publish the new length in
/// the header (the commit point) → unlock → signal listeners. A set does not catch up first: it comes after
/// whatever others appended, so it is applied at once and the records it jumped over are applied later (`catchUp`
/// skips those it supersedes), which keeps writers from decoding each other's records on every set. No system call when the lock is free and
/// the journal has room: this is what makes a set cheaper than even one flock pair (see `SharedMemoryLock`). A
/// writer killed before the commit leaves bytes past the committed length that nobody reads and the next writer
/// overwrites; the pages live in the page cache, so a committed record survives the death of its writer.
/// **Read**: two atomic loads of the mapped header; when they match what this process applied, no system call.
/// Otherwise lock and apply only the new records (or reload after a compaction).
/// **Compaction** (journal over 1 MiB, idle for 5 s, `synchronize()`): rewrite the snapshot, reset the committed
/// length, bump the generation. The journal file is never shrunk (others map it: see SharedFileMapping).
/// **Recovery** (under the lock): a snapshot that is not what the header recorded was replaced by an outside
/// tool and is adopted (diffed into change events); a snapshot that does not parse is moved aside to
/// `<suite>.plist.corrupt-<time>` and rewritten from the last good state; a corrupt journal is moved aside the
/// same way after applying its good prefix.
final class DefaultsStore: @unchecked Sendable {  // mutable state is in `state` (a Mutex); files are fixed
  static let logger = Logger(label: "GroupContainer.SharedDefaults")
  private static let stores = Mutex<[String: DefaultsStore]>([:])

  private enum Slot {
    static let magic = 0, generation = 1, committed = 2, snapshotInode = 3, snapshotSize = 4, snapshotTime = 5
    /// Set by a plain compaction: the generation and committed length it folded into the snapshot. A reader
    /// that had applied exactly that much already holds the snapshot's contents and need not read it.
    static let foldedGeneration = 6, foldedLength = 7
    /// The lock word (SharedMemoryLock); bytes of the journal file allocated so far; the change signal.
    static let lock = 8, journalCapacity = 9, changeSequence = 10, listeners = 11
  }
  private static let magic: UInt64 = 0x3254_4c46_4544_4347  // "GCDEFLT2"
  /// Address space reserved for the journal mapping: above the largest journal a compaction allows (twice the
  /// snapshot limit) plus the largest record.
  static let journalReservation = 4 * PropertyListLimits.default.maxBytes
  static let compactionThreshold = 1 << 20
  static let idleCompaction: UInt64 = 5_000_000_000
  static let snapshotLimits = PropertyListLimits.default

  let suite: String
  let directory: String
  let plistPath: String
  /// The suite's directory and snapshot relative to `root`: every file of the suite is opened, created, checked
  /// and renamed beneath the container's descriptor, never by a path string (a directory on the way swapped for
  /// a symlink to outside makes the call fail, never land outside).
  private static let preferences = "Library/Preferences"
  private let plistItem: String
  private let root: ContainerDirectory
  /// For error messages: the container's path.
  private let containerPath: String
  let journalPath: String
  private let fileMode: mode_t
  private let header: MappedCounters
  /// flock'ed only to initialize the header, whose lock word cannot guard its own initialization.
  private let lockFD: SystemFD
  private let lock: SharedMemoryLock
  private let signal: ChangeSignal
  private let journal: SharedFileMapping
  private let deliveries: DispatchQueue
  private let background: DispatchQueue

  struct Observer {
    var keys: Set<String>?
    var deliver: @Sendable (DefaultsChange) -> Void
  }

  private struct State {
    var values: [String: PropertyListValue] = [:]
    var registered: [String: PropertyListValue] = [:]
    var generation: UInt64 = .max
    /// `values` holds the journal up to here (plus `pendingOwn`).
    var length = 0
    /// Own records appended past `length` without catching up first (their commit's start and end offsets), by
    /// key: already in `values`, and newer than any record before them in the journal.
    var pendingOwn: [String: (start: Int, end: Int)] = [:]
    var observers: [UInt64: Observer] = [:]
    var nextObserver: UInt64 = 0
    var lastWrite: UInt64 = 0
    var idleCheckScheduled = false

    /// True when no idle check is scheduled yet (the caller schedules one).
    mutating func markIdleCheck() -> Bool {
      defer { idleCheckScheduled = true }
      return !idleCheckScheduled
    }
  }
  private let state = Mutex(State())
  /// Read by the watcher thread, which must never wait for `state` (a writer may hold it while it waits for flock).
  private let observerCount = Atomic<Int>(0)
  private let refreshPending = Atomic<Bool>(false)
  private let listener = Mutex<ChangeSignal.Listener?>(nil)
  /// SIGBUS faults of the mappings already dealt with (a new one means a file was truncated under us).
  private let seenHeaderFaults = Atomic<UInt32>(0)
  private let seenJournalFaults = Atomic<UInt32>(0)
  /// The lock file was truncated and set up again: the committed length is lost, so the journal cannot be trusted
  /// and this process's state (the last good one it knows) becomes the snapshot.
  private let headerLost = Atomic<Bool>(false)

  /// Why catching up needs the exclusive lock.
  private enum Repair: Error {
    case outsideSnapshot
    case corruptSnapshot(String)
    case corruptJournal(String)
    /// The suite's directory cannot be reached beneath the container (no repair: the operation fails with this).
    case unreachable(SharedDefaultsError)
  }

  static func open(suite: String, container: GroupContainer) throws(SharedDefaultsError) -> DefaultsStore {
    let directory = container.preferencesURL.path
    let key = directory + "/" + suite
    if let store = stores.withLock({ $0[key] }) { return store }
    let store = try DefaultsStore(suite: suite, directory: directory, container: container)
    let (chosen, fresh) = stores.withLock { stores -> (DefaultsStore, Bool) in
      if let existing = stores[key] { return (existing, false) }
      stores[key] = store
      store.startWatching()
      return (store, true)
    }
    if fresh {
      // Stores live as long as the process: the registration is never cancelled.
      _ = MemoryPressure.shared.onMemoryWarning(name: "shared defaults '\(suite)'", container: container) {
        [weak store] _ in store?.dropValuesIfUnused() ?? 0
      }
    }
    return chosen
  }

  /// The store of a suite that exists (its lock file or its snapshot plist is in `Library/Preferences`), or nil:
  /// a suite name that was never written (a typo) creates nothing. Checked beneath the container's descriptor.
  /// A suite removed between the check and the open is made again: it existed, so that is no typo's doing.
  static func openExisting(suite: String, container: GroupContainer) throws(SharedDefaultsError) -> DefaultsStore? {
    if let store = stores.withLock({ $0[container.preferencesURL.path + "/" + suite] }) { return store }
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
  /// pending) drops its values, which the next access reads again from the snapshot and journal (a reload, as
  /// after another process's compaction). Registered defaults stay: nothing could read them again. Returns about
  /// how many bytes the values held.
  func dropValuesIfUnused() -> Int {
    state.withLock { s in
      guard s.observers.isEmpty, s.pendingOwn.isEmpty, s.generation != .max,
        MonotonicClock.nanoseconds() &- s.lastWrite >= Self.idleCompaction
      else { return 0 }
      let bytes = s.values.reduce(0) { $0 + $1.key.utf8.count + Self.approximateSize(of: $1.value) }
      s.values = [:]
      s.generation = .max  // `refreshIfChanged` reloads on the next access
      s.length = 0
      return bytes
    }
  }

  private static func approximateSize(of value: PropertyListValue) -> Int {
    switch value {
    case .string(let string): return 16 + string.utf8.count
    case .data(let bytes): return 16 + bytes.count
    case .array(let items): return 16 + items.reduce(0) { $0 + approximateSize(of: $1) }
    case .dictionary(let items): return 16 + items.reduce(0) { $0 + $1.key.utf8.count + approximateSize(of: $1.value) }
    default: return 16
    }
  }

  private init(suite: String, directory: String, container: GroupContainer) throws(SharedDefaultsError) {
    let fileMode = container.sharing.fileMode
    self.suite = suite
    self.directory = directory
    self.plistPath = directory + "/\(suite).plist"
    self.plistItem = Self.preferences + "/\(suite).plist"
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
    header = try Self.beneath(Self.preferences + "/" + lockName, in: container.path) { () throws(FileSystemError) in
      try MappedCounters(fd: files.openOrCreate(lockName, mode: fileMode, size: Int64(MappedCounters.fileSize)))
    }
    lockFD = try SharedDefaultsError.wrap { () throws(FileSystemError) in try files.open(lockName, .readWrite) }
    lock = SharedMemoryLock(header, index: Slot.lock) { [container] pid, start in
      container.processIsAlive(pid: pid, startTimeLow32: start)
    }
    signal = ChangeSignal(header, sequence: Slot.changeSequence, listeners: Slot.listeners)
    do {
      journal = try SharedDefaultsError.wrap { () throws(FileSystemError) in
        try SharedFileMapping(
          name: "\(suite).journal", in: files, mode: fileMode, reservation: Self.journalReservation)
      }
    } catch {
      lockFD.close()
      throw error
    }
    deliveries = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).deliveries")
    background = DispatchQueue(label: "GroupContainer.SharedDefaults.\(suite).background")
    if header.load(Slot.magic) != Self.magic { try initializeHeaderLocked() }
  }

  deinit { lockFD.close() }

  // MARK: Reading

  /// The current value: from memory when the header says nothing changed (no system call).
  func value(forKey key: String) -> PropertyListValue? {
    state.withLock { s in
      refreshIfChanged(&s)
      return s.values[key] ?? s.registered[key]
    }
  }

  func snapshot(includingRegistered: Bool) -> [String: PropertyListValue] {
    state.withLock { s in
      refreshIfChanged(&s)
      return includingRegistered ? s.registered.merging(s.values) { $1 } : s.values
    }
  }

  func register(_ defaults: [String: PropertyListValue]) {
    state.withLock { s in s.registered.merge(defaults) { $1 } }
  }

  private func refreshIfChanged(_ s: inout State) {
    guard header.load(Slot.generation) != s.generation || header.load(Slot.committed) != UInt64(s.length) else {
      return
    }
    do {
      try withLock { () throws(SharedDefaultsError) in try catchUpExclusively(&s) }
    } catch {
      Self.logger.error("suite '\(suite)': could not recover: \(error)")
    }
  }

  // MARK: Writing

  /// Appends `records` as one commit; returns after they are visible to every process.
  func write(_ records: [JournalFormat.Record]) throws(SharedDefaultsError) {
    var bytes: [UInt8] = []
    for record in records { try JournalFormat.encode(record, into: &bytes) }
    let firstWriteSinceIdle = try state.withLock { s throws(SharedDefaultsError) -> Bool in
      try withLock { () throws(SharedDefaultsError) in
        if needsCatchUpBeforeAppending(generation: s.generation, length: s.length) { try catchUpExclusively(&s) }
        try append(bytes, records, &s)
      }
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
    _ body: (_ values: [String: PropertyListValue], _ registered: [String: PropertyListValue]) throws -> (
      records: [JournalFormat.Record], result: T
    )
  ) throws -> T {
    let result = try state.withLock { s -> T in
      try withLock { () throws -> T in
        try catchUpExclusively(&s)
        let (records, result) = try body(s.values, s.registered)
        guard !records.isEmpty else { return result }
        var bytes: [UInt8] = []
        for record in records { try JournalFormat.encode(record, into: &bytes) }
        try append(bytes, records, &s)
        return result
      }
    }
    if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
    return result
  }

  /// Makes the snapshot current and durable (survives power loss).
  func synchronize() throws(SharedDefaultsError) {
    try state.withLock { s throws(SharedDefaultsError) in
      try withLock { () throws(SharedDefaultsError) in
        try catchUpExclusively(&s)
        try compact(&s, durable: true, handOver: true)
      }
    }
  }

  /// Whether the journal changed in a way only a full catch-up handles (a compaction, a repair, damage).
  private func needsCatchUpBeforeAppending(generation: UInt64, length: Int) -> Bool {
    headerLost.load(ordering: .relaxed) || journal.faultCount != seenJournalFaults.load(ordering: .relaxed)
      || header.load(Slot.generation) != generation || Int(header.load(Slot.committed)) < length
  }

  /// Called with the lock held, in the current generation (`needsCatchUpBeforeAppending` is false).
  private func append(_ bytes: [UInt8], _ records: [JournalFormat.Record], _ s: inout State) throws(SharedDefaultsError)
  {
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
    } else {
      for record in records { s.pendingOwn[record.key] = (offset, end) }
    }
    apply(records, to: &s)
    s.lastWrite = MonotonicClock.nanoseconds()
    // Compaction costs O(suite); wait until the journal is as large as the snapshot, so it stays amortized O(1).
    let threshold = max(Self.compactionThreshold, 2 * Int(header.load(Slot.snapshotSize)))
    guard end > threshold else { return }
    // The write is committed whatever happens now: a compaction that fails (full disk) is retried by the next one.
    do {
      try catchUpExclusively(&s)
      try compact(&s, durable: false, handOver: true)
    } catch {
      Self.logger.warning("suite '\(suite)': compaction failed, the journal keeps growing: \(error)")
    }
  }

  /// Makes sure the journal file has disk blocks for its first `end` bytes (a full disk fails here, cleanly).
  private func reserveJournal(upTo end: Int) throws(SharedDefaultsError) {
    let capacity = Int(header.load(Slot.journalCapacity))
    guard end > capacity else { return }
    guard end <= journal.reservation else { throw .valueTooLarge("(journal)", journal.reservation) }
    // Grow geometrically so allocation stays off the per-write cost.
    let page = 4096
    let wanted = min(journal.reservation, max(end, 2 * capacity, 64 << 10))
    let size = (wanted + page - 1) / page * page
    try SharedDefaultsError.wrap { () throws(FileSystemError) in try journal.allocate(upTo: size) }
    header.store(Slot.journalCapacity, UInt64(size))
  }

  // MARK: Catching up

  /// Brings `s` to the committed state. Needs the lock. Throws `Repair` when files need repairing first.
  private func catchUp(_ s: inout State) throws(Repair) {
    if journal.faultCount != seenJournalFaults.load(ordering: .relaxed) {
      throw .corruptJournal("the journal file was truncated by another program")
    }
    let generation = header.load(Slot.generation)
    let committed = Int(header.load(Slot.committed))
    // Shorter than what we applied, same generation: a compaction died between publishing the length and the
    // generation; its snapshot is complete (it was written first), so reload from it.
    if generation != s.generation || committed < s.length {
      try reload(&s, generation: generation, committed: committed)
      return
    }
    guard committed != s.length else { return }
    let bytes = try readJournal(from: s.length, to: committed)
    var records: [JournalFormat.Record] = []
    var offsets: [Int] = []
    var corruption: JournalFormat.Corruption?
    do { try JournalFormat.decode(bytes, base: s.length, into: &records, offsets: &offsets) } catch {
      corruption = error
    }
    if !s.pendingOwn.isEmpty {
      // Our own pending records are applied already, and they supersede older records of the same keys.
      let pending = s.pendingOwn
      records = zip(records, offsets).filter { record, offset in
        guard let own = pending[record.key] else { return true }
        return offset >= own.end
      }.map(\.0)
      if corruption == nil { s.pendingOwn = [:] }  // every pending commit ends at or before `committed`
    }
    apply(records, to: &s)
    if let corruption { throw .corruptJournal(corruption.description) }
    s.length = committed
  }

  private func readJournal(from start: Int, to end: Int) throws(Repair) -> [UInt8] {
    let capacity = Int(header.load(Slot.journalCapacity))
    guard start <= end, end <= capacity, capacity <= journal.reservation else {
      throw .corruptJournal("the committed length \(end) lies beyond the journal's \(capacity) allocated bytes")
    }
    // A page lost to an outside truncation reads as zeros (SIGBUS guard) and fails its checksum.
    let bytes = [UInt8](UnsafeRawBufferPointer(start: journal.base + start, count: end - start))
    if journal.faultCount != seenJournalFaults.load(ordering: .relaxed) {
      throw .corruptJournal("the journal file was truncated by another program")
    }
    return bytes
  }

  /// Reads the snapshot and the whole journal (after a compaction somewhere, or on first use).
  private func reload(_ s: inout State, generation: UInt64, committed: Int) throws(Repair) {
    guard try snapshotIsTheRecordedOne() else { throw .outsideSnapshot }
    if s.generation != .max, s.pendingOwn.isEmpty, header.load(Slot.foldedGeneration) == s.generation,
      header.load(Slot.foldedLength) == UInt64(s.length), header.load(Slot.generation) == generation
    {
      // A compaction folded exactly what we have into the snapshot: skip reading it.
      s.generation = generation
      s.length = 0
      try catchUp(&s)
      return
    }
    var values = try loadSnapshot()
    let bytes = try readJournal(from: 0, to: committed)
    var records: [JournalFormat.Record] = []
    var corruption: JournalFormat.Corruption?
    do { try JournalFormat.decode(bytes, base: 0, into: &records) } catch { corruption = error }
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
    s.pendingOwn = [:]
    s.generation = generation
    s.length = committed
    if let corruption { throw .corruptJournal(corruption.description) }
  }

  private func loadSnapshot() throws(Repair) -> [String: PropertyListValue] {
    // Not reaching the directory says nothing about the snapshot; only what is found there may be set aside.
    let files: SystemFD
    do { files = try preferencesDirectory() } catch { throw .unreachable(error) }
    defer { files.close() }
    let bytes: [UInt8]
    do {
      let file = try files.open("\(suite).plist", .readOnly)
      defer { file.close() }
      bytes = try file.readRegularFile(limit: Self.snapshotLimits.maxBytes).bytes
    } catch {
      if error.errno == .noSuchFileOrDirectory { return [:] }
      throw .corruptSnapshot("cannot read: \(error)")
    }
    do {
      let value = try PropertyListValue(bytes: bytes, limits: Self.snapshotLimits)
      guard case .dictionary(let dictionary) = value else {
        throw Repair.corruptSnapshot("the top level is not a dictionary")
      }
      return dictionary
    } catch let error as Repair {
      throw error
    } catch {
      throw .corruptSnapshot("\(error)")
    }
  }

  /// Whether the snapshot on disk is the one the header recorded (else an outside tool replaced or edited it).
  private func snapshotIsTheRecordedOne() throws(Repair) -> Bool {
    let st: FileStatus?
    do { st = try snapshotStatus() } catch { throw .unreachable(error) }
    return header.load(Slot.snapshotInode) == (st?.inode ?? 0)
      && header.load(Slot.snapshotSize) == UInt64(st?.size ?? 0)
      && header.load(Slot.snapshotTime) == UInt64(bitPattern: st?.modificationNanoseconds ?? 0)
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
      case .unreachable(let error):
        throw error
      case .outsideSnapshot:
        try adoptOutsideSnapshot(&s)
      case .corruptSnapshot(let reason):
        Self.logger.error(
          "suite '\(suite)': snapshot '\(plistPath)' is corrupt (\(reason)); moved aside, recovering the last good state"
        )
        quarantine("\(suite).plist")
        recoverJournal(into: &s)
        try compact(&s, durable: false)
      case .corruptJournal(let reason):
        Self.logger.error(
          "suite '\(suite)': journal '\(journalPath)' is corrupt (\(reason)); moved aside after its good records")
        quarantineJournal()
        try compact(&s, durable: false)
      }
      problem = nil
    }
    try catchUpOrThrow(&s)
  }

  private func catchUpOrThrow(_ s: inout State) throws(SharedDefaultsError) {
    do { try catchUp(&s) } catch {
      throw .system(FileSystemError("recover", plistPath, .ioError))
    }
  }

  /// After the snapshot was lost: the last good state in memory, plus whatever the journal still holds.
  private func recoverJournal(into s: inout State) {
    guard let bytes = try? readJournal(from: 0, to: Int(header.load(Slot.committed))) else { return }
    var records: [JournalFormat.Record] = []
    try? JournalFormat.decode(bytes, base: 0, into: &records)
    var values = s.values
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
  }

  /// An outside tool wrote the plist: it becomes the state; the differences become change events.
  private func adoptOutsideSnapshot(_ s: inout State) throws(SharedDefaultsError) {
    do {
      let values = try loadSnapshot()
      Self.logger.info("suite '\(suite)': adopting '\(plistPath)' written by another tool")
      replaceValues(with: values, in: &s)
    } catch .unreachable(let error) {
      throw error
    } catch {
      Self.logger.error(
        "suite '\(suite)': '\(plistPath)' written by another tool does not parse (\(error)); moved aside, recovering the last good state"
      )
      quarantine("\(suite).plist")
      // The committed journal is part of that state: a process that never loaded the suite holds none of it in
      // memory, and compacting its empty state would drop every acknowledged write still in the journal.
      recoverJournal(into: &s)
    }
    try compact(&s, durable: false)
  }

  // MARK: Compaction

  /// Rewrites the snapshot from `s` and empties the journal. Needs the lock and a current `s`.
  private func compact(_ s: inout State, durable: Bool, handOver: Bool = false) throws(SharedDefaultsError) {
    // Only a plain compaction (the state is exactly the committed journal) may let readers skip the snapshot.
    let folded = (generation: header.load(Slot.generation), length: UInt64(s.length))
    let bytes: [UInt8]
    do { bytes = try PropertyListValue.dictionary(s.values).encoded(as: .binary) } catch {
      throw .unsupportedValue("the suite cannot be written as a property list: \(error)")
    }
    try Self.beneath(plistItem, in: containerPath) { () throws(FileSystemError) in
      try root.replaceFile(plistItem, with: bytes, mode: fileMode, durability: durable ? .powerLoss : .processCrash)
      try recordSnapshotIdentity()
      // Length first, then generation: a reader that sees either change takes the slow path and our lock.
      header.store(Slot.committed, 0)
      header.store(Slot.foldedGeneration, handOver && folded.generation == s.generation ? folded.generation : .max)
      header.store(Slot.foldedLength, folded.length)
      s.generation = header.increment(Slot.generation)
      s.length = 0
      s.pendingOwn = [:]
      if durable { try header.sync() }
    }
  }

  private func recordSnapshotIdentity() throws(FileSystemError) {
    let st = try root.status(plistItem)
    header.store(Slot.snapshotInode, st?.inode ?? 0)
    header.store(Slot.snapshotSize, UInt64(st?.size ?? 0))
    header.store(Slot.snapshotTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
  }

  /// A new or damaged header, set up under flock: its lock word cannot guard its own initialization.
  private func initializeHeaderLocked() throws(SharedDefaultsError) {
    do { try lockFD.lock(.exclusive) } catch { Self.logger.critical("suite '\(suite)': flock failed: \(error)") }
    defer { lockFD.unlock() }
    guard header.load(Slot.magic) != Self.magic else { return }
    if header.load(Slot.generation) != 0 || header.load(Slot.committed) != 0 {
      // Not ours or damaged: the committed length cannot be trusted, so the journal is set aside.
      Self.logger.error("suite '\(suite)': header '\(directory)/\(suite).lock' is damaged; resetting it")
      quarantineJournal()
    }
    try Self.beneath(plistItem, in: containerPath) { () throws(FileSystemError) in try recordSnapshotIdentity() }
    header.store(Slot.committed, 0)
    header.store(Slot.lock, 0)
    header.store(Slot.journalCapacity, 0)  // unknown: the next write allocates what it needs
    header.increment(Slot.generation)
    header.store(Slot.magic, Self.magic)
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

  /// The suite's directory, opened beneath the container's descriptor (the caller closes it).
  private func preferencesDirectory() throws(SharedDefaultsError) -> SystemFD {
    try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
      try root.openDirectory(Self.preferences)
    }
  }

  /// The snapshot's status (nil when there is none), read beneath the container's descriptor.
  private func snapshotStatus() throws(SharedDefaultsError) -> FileStatus? {
    try Self.beneath(plistItem, in: containerPath) { () throws(FileSystemError) in try root.status(plistItem) }
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
      try? root.replaceFile("Library/Preferences/" + (aside as NSString).lastPathComponent, with: bytes, mode: fileMode)
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
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.idleCompaction))) { [self] in
      let idle = state.withLock { s -> Bool in
        s.idleCheckScheduled = false
        return MonotonicClock.nanoseconds() - s.lastWrite >= Self.idleCompaction
      }
      guard idle else {
        if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
        return
      }
      guard header.load(Slot.committed) > 0 else { return }
      do {
        try state.withLock { s throws(SharedDefaultsError) in
          try withLock { () throws(SharedDefaultsError) in
            try catchUpExclusively(&s)
            if s.length > 0 { try compact(&s, durable: false, handOver: true) }
          }
        }
      } catch {
        Self.logger.warning("suite '\(suite)': idle compaction failed: \(error)")
      }
    }
  }

  // MARK: Applying and events

  private func apply(_ record: JournalFormat.Record, to values: inout [String: PropertyListValue]) {
    switch record.operation {
    case .set(let value): values[record.key] = value
    case .remove: values[record.key] = nil
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
        old = s.values.updateValue(value, forKey: record.key)
        new = value
      case .remove:
        old = s.values.removeValue(forKey: record.key)
        new = nil
      }
      changes.append(DefaultsChange(key: record.key, oldValue: old, newValue: new, originProcessID: record.pid))
    }
    deliver(changes, to: s.observers)
  }

  /// Replaces the whole state (reload, adoption) and reports the keys whose values differ.
  private func replaceValues(with values: [String: PropertyListValue], in s: inout State) {
    let first = s.generation == .max
    if !first && !s.observers.isEmpty {
      var changes: [DefaultsChange] = []
      for key in Set(s.values.keys).union(values.keys) where s.values[key] != values[key] {
        changes.append(DefaultsChange(key: key, oldValue: s.values[key], newValue: values[key], originProcessID: nil))
      }
      deliver(changes.sorted { $0.key < $1.key }, to: s.observers)
    }
    s.values = values
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
    state.withLock { s in
      refreshIfChanged(&s)  // start from the current state: later changes only
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
      _ = try Watcher.shared.watch(directory) { [weak self] event in
        guard let self, event.name == plistName else { return }
        self.scheduleRefresh(checkSnapshot: true)
      }
    } catch {
      Self.logger.warning("suite '\(suite)': cannot watch '\(directory)' (\(error)); changes are seen on access only")
    }
  }

  /// Commits by any process (written through the mapping, so inotify never sees them) arrive through the
  /// suite's change signal; listened to only while this process has observers. The listener thread catches up
  /// itself: one thread hop from the writer's commit to the delivery queue.
  private func listenForWrites(_ on: Bool) {
    let old = listener.withLock { current -> ChangeSignal.Listener? in
      defer {
        current =
          on
          ? signal.listen(name: "GroupContainer.SharedDefaults.\(suite)") { [weak self] in
            guard let self else { return }
            self.state.withLock { self.refreshIfChanged(&$0) }
          } : nil
      }
      return current
    }
    old?.cancel()
  }

  private func scheduleRefresh(checkSnapshot: Bool) {
    // Coalesce a burst of journal events into one catch-up (a snapshot event always gets its own check).
    if !checkSnapshot && refreshPending.exchange(true, ordering: .acquiringAndReleasing) { return }
    background.async { [self] in
      if !checkSnapshot { refreshPending.store(false, ordering: .releasing) }
      // The whole container went away (deleted): nothing to adopt.
      guard (try? root.status(Self.preferences)) ?? nil != nil else { return }
      state.withLock { s in
        if checkSnapshot && s.generation != .max && (try? snapshotIsTheRecordedOne()) == false {
          do {
            try withLock { () throws(SharedDefaultsError) in
              // Re-check under the lock: another process may have adopted it already.
              if (try? snapshotIsTheRecordedOne()) != false {
                try catchUpExclusively(&s)
              } else {
                try repairAndCatchUp(&s, .outsideSnapshot)
              }
            }
          } catch {
            Self.logger.error("suite '\(suite)': could not adopt the outside change: \(error)")
          }
        } else {
          refreshIfChanged(&s)
        }
      }
    }
  }

  // MARK: Locking

  /// Runs `body` holding the suite's lock (callers hold `state`, so one thread per process asks for it), then
  /// signals other processes' observers if the committed state changed.
  private func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
    while true {
      let acquired = lock.lock()
      let faults = header.faultCount
      if faults == seenHeaderFaults.load(ordering: .relaxed) {
        if case .fromDeadOwner(let pid) = acquired {
          Self.logger.warning("suite '\(suite)': process \(pid) died holding the lock; checking the files")
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
    }
    let before = (header.load(Slot.generation), header.load(Slot.committed))
    defer {
      let changed = before != (header.load(Slot.generation), header.load(Slot.committed))
      lock.unlock()
      if changed { signal.post() }
    }
    return try body()
  }
}
