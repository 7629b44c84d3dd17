import Dispatch
import FileCoordination
import Foundation
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// The journal file (`<suite>.journal`, mapped shared; its records: JournalFormat.swift): reading the committed
/// range, reserving disk blocks before a write, the background rewind that moves the tail to the start in a new
/// generation (`moveTail`, finished by the next lock holder if its process died), following a journal that was
/// removed or replaced, and setting a damaged one aside. The file is never shrunk: other processes map it.
extension DefaultsStore {
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

  /// Moves the range `moveTail` stored and completes the rewind (again, if a process died during it).
  func finishMove() {
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

  /// Makes sure the journal file has disk blocks for its first `end` bytes (a full disk fails here, cleanly).
  func reserveJournal(upTo end: Int) throws(SharedDefaultsError) {
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

  /// The journal's bytes in `start..<end`, and why they cannot all be trusted (a length beyond the allocated
  /// bytes, or pages lost to an outside truncation, which read as zeros and fail their checksums), if so.
  func readJournal(from start: Int, to end: Int) -> (bytes: [UInt8], problem: String?) {
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

  /// With the lock held: the journal this process maps is not the one the header records — the file was removed
  /// (`rm`) or replaced. If another process already made a new one, this one maps it too (same bytes). If this
  /// process still maps the recorded journal, its committed records are copied into the file now at the name, so
  /// nothing is lost. Otherwise they are gone with the file: the journal starts empty in a new generation (every
  /// process reloads from the snapshot), and that is logged.
  func followJournal() {
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

  func quarantineJournal() {
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

  /// The journal's name changed (removed, replaced): if it no longer leads to the file this process maps, follow
  /// it (`followJournal`, which carries the committed records over when this process maps the recorded one).
  func scheduleJournalCheck() {
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
}
