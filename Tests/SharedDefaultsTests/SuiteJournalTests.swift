import Foundation
import PropertyList
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// The journal file on its own (SuiteJournal.swift): writing and reading records, the seqlock read, the rewind and
/// finishing one cut short, following a removed file, and setting a truncated one aside — one process, two
/// mappings where a rule is about another process's view. The engine's tests drive the same code across processes.
///
/// Mutants this suite catches (each tried once, then restored):
/// - `readWithoutLock` without the generation's second load: `aSeqlockReadTrustsOnlyAnUnchangedGeneration`;
/// - `finishMove` not bumping the generation: `aRewindMovesTheTailToTheStartInANewGeneration`;
/// - `finishMove` moving only the first half (the kill point's bytes never completed):
///   `aRewindCutShortIsFinishedByTheNextLockHolder`;
/// - `follow` not carrying the committed records over: `aRemovedFileIsFollowedAndKeepsItsRecords`.
@Suite("The journal file")
struct SuiteJournalTests {
  typealias Slot = SuiteHeader.Slot

  /// A suite's header and journal in a fresh container, as `DefaultsStore` opens them.
  final class Files {
    let root: TestRoot
    let directory: ContainerDirectory
    let preferences: SystemFD
    let header: SuiteHeader
    let path: String

    init() throws {
      root = try TestRoot()
      let container = try root.container()
      directory = try container.directory()
      preferences = try directory.openDirectory("Library/Preferences")
      header = SuiteHeader(
        counters: try MappedCounters(
          fd: preferences.openOrCreate("s.lock", mode: 0o600, size: Int64(MappedCounters.fileSize))))
      header.store(Slot.generation, 1)
      path = container.preferencesURL.path + "/s.journal"
    }

    /// Another mapping of the journal (another process's view of it).
    func journal(reservation: Int = 1 << 20) throws -> SuiteJournal {
      let journal = try SuiteJournal(
        suite: "s", header: header, root: directory, directoryItem: "Library/Preferences",
        directory: preferences, mode: 0o600, reservation: reservation, readOnly: false)
      journal.recordInodeIfNone()
      return journal
    }

    // `preferences` closes with the fixture.
  }

  static func records(_ range: Range<Int>, prefix: String = "k") -> [JournalFormat.Record] {
    range.map { JournalFormat.Record(key: "\(prefix)\($0)", operation: .set(.string("v\($0)")), pid: 1) }
  }

  /// Appends `records` as `DefaultsStore.append` does (reserve, copy, publish the length); returns where they start.
  @discardableResult
  static func append(_ records: [JournalFormat.Record], to journal: SuiteJournal) throws -> Int {
    var bytes: [UInt8] = []
    for record in records { try JournalFormat.encode(record, into: &bytes) }
    let offset = Int(journal.header.load(Slot.committed))
    try journal.reserve(upTo: offset + bytes.count)
    #expect(journal.write(bytes, at: offset))
    journal.header.store(Slot.committed, UInt64(offset + bytes.count))
    return offset
  }

  static func keys(_ read: SuiteJournal.LockFreeRead) -> [String]? {
    guard case .records(let records, _) = read else { return nil }
    return records.map(\.key)
  }

