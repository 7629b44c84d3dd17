import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// Compaction's rules on their own (SuiteCompactor.swift): the thresholds, the claim, and what installing a new
/// snapshot leaves in the header and the journal. The kill points between the stores are held by the engine's
/// tests across processes (`DefaultsInvariantTests`, `DefaultsEngineTests`).
///
/// Mutants this suite catches (each tried once, then restored):
/// - a claim that never expires (`claimIsFree` without the age test): `aClaimHoldsOthersBackUntilItExpires`;
/// - `installWritten` emptying the journal without bumping the generation: `aCompactionThatEmptiesTheJournal…`;
/// - `installBuilt` rewinding a journal whose tail is longer than what the image holds (the move would overlap its
///   source): `anImageBuiltInTheBackgroundEmptiesALongJournal`.
@Suite("Compaction's rules")
struct SuiteCompactorTests {
  typealias Slot = SuiteHeader.Slot
  typealias Files = SuiteJournalTests.Files

  static func status(of files: Files) throws -> FileStatus {
    try #require(try files.directory.status("Library/Preferences/s.lock"))
  }

  @Test func thresholdsFollowWhatACompactionReads() throws {
    let files = try Files()
    let compactor = SuiteCompactor(header: files.header, journal: try files.journal(reservation: 256 << 20))
    var thresholds = compactor.thresholds()
    #expect(thresholds.snapshot == 1 << 20 && thresholds.rewind == 8 << 20)  // a small suite
    files.header.store(Slot.compactionInput, 10 << 20)
    thresholds = compactor.thresholds()
    #expect(thresholds.snapshot == 20 << 20 && thresholds.rewind == 40 << 20)
    files.header.store(Slot.compactionInput, 100 << 20)  // never past half the journal's reservation
    thresholds = compactor.thresholds()
    #expect(thresholds.snapshot == 128 << 20 && thresholds.rewind == 128 << 20)
  }

  @Test func aClaimHoldsOthersBackUntilItExpires() throws {
    let files = try Files()
    let compactor = SuiteCompactor(header: files.header, journal: try files.journal())
    #expect(compactor.claimIsFree())
    compactor.claim()
    #expect(!compactor.claimIsFree())
    let since = files.header.load(Slot.compactorSince)
    #expect(!compactor.claimIsFree(now: since + SuiteCompactor.claimDuration))
    #expect(compactor.claimIsFree(now: since + SuiteCompactor.claimDuration + 1))  // stopped or dead: taken over
    compactor.releaseClaim()
    #expect(compactor.claimIsFree())
    // Another process's claim is not this one's to release.
    files.header.store(Slot.compactor, UInt64(UInt32(bitPattern: getpid())) &+ 1)
    files.header.store(Slot.compactorSince, MonotonicClock.nanoseconds())
    compactor.releaseClaim()
    #expect(!compactor.claimIsFree())
  }

  /// A compaction that keeps the journal: the snapshot is recorded and stands at the length it holds; the
  /// generation and the journal are untouched (nobody else reloads).
  @Test func aCompactionThatKeepsTheJournalMovesOnlyWhereTheSnapshotStands() throws {
    let files = try Files()
    let journal = try files.journal()
    let compactor = SuiteCompactor(header: files.header, journal: journal)
    try SuiteJournalTests.append(SuiteJournalTests.records(0..<10), to: journal)
    let length = Int(files.header.load(Slot.committed))
    try SuiteJournalTests.append(SuiteJournalTests.records(10..<12), to: journal)
    let committed = Int(files.header.load(Slot.committed))
    let status = try Self.status(of: files)
    files.header.store(Slot.overLimit, 1)
    let generation = compactor.installWritten(
      status, input: 1234, generation: 1, length: length, rewind: false, handedOver: true)
    #expect(generation == 1 && files.header.load(Slot.generation) == 1)
    #expect(Int(files.header.load(Slot.committed)) == committed)
    #expect(files.header.snapshotStart(generation: 1, committed: committed) == length)
    let recorded = files.header.recordedSnapshot()
    #expect(recorded == SuiteHeader.identity(status), "recorded \(recorded)")
    #expect(files.header.load(Slot.compactionInput) == 1234 && files.header.load(Slot.overLimit) == 0)
    // The same through the background's install, below the rewind threshold.
    #expect(!compactor.installBuilt(status, input: 99, generation: 1, length: committed))
    #expect(files.header.snapshotStart(generation: 1, committed: committed) == committed)
  }

  /// Emptying it: a new generation, the committed length set back, and what was folded said (a process that
  /// applied exactly that much skips reading the snapshot) — only when the state was the committed journal.
  @Test func aCompactionThatEmptiesTheJournalStartsANewGeneration() throws {
    let files = try Files()
    let journal = try files.journal()
    let compactor = SuiteCompactor(header: files.header, journal: journal)
    try SuiteJournalTests.append(SuiteJournalTests.records(0..<10), to: journal)
    let length = Int(files.header.load(Slot.committed))
    let status = try Self.status(of: files)
    let generation = compactor.installWritten(
      status, input: 10, generation: 1, length: length, rewind: true, handedOver: true)
    #expect(generation == 2 && files.header.load(Slot.generation) == 2)
    #expect(files.header.load(Slot.committed) == 0)
    #expect(files.header.load(Slot.foldedGeneration) == 1 && Int(files.header.load(Slot.foldedLength)) == length)
    #expect(files.header.snapshotStart(generation: 2, committed: 0) == 0)
    compactor.installWritten(status, input: 10, generation: 2, length: 0, rewind: true, handedOver: false)
    #expect(files.header.load(Slot.foldedGeneration) == .max && files.header.load(Slot.generation) == 3)
  }

  /// An image built in the background while the journal grew past the rewind threshold: the tail appended during
  /// the build moves to the start in a new generation — unless it is longer than what the image holds (the move
  /// would overlap its source), and then the journal is kept and the snapshot stands where it was built.
  @Test func anImageBuiltInTheBackgroundEmptiesALongJournal() throws {
    let files = try Files()
    let journal = try files.journal(reservation: 64 << 20)
    let compactor = SuiteCompactor(header: files.header, journal: journal)
    let value = String(repeating: "v", count: 1000)
    func fill(_ range: Range<Int>, _ prefix: String) throws {
      try SuiteJournalTests.append(
        range.map { JournalFormat.Record(key: "\(prefix)\($0)", operation: .set(.string(value)), pid: 1) }, to: journal)
    }
    try fill(0..<9000, "built")  // past 8 MiB: the rewind threshold of a small suite
    let length = Int(files.header.load(Slot.committed))
    try fill(0..<5, "tail")
    let committed = Int(files.header.load(Slot.committed))
    let status = try Self.status(of: files)
    #expect(compactor.installBuilt(status, input: 10, generation: 1, length: length))
    #expect(files.header.load(Slot.generation) == 2 && Int(files.header.load(Slot.committed)) == committed - length)
    #expect(journal.recordsWithoutLock(from: 0, to: committed - length, generation: 2)?.map(\.key).first == "tail0")
    // A tail longer than the image's part: kept.
    files.header.store(Slot.committed, 0)
    try fill(0..<10, "small")
    let small = Int(files.header.load(Slot.committed))
    try fill(0..<9000, "long")
    let long = Int(files.header.load(Slot.committed))
    #expect(!compactor.installBuilt(status, input: 10, generation: 2, length: small))
    #expect(files.header.load(Slot.generation) == 2 && Int(files.header.load(Slot.committed)) == long)
    #expect(files.header.snapshotStart(generation: 2, committed: long) == small)
  }
}
