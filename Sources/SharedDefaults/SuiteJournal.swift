import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The journal file, `<suite>.journal`: records (JournalFormat.swift) appended since the snapshot, mapped shared by
/// every process of the suite. Its rules, in this one type:
/// - **Bytes past the committed length are nobody's**: a writer copies its record there (`write`) and only then
///   publishes the new length in the header (the commit point, `DefaultsStore.append`); a writer killed before that
///   leaves bytes the next one overwrites.
/// - **A read without the lock is a seqlock read** (`readWithoutLock`): the bytes are copied, then the generation
///   is loaded again; a different one, or a rewind under way, means they may have been written over.
/// - **A rewind moves the tail to the start in a new generation** in an order every step of which the next lock
///   holder can finish (`moveTail`, `finishMove`).
/// - **The file is never shrunk** (other processes map it: see SharedFileMapping); disk blocks are reserved before a
///   write (`reserve`), so a full disk fails a set cleanly instead of faulting on a page.
/// - **The file at the name is the one the header records** (`SuiteHeader.Slot.journalInode`): one removed or
///   replaced is followed (`follow`), with the committed records carried over when this process still maps them.
/// - **Damage is set aside, never read as records**: a file truncated by another program (its pages read as zeros,
///   counted as faults of the mapping) is not `intact`; a damaged journal is kept aside for whoever investigates
///   (`quarantine`).
final class SuiteJournal: @unchecked Sendable {  // the mapping is shared memory; the rest is atomics or fixed
  typealias Slot = SuiteHeader.Slot
  typealias Record = JournalFormat.Record

  let header: SuiteHeader
  let mapping: SharedFileMapping
  /// For messages and logs.
  let suite: String
  let path: String
  /// The file's name in `directoryItem`, and that directory relative to `root` (the container's descriptor): the
  /// file is opened again beneath it, never by a path string.
  let name: String
  let root: ContainerDirectory
  let directoryItem: String
  let mode: mode_t
  /// The inode of the file this process maps.
  private let mappedInode = Atomic<UInt64>(0)
  /// Faults of the mapping already dealt with (a new one means the file was truncated under us).
  private let seenFaults = Atomic<UInt32>(0)
  static let logger = Logger(label: "GroupContainer.SharedDefaults")

  /// Maps `<suite>.journal` in `directory` (the descriptor of `directoryItem` beneath `root`), created if missing;
  /// `readOnly`: a private, read-only copy (a container this process may only read).
  init(
    suite: String, header: SuiteHeader, root: ContainerDirectory, directoryItem: String, directory: borrowing SystemFD,
    mode: mode_t, reservation: Int, readOnly: Bool
  ) throws(FileSystemError) {
    self.suite = suite
    self.header = header
    self.name = "\(suite).journal"
    self.path = directory.path + "/" + name
    self.root = root
    self.directoryItem = directoryItem
    self.mode = mode
    if readOnly {
      mapping = try SharedFileMapping(
        fd: try directory.open(name, .readOnly), reservation: reservation, privateCopy: true)
    } else {
      mapping = try SharedFileMapping(name: name, in: directory, mode: mode, reservation: reservation)
    }
    mappedInode.store((try? mapping.fileStatus().inode) ?? 0, ordering: .relaxed)
  }

  /// The address space reserved for the mapping: the largest journal.
  var reservation: Int { mapping.reservation }
  /// The bytes of the file that have disk blocks (the header's word).
  var capacity: Int { header.length(Slot.journalCapacity) }
  /// The inode of the file this process maps.
  var inode: UInt64 { mappedInode.load(ordering: .relaxed) }
  /// No page of the mapping faulted since this process last dealt with a truncation: what it reads is the file.
  var intact: Bool { mapping.faultCount == seenFaults.load(ordering: .relaxed) }

  /// A new header records the file this process maps.
  func recordInodeIfNone() {
    if header.load(Slot.journalInode) == 0 { header.store(Slot.journalInode, inode) }
  }

  // MARK: Writing

