import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// The header's rules for an outside edit's judgement cut short (SuiteHeader.swift, `judging*` words), on their own.
/// The kill points that leave them are held across processes by
/// `OutsideEditBaseTests.aJudgementCutShortByAKillIsCarriedOut`.
///
/// Mutants this suite catches (each tried once, then restored):
/// - `settleJudging` always applying again (not looking at the journal): `anInterruptedApplyIsSettledByTheJournal`
///   — a commit made before the kill would be made again over later values (the process test cannot see it: the
///   next process's retry comes before any later write, and is a no-op there);
/// - `judging` not comparing the file's identity: `aPendingJudgementIsOnlyForItsFile`.
@Suite("The suite header's judgement words")
struct SuiteHeaderTests {
  typealias Slot = SuiteHeader.Slot

  /// The status of a new file `name` beside the header (a tool's file, as the store would have it).
  func status(_ files: SuiteJournalTests.Files, _ name: String) throws -> FileStatus {
    try files.preferences.openOrCreate(name, mode: 0o600, size: 10).close()
    return try #require(try files.directory.status("Library/Preferences/" + name))
  }

  @Test func anInterruptedApplyIsSettledByTheJournal() throws {
    let files = try SuiteJournalTests.Files()
    let header = files.header
    let edit = try status(files, "edit")
    header.store(Slot.committed, 100)
    header.beginJudging(edit)
    #expect(header.judging(edit) == .judging)
    header.decideJudging(.applying)
    // Its process died before its commit: nothing moved; the next lock holder applies it again.
    header.settleJudging()
    #expect(header.judging(edit) == .applyAgain)
    // Its process died after its commit (the journal moved past the recorded point): done, never applied twice.
    header.decideJudging(.applying)
    header.store(Slot.committed, 140)
    header.settleJudging()
    #expect(header.judging(edit) == .none)
    // The same after a compaction that emptied the journal in a new generation.
    header.decideJudging(.applying)
    header.store(Slot.committed, 0)
    header.store(Slot.generation, header.load(Slot.generation) + 1)
    header.settleJudging()
    #expect(header.judging(edit) == .none)
    // A decision to keep aside is left for the next judgement of the file.
    header.decideJudging(.keepingAside)
    header.settleJudging()
    #expect(header.judging(edit) == .keepingAside)
  }

  @Test func aPendingJudgementIsOnlyForItsFile() throws {
    let files = try SuiteJournalTests.Files()
    let header = files.header
    let edit = try status(files, "edit")
    header.beginJudging(edit)
    header.decideJudging(.keepingAside)
    #expect(header.judging(edit) == .keepingAside)
    #expect(header.judging(try status(files, "another")) == .none)
    var rewritten = edit
    rewritten.size += 1
    #expect(header.judging(rewritten) == .none)
    rewritten = edit
    rewritten.modificationNanoseconds += 1
    #expect(header.judging(rewritten) == .none)
  }
}