  @Test func writtenRecordsReadBackWithTheirOffsets() throws {
    let files = try Files()
    let journal = try files.journal()
    let first = try Self.append(Self.records(0..<3), to: journal)
    let second = try Self.append(Self.records(3..<5), to: journal)
    #expect(first == 0 && second > 0)
    #expect(journal.capacity >= 64 << 10)  // grown geometrically, not per write
    let committed = Int(files.header.load(Slot.committed))
    guard case .records(let records, let offsets) = journal.readWithoutLock(from: 0, to: committed, generation: 1)
    else {
      Issue.record("the committed records did not read")
      return
    }
    #expect(records.map(\.key) == ["k0", "k1", "k2", "k3", "k4"])
    #expect(offsets.first == 0 && offsets.contains(second))
    // Another mapping (another process) reads the same bytes.
    #expect(Self.keys(try files.journal().readWithoutLock(from: second, to: committed, generation: 1)) == ["k3", "k4"])
    var seen: [String] = []
    #expect(
      journal.forEachKey(from: 0, to: committed) { _, _, key in
        seen.append(String(decoding: key, as: UTF8.self))
        return true
      })
    #expect(seen == ["k0", "k1", "k2", "k3", "k4"])
  }

  @Test func aSeqlockReadTrustsOnlyAnUnchangedGeneration() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<4), to: journal)
    let committed = Int(files.header.load(Slot.committed))
    // Read as a process that loaded generation 1, after another process emptied the journal (generation 2).
    files.header.store(Slot.generation, 2)
    guard case .changed = journal.readWithoutLock(from: 0, to: committed, generation: 1) else {
      Issue.record("bytes read across a generation change were trusted")
      return
    }
    #expect(journal.recordsWithoutLock(from: 0, to: committed, generation: 2)?.count == 4)
    // A rewind under way: nothing is trusted until it is done.
    files.header.store(Slot.rewindTo, 1)
    #expect(journal.recordsWithoutLock(from: 0, to: committed, generation: 2) == nil)
    files.header.store(Slot.rewindTo, 0)
    // Committed bytes that are not records, in an unchanged generation: unreadable, said so.
    #expect(journal.write([UInt8](repeating: 0xEE, count: 16), at: 0))
    guard case .unreadable = journal.readWithoutLock(from: 0, to: committed, generation: 2) else {
      Issue.record("damaged committed bytes were not reported as unreadable")
      return
    }
  }

  @Test func readsPastTheFilesBlocksAreRefused() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<2), to: journal)
    let beyond = journal.capacity + 1
    #expect(journal.read(from: 0, to: beyond).problem != nil)
    guard case .changed = journal.readWithoutLock(from: 0, to: beyond, generation: 1) else {
      Issue.record("a range past the allocated blocks was read")
      return
    }
    #expect(!journal.forEachKey(from: 0, to: beyond) { _, _, _ in true })
    #expect(throws: SharedDefaultsError.self) { try journal.reserve(upTo: journal.reservation + 1) }
  }

  @Test func aRewindMovesTheTailToTheStartInANewGeneration() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<20, prefix: "folded"), to: journal)
    let from = Int(files.header.load(Slot.committed))
    try Self.append(Self.records(0..<3, prefix: "tail"), to: journal)
    let to = Int(files.header.load(Slot.committed))
    journal.moveTail(from: from, to: to)
    #expect(!journal.isMoving)
    #expect(files.header.load(Slot.generation) == 2)
    #expect(Int(files.header.load(Slot.committed)) == to - from)
    #expect(files.header.snapshotStart(generation: 2, committed: to - from) == 0)
    #expect(
      journal.recordsWithoutLock(from: 0, to: to - from, generation: 2)?.map(\.key) == ["tail0", "tail1", "tail2"])
  }

  /// A process killed during the move (`defaults.rewind.moving`: half the bytes moved, the rest not): the next
  /// lock holder sees the flag and makes the move again from the same bytes, which it never overlapped.
  @Test func aRewindCutShortIsFinishedByTheNextLockHolder() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<40, prefix: "folded"), to: journal)
    let from = Int(files.header.load(Slot.committed))
    try Self.append(Self.records(0..<9, prefix: "tail"), to: journal)
    let to = Int(files.header.load(Slot.committed))
    // What `moveTail` stores before moving, then half of the bytes moved and garbage where the rest goes.
    files.header.store(Slot.rewindFrom, UInt64(from))
    files.header.store(Slot.rewindGeneration, 1)
    files.header.store(Slot.rewindTo, UInt64(to))
    let moved = journal.read(from: from, to: from + (to - from) / 2).bytes
    #expect(journal.write(moved, at: 0))
    #expect(journal.write([UInt8](repeating: 0xAB, count: (to - from) - moved.count), at: moved.count))
    // A lock-free reader meanwhile trusts nothing.
    #expect(journal.recordsWithoutLock(from: 0, to: from, generation: 1) == nil)
    let next = try files.journal()  // the next lock holder, another mapping
    #expect(next.isMoving)
    next.finishMove()
    #expect(!next.isMoving && files.header.load(Slot.generation) == 2)
    #expect(next.recordsWithoutLock(from: 0, to: to - from, generation: 2)?.map(\.key) == (0..<9).map { "tail\($0)" })
    // Finishing it once more (a holder that died after the bump, before clearing the flag) changes nothing.
    files.header.store(Slot.rewindTo, UInt64(to))
    next.finishMove()
    #expect(files.header.load(Slot.generation) == 2)
    #expect(next.recordsWithoutLock(from: 0, to: to - from, generation: 2)?.count == 9)
  }

  @Test func anImpossibleMoveIsIgnored() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<2), to: journal)
    let committed = files.header.load(Slot.committed)
    // An outside write: a range longer than where it starts (it would overlap), and one past the blocks.
    for (from, to) in [(10, 100), (100, UInt64(journal.capacity) + 4096)] {
      files.header.store(Slot.rewindFrom, UInt64(from))
      files.header.store(Slot.rewindTo, to)
      journal.finishMove()
      #expect(!journal.isMoving)
      #expect(files.header.load(Slot.committed) == committed && files.header.load(Slot.generation) == 1)
    }
  }

  /// `rm` of the journal while processes map it: the first lock holder to notice makes a new file with the
  /// committed records; another process then maps that one (the same bytes).
  @Test func aRemovedFileIsFollowedAndKeepsItsRecords() throws {
    let files = try Files()
    let first = try files.journal()
    let other = try files.journal()
    try Self.append(Self.records(0..<5), to: first)
    let committed = Int(files.header.load(Slot.committed))
    #expect(unlink(files.path) == 0)
    #expect(first.inodeAtName() == nil)
    #expect(first.mapsRecordedFile)
    first.follow()
    #expect(first.inodeAtName() == first.inode && first.mapsRecordedFile)
    #expect(files.header.load(Slot.journalInode) == first.inode)
    #expect(first.recordsWithoutLock(from: 0, to: committed, generation: 1)?.count == 5)
    #expect(!other.mapsRecordedFile)
    other.follow()
    #expect(other.inode == first.inode)
    try Self.append(Self.records(5..<6), to: other)
    #expect(first.recordsWithoutLock(from: 0, to: Int(files.header.load(Slot.committed)), generation: 1)?.count == 6)
  }

  /// The recorded file is gone and this process maps another: the records are lost with it, and every process
  /// must reload — a new generation, an empty journal — never read another file's bytes as this one's.
  @Test func aLostFileStartsAnEmptyJournalInANewGeneration() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<5), to: journal)
    files.header.store(Slot.journalInode, journal.inode &+ 12_345)  // recorded: a file nobody here maps
    #expect(unlink(files.path) == 0)
    journal.follow()
    #expect(files.header.load(Slot.committed) == 0)
    #expect(files.header.load(Slot.generation) == 2)
    #expect(files.header.load(Slot.journalInode) == journal.inode && journal.inodeAtName() == journal.inode)
  }

  /// Another program truncates the file: reads say so (never zeros taken for records); set aside, the journal is
  /// mapped again and believes only the blocks the file still has.
  @Test func aTruncatedFileIsNotTrustedAndIsSetAside() throws {
    let files = try Files()
    let journal = try files.journal()
    try Self.append(Self.records(0..<50), to: journal)
    let committed = Int(files.header.load(Slot.committed))
    #expect(truncate(files.path, 0) == 0)
    let read = journal.read(from: 0, to: committed)
    #expect(read.problem != nil)
    #expect(!journal.intact)
    guard case .changed = journal.readWithoutLock(from: 0, to: committed, generation: 1) else {
      Issue.record("a truncated journal was read as records")
      return
    }
    journal.quarantine()
    #expect(journal.intact)
    #expect(files.header.load(Slot.committed) == 0 && journal.capacity == 0)
    let aside = try FileManager.default.contentsOfDirectory(atPath: (files.path as NSString).deletingLastPathComponent)
      .filter { $0.hasPrefix("s.journal.corrupt-") }
    #expect(aside.count == 1)
    // Writing goes on: blocks are reserved again.
    try Self.append(Self.records(0..<2), to: journal)
    #expect(journal.recordsWithoutLock(from: 0, to: Int(files.header.load(Slot.committed)), generation: 1)?.count == 2)
  }
}