  /// Makes sure the file has disk blocks for its first `end` bytes (a full disk fails here, cleanly).
  func reserve(upTo end: Int) throws(SharedDefaultsError) {
    let capacity = self.capacity
    guard end > capacity else { return }
    guard end <= reservation else { throw .valueTooLarge("(journal)", reservation) }
    // Grow geometrically so allocation stays off the per-write cost.
    let page = 4096
    let wanted = min(reservation, max(end, 2 * capacity, 64 << 10))
    var size = (wanted + page - 1) / page * page
    do { try mapping.allocate(upTo: size) } catch {
      // A nearly full disk or quota: the doubling does not fit, what this write needs may (a full quota failed
      // the set outright, where a full disk retried: found by the I/O-error loops).
      guard error.errno == .noSpace || error.errno == .diskQuotaExceeded, size > end else { throw .system(error) }
      size = (end + page - 1) / page * page
      try SharedDefaultsError.wrap { () throws(FileSystemError) in try mapping.allocate(upTo: size) }
    }
    header.store(Slot.journalCapacity, UInt64(size))
  }

  /// Copies `bytes` to `offset` (reserved first). False when the file was truncated under the copy: the bytes went
  /// to a zero page of this process's own, and the caller repairs and writes again.
  ///
  /// The pages of a large write are given back once written (the page cache keeps them, dirty, for the file):
  /// a writer of a few 32 MB values otherwise held each value three times — its own, the record it encoded, and
  /// the journal's pages — and peaked over three times the suite's bytes when a busy machine made its background
  /// compaction overlap its sets.
  func write(_ bytes: [UInt8], at offset: Int) -> Bool {
    let faults = mapping.faultCount
    bytes.withUnsafeBytes { (mapping.base + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
    guard mapping.faultCount == faults else { return false }
    if bytes.count >= Self.releasedWrite { releaseResidentPages(in: offset..<(offset + bytes.count)) }
    return true
  }

  /// Writes of this size or more give their pages back (`write`).
  static let releasedWrite = 1 << 20

  // MARK: Reading

  /// The bytes in `start..<end`, and why they cannot all be trusted (a length beyond the allocated bytes, or pages
  /// lost to an outside truncation, which read as zeros and fail their checksums), if so.
  func read(from start: Int, to end: Int) -> (bytes: [UInt8], problem: String?) {
    let capacity = self.capacity
    guard start <= end, end <= capacity, capacity <= reservation else {
      return ([], "the committed length \(end) lies beyond the journal's \(capacity) allocated bytes")
    }
    let bytes = [UInt8](UnsafeRawBufferPointer(start: mapping.base + start, count: end - start))
    if !intact { return (bytes, "the journal file was truncated by another program") }
    return (bytes, nil)
  }

  /// What a read without the lock found.
  enum LockFreeRead {
    case records([Record], offsets: [Int])
    /// The journal was emptied, moved or truncated while it was read (or lies beyond its blocks): read again, or
    /// under the lock.
    case changed
    /// Committed, in an unchanged generation, and still not records: the file is damaged (or a writer published a
    /// length before its record, which the commit rule forbids).
    case unreadable(String)
  }

  /// The records in `start..<end` of `generation`, read without the lock as a seqlock reader: they are good only if
  /// the generation is the same after the bytes were copied and no rewind is moving them.
  func readWithoutLock(from start: Int, to end: Int, generation: UInt64) -> LockFreeRead {
    let (bytes, problem) = read(from: start, to: end)
    guard problem == nil, header.loadAfterFence(Slot.generation) == generation, header.load(Slot.rewindTo) == 0
    else { return .changed }
    var records: [Record] = []
    var offsets: [Int] = []
    do { try JournalFormat.decode(bytes, base: start, into: &records, offsets: &offsets) } catch {
      return .unreadable(error.description)
    }
    return .records(records, offsets: offsets)
  }

  /// `readWithoutLock`'s records, or nil.
  func recordsWithoutLock(from start: Int, to end: Int, generation: UInt64) -> [Record]? {
    guard case .records(let records, _) = readWithoutLock(from: start, to: end, generation: generation) else {
      return nil
    }
    return records
  }

  /// Calls `body` with each record's offset, length and key in `start..<end`, in place (nothing copied or
  /// decoded), until it returns false. False when the range lies beyond the file's blocks or a record does not
  /// read. Without the lock, the caller checks the generation after (as `readWithoutLock` does).
  func forEachKey(
    from start: Int, to end: Int, _ body: (_ offset: Int, _ length: Int, _ key: UnsafeRawBufferPointer) -> Bool
  ) -> Bool {
    let capacity = self.capacity
    guard start <= end, end <= capacity, capacity <= reservation else { return false }
    return JournalFormat.forEachKey(in: UnsafeRawPointer(mapping.base), from: start, to: end, body)
  }

  /// Gives back this process's resident pages of `range` (the page cache keeps them).
  func releaseResidentPages(in range: Range<Int>) { mapping.releaseResidentPages(in: range) }

  // MARK: Rewinding

  /// Empties the journal in the background's way (with the lock, after installing an image that holds the journal
  /// up to `from`): the records in `from..<to`, appended while the image was built, move to the start of the
  /// journal, in a new generation. Never longer than `from` (the caller checks), so the bytes moved never overlap
  /// where they come from, and a move cut short can be made again from the same bytes.
  ///
  /// Order (each step a kill point the next lock holder finishes from, `finishMove`): the range and the generation
  /// are stored, then the flag `rewindTo`; the bytes move; the committed length and `snapshotAt` (this generation,
  /// from 0) are set; the generation is bumped; the flag cleared. A lock-free reader does not trust the journal
  /// while the flag is set, and one that read before it was set sees the generation changed after its read.
  func moveTail(from: Int, to: Int) {
    header.store(Slot.rewindFrom, UInt64(from))
    header.store(Slot.rewindGeneration, header.load(Slot.generation))
    header.store(Slot.rewindTo, UInt64(to))
    finishMove()
  }

  /// When the journal of `generation` (the current one, loaded by the caller) is the tail a rewind moved out of the
  /// generation before it: the offset there where the moved bytes began (`Slot.movedAt`). A record at offset `o`
  /// there is at `o - from` now. Nil otherwise, and while a move is under way. A lock-free caller checks the
  /// generation again after using it (`loadAfterFence`).
  func movedFrom(into generation: UInt64) -> Int? {
    let word = header.load(Slot.movedAt)
    guard word != 0, word >> 32 == generation & 0xFFFF_FFFF, header.load(Slot.rewindTo) == 0 else { return nil }
    return Int(word & 0xFFFF_FFFF)
  }

  /// Every way to a new generation but a move: the new journal is not a moved tail.
  func forgetMove() { header.store(Slot.movedAt, 0) }

  /// Whether a move is under way, or was cut short by its process's death (the next lock holder finishes it).
  var isMoving: Bool { header.load(Slot.rewindTo) != 0 }

  /// Moves the range `moveTail` stored and completes the rewind (again, if a process died during it).
  func finishMove() {
    let from = header.length(Slot.rewindFrom)
    let to = header.length(Slot.rewindTo)
    let rewound = header.load(Slot.rewindGeneration)
    let count = to - from
    guard from >= 0, count >= 0, count <= from, to <= capacity, to <= reservation else {
      // Not written by `moveTail` (an outside write): the journal's own checks decide what it holds.
      Self.logger.error("suite '\(suite)': '\(header.path)' names an impossible journal move; ignored")
      header.store(Slot.rewindTo, 0)
      return
    }
    let half = count / 2
    memmove(mapping.base, mapping.base + from, half)
    FaultPoint.reach("defaults.rewind.moving")
    memmove(mapping.base + half, mapping.base + from + half, count - half)
    header.store(Slot.committed, UInt64(count))
    FaultPoint.reach("defaults.rewind.committed")
    header.store(Slot.snapshotAt, ((rewound &+ 1) & 0xFFFF_FFFF) << 32)
    header.store(Slot.foldedGeneration, .max)
    // Before the bump: whoever sees the new generation sees where its journal came from.
    header.store(Slot.movedAt, ((rewound &+ 1) & 0xFFFF_FFFF) << 32 | UInt64(from))
    if header.load(Slot.generation) == rewound { _ = header.increment(Slot.generation) }
    FaultPoint.reach("defaults.rewind.bumped")
    header.store(Slot.rewindTo, 0)
  }

  // MARK: The file at the name

  /// The inode of the file at the journal's name now (nil: none, or unreadable).
  func inodeAtName() -> UInt64? { (try? root.status(directoryItem + "/" + name))??.inode }

  /// Whether this process maps the file the header records (else another process followed a new one: `follow`).
  var mapsRecordedFile: Bool { header.load(Slot.journalInode) == inode }

  /// With the lock held: the journal this process maps is not the one the header records — the file was removed
  /// (`rm`) or replaced, or the container was copied (`cp -a`, a backup restored: every inode is new). If another
  /// process already made a new one, this one maps it too (same bytes). If this process still maps the recorded
  /// journal, its committed records are copied into the file now at the name, so nothing is lost. If the file at the
  /// name holds the committed records themselves — intact, ending with the record the header names
  /// (`Slot.lastRecord`) — it is a copy of the journal and is kept. Otherwise they are gone with the file: the journal
  /// starts empty in a new generation (every process reloads from the snapshot), and that is logged.
  func follow() {
    let recorded = header.load(Slot.journalInode)
    let mine = inode
    do {
      let files = try root.openDirectory(directoryItem)
      let fd = try files.openOrCreate(name, mode: mode, size: 0)
      let inode = try fd.status().inode
      if inode == recorded {
        try mapping.remap(onto: fd)
      } else {
        let committed = min(header.length(Slot.committed), capacity)
        let salvaged =
          mine == recorded ? [UInt8](UnsafeRawBufferPointer(start: mapping.base, count: max(committed, 0))) : nil
        let size = max((committed + 4095) / 4096 * 4096, 64 << 10)
        let fileSize = try fd.status().size
        try mapping.remap(onto: fd)
        let copied =
          salvaged == nil && committed > 0 && fileSize >= committed
          && JournalFormat.areCommitted(
            [UInt8](UnsafeRawBufferPointer(start: mapping.base, count: committed)),
            lastRecord: header.load(Slot.lastRecord))
        try mapping.allocate(upTo: size)  // blocks for holes a copy left (`cp` makes runs of zeros sparse)
        header.store(Slot.journalCapacity, UInt64(size))
        if copied {
          Self.logger.notice(
            "suite '\(suite)': '\(path)' is not the file recorded but holds its committed records (a copy): kept")
        } else if let salvaged {
          salvaged.withUnsafeBytes { mapping.base.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
          Self.logger.warning("suite '\(suite)': '\(path)' was removed; its records were copied into a new one")
        } else {
          Self.logger.error(
            "suite '\(suite)': '\(path)' was removed; the writes it held since the last compaction are lost")
          header.store(Slot.committed, 0)
          forgetMove()
          header.increment(Slot.generation)
        }
        header.store(Slot.journalInode, inode)
      }
      mappedInode.store(inode, ordering: .relaxed)
      seenFaults.store(mapping.faultCount, ordering: .relaxed)
    } catch {
      Self.logger.error("suite '\(suite)': cannot open '\(path)' again: \(error)")
    }
  }

  /// Maps `fd`, the journal at the name of a suite whose files were removed and made again, at the same addresses
  /// (DefaultsStore+RemovedFiles.swift); the header, moved first, records which file every process maps.
  func map(_ fd: consuming SystemFD) throws(FileSystemError) {
    let inode = try fd.status().inode
    try mapping.remap(onto: fd)
    mappedInode.store(inode, ordering: .relaxed)
    seenFaults.store(mapping.faultCount, ordering: .relaxed)
  }

  /// With the lock held: the journal cannot be trusted (damaged, or its header lost). Its committed bytes are kept
  /// aside as `<suite>.journal.corrupt-<time>-<pid>` for whoever investigates, and it starts empty; a file that was
  /// truncated is mapped again, and only the blocks it still has are believed.
  func quarantine() {
    let committed = min(header.length(Slot.committed), capacity, reservation)
    if committed > 0 {
      let bytes = [UInt8](UnsafeRawBufferPointer(start: mapping.base, count: committed))
      let aside = name + ".corrupt-\(RealtimeClock.seconds())-\(CurrentProcess.id)"
      do {
        try root.replaceFile(directoryItem + "/" + aside, with: bytes, mode: mode)
      } catch {
        // The copy is for whoever investigates; the suite recovers without it.
        Self.logger.warning("suite '\(suite)': could not keep the damaged journal aside as '\(aside)': \(error)")
      }
    }
    header.store(Slot.committed, 0)
    let faults = mapping.faultCount
    if faults != seenFaults.load(ordering: .relaxed) {
      do { try mapping.remap() } catch { Self.logger.critical("suite '\(suite)': \(error)") }
      seenFaults.store(faults, ordering: .relaxed)
    }
    let size = ((try? mapping.fileSize()) ?? 0) / 4096 * 4096
    header.store(Slot.journalCapacity, min(header.load(Slot.journalCapacity), UInt64(size)))
  }
}
