import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// Recovery, under the lock: a damaged snapshot or journal is moved aside and the suite goes on from the last good
/// state (the export when it holds the same state, this process's memory, the journal's good records); a new or
/// damaged header is set up under flock; 0.1.0's plist is adopted as the snapshot; a journal file removed or
/// replaced is followed.
extension DefaultsStore {
  /// Why catching up needs the exclusive lock.
  enum Repair: Error {
    /// The named file of the suite (the snapshot or the export) does not parse.
    case corruptSnapshot(String, String)
    case corruptJournal(String)
    /// A file is over `snapshotLimits` (no repair: it is valid, only too large; the operation fails with this).
    case overLimit(SharedDefaultsError)
    /// The suite's directory cannot be reached beneath the container (no repair: the operation fails with this).
    case unreachable(SharedDefaultsError)
  }

  /// With the lock held: catch up, repairing whatever needs it.
  func catchUpExclusively(_ s: inout State) throws(SharedDefaultsError) {
    applyTail(&s)
    if headerLost.exchange(false, ordering: .relaxed) && s.generation != .max { try compact(&s, durable: false) }
    do { try catchUp(&s) } catch { try repairAndCatchUp(&s, error) }
  }

  func repairAndCatchUp(_ s: inout State, _ first: Repair) throws(SharedDefaultsError) {
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
          do {
            try reload(&s, generation: header.load(Slot.generation), committed: header.length(Slot.committed))
          } catch {
            if case .unreachable(let error) = error { throw error }
            if case .overLimit(let error) = error { throw error }
          }
          guard s.generation != .max else { throw .system(FileSystemError("recover", journalPath, .ioError)) }
        }
        journal.quarantine()
        try compact(&s, durable: false)
      }
      problem = nil
    }
    try catchUpOrThrow(&s)
  }

  func catchUpOrThrow(_ s: inout State) throws(SharedDefaultsError) {
    do { try catchUp(&s) } catch {
      if case .overLimit(let error) = error { throw error }
      throw .system(FileSystemError("recover", plistPath, .ioError))
    }
  }

  /// After the snapshot was lost: the export when it holds the same bytes (the header says so), else the last good
  /// state in memory; plus whatever the journal still holds.
  func recoverState(_ s: inout State) throws(SharedDefaultsError) {
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
    let (bytes, _) = journal.read(from: 0, to: header.length(Slot.committed))
    var records: [JournalFormat.Record] = []
    try? JournalFormat.decode(bytes, base: 0, into: &records)
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
    s.generation = header.load(Slot.generation)
    s.length = header.length(Slot.committed)
    s.ownWritesUnapplied = false
    s.pendingOwn = [:]
  }

  /// A new or damaged header, set up under flock: its lock word cannot guard its own initialization.
  func initializeHeaderLocked() throws(SharedDefaultsError) {
    let lockFile = lockFile.withLock { $0 }
    Self.flock(lockFile, suite: suite)
    defer { lockFile.fd.unlock() }
    try initializeHeader()
  }

  /// Takes the flock that guards a header's initialization (a failure is logged: the initialization goes on).
  static func flock(_ file: DescriptorBox, suite: String) {
    do { try file.fd.lock(.exclusive) } catch { logger.critical("suite '\(suite)': flock failed: \(error)") }
  }

  /// `initializeHeaderLocked` with the flock held by the caller.
  func initializeHeader() throws(SharedDefaultsError) {
    guard header.load(Slot.magic) != SuiteHeader.magic else { return }
    if header.load(Slot.magic) == SuiteHeader.legacyMagic {
      // 0.1.0 kept the state in the plist: it becomes the snapshot; the journal and its length stay valid.
      try adoptPlistAsSnapshot(reason: "migrating from 0.1.0")
      header.store(Slot.overLimit, 0)
      header.store(Slot.magic, SuiteHeader.magic)
      return
    }
    if header.load(Slot.generation) != 0 || header.load(Slot.committed) != 0 {
      // Not ours or damaged: the committed length cannot be trusted, so the journal is set aside.
      Self.logger.error("suite '\(suite)': header '\(directory)/\(suite).lock' is damaged; resetting it")
      journal.quarantine()
    }
    if try snapshotStatus() == nil {
      // A plist put there before the suite was first used (or a suite copied without its snapshot): the state.
      try adoptPlistAsSnapshot(reason: "a new suite starts from it")
    } else {
      header.recordSnapshot(try snapshotStatus())
      header.recordExport(nil)
      header.store(Slot.exportInode, .max)  // unknown: rewritten by the next compaction
    }
    header.store(Slot.committed, 0)
    header.store(Slot.lock, 0)
    header.store(Slot.journalCapacity, 0)  // unknown: the next write allocates what it needs
    header.store(Slot.overLimit, 0)
    header.store(Slot.filesRemoved, 0)
    header.store(Slot.journalInode, journal.inode)
    journal.forgetMove()
    header.increment(Slot.generation)
    header.store(Slot.exportGeneration, header.load(Slot.generation))
    header.store(Slot.magic, SuiteHeader.magic)
  }

  /// Makes the plist's bytes the snapshot (when it parses) and records both: the plist is then the current export.
  func adoptPlistAsSnapshot(reason: String) throws(SharedDefaultsError) {
    header.recordExport(nil)
    let plist: [String: PropertyListValue]
    let status: FileStatus?
    do {
      (plist, status) = try loadPlist(plistItem)
    } catch .unreachable(let error) {
      throw error
    } catch {
      Self.logger.error("suite '\(suite)': '\(plistPath)' cannot be used (\(error)); moved aside")
      quarantine("\(suite).plist")
      header.recordSnapshot(try snapshotStatus())
      return
    }
    guard let status else {
      header.recordSnapshot(try snapshotStatus())
      return
    }
    Self.logger.notice("suite '\(suite)': '\(plistPath)' becomes the suite's snapshot (\(reason))")
    try writeImage(of: plist)
    try SharedDefaultsError.wrap { () throws(FileSystemError) in try pinExportBase() }
    header.recordExport(status)
  }

  /// The journal's name changed (removed, replaced): if it no longer leads to the file this process maps, follow
  /// it (`SuiteJournal.follow`, which carries the committed records over when this process maps the recorded one).
  /// Checked once the removal settled (`removalSettling`): `rm -rf` of the directory may remove the journal before the
  /// lock file, and a journal made again meanwhile would make it fail on a directory that is not empty.
  func scheduleJournalCheck() {
    guard !readOnly else { return }
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.removalSettling))) { [self] in
      guard journal.inodeAtName() != journal.inode else { return }
      // The journal went with the lock file (the directory removed): the whole suite moves.
      guard !headerIsElsewhere() else { return scheduleMoveCheck() }
      do {
        try exclusively { s throws(SharedDefaultsError) in
          if journal.mapsRecordedFile { journal.follow() }
          try catchUpExclusively(&s)
        }
      } catch {
        Self.logger.error("suite '\(suite)': could not follow the journal: \(error)")
      }
    }
  }
}
