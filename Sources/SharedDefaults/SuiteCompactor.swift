import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer

/// The rules of compaction over the suite's header and journal — when to compact, who compacts, and the order of
/// the stores that install a new snapshot — in one type. What it folds and how the image is built (from this
/// process's state, or from the snapshot and the journal read without the lock) is `DefaultsStore+Compaction`.
///
/// - **When**: once the journal holds twice what a compaction reads past the snapshot (at least 1 MiB), and the
///   journal is emptied as well past four times it (at least 8 MiB) — `thresholds`.
/// - **Who**: one process at a time builds in the background, holding a claim in the header (its pid and since
///   when); a claim older than `claimDuration` is a stopped or dead compactor's, and is taken over.
/// - **Installing** (with the lock, after the new snapshot is renamed into place — a complete state, so a reader
///   that finds it before it is recorded replays the journal over it, which changes nothing): its identity is
///   recorded, then either `snapshotAt` moves to the journal length it holds (keeping the journal: nobody else
///   notices), or the journal is emptied in a new generation — the **generation is bumped before the committed
///   length is set back**, so a process that last saw this generation at length 0 sees the change whatever point
///   the compactor died at.
struct SuiteCompactor: @unchecked Sendable {  // the header is atomics; the journal is `Sendable` by its own rules
  typealias Slot = SuiteHeader.Slot

  let header: SuiteHeader
  let journal: SuiteJournal

  /// The journal's length past the snapshot from which a compaction starts, and past which it also empties the
  /// journal, for a small suite.
  static let threshold = 1 << 20
  static let rewindThreshold = 8 << 20
  /// How long a process's claim to compact holds the others back. Test hook: `GROUPCONTAINER_DEFAULTS_CLAIM_SECONDS`,
  /// the duration by which a process judges others' claims (a test that must see a claim hold, whatever the load).
  static let claimDuration: UInt64 = {
    #if GROUPCONTAINER_TEST_HOOKS
      if let text = Environment.value("GROUPCONTAINER_DEFAULTS_CLAIM_SECONDS"), let n = UInt64(text), n > 0 {
        return n * 1_000_000_000
      }
    #endif
    return 10_000_000_000
  }()

  // MARK: When

  /// When to compact: once the journal holds `snapshot` bytes past the snapshot, and when to empty the journal as
  /// well: past `rewind` bytes.
  ///
  /// A compaction costs O(suite); waiting until the journal holds twice what it reads keeps it amortized O(1).
  /// What it reads, not what it writes: 10,000 keys sharing one 4 KB value are a 100 KB snapshot that takes 40 MB
  /// to encode, and were compacted every 256 sets (a set cost 20× one of distinct values). Most compactions keep
  /// the journal (no new generation), so no other process re-reads the suite because of them; emptying it makes
  /// every process reload, so it waits for 8 MiB or four times what a compaction reads. Both come before the
  /// journal's reservation is half used, or a large suite would fill it and sets fail.
  func thresholds() -> (snapshot: Int, rewind: Int) {
    let input = max(header.length(Slot.snapshotSize), header.length(Slot.compactionInput))
    let cap = journal.reservation / 2
    return (min(max(Self.threshold, 2 * input), cap), min(max(Self.rewindThreshold, 4 * input), cap))
  }

  // MARK: Who

  /// No process holds a claim, or the one that does has held it past `claimDuration` (stopped, or dead).
  func claimIsFree(now: UInt64 = MonotonicClock.nanoseconds()) -> Bool {
    header.load(Slot.compactor) == 0 || now &- header.load(Slot.compactorSince) > Self.claimDuration
  }

  /// This process compacts in the background now (with the lock held).
  func claim() {
    header.store(Slot.compactorSince, MonotonicClock.nanoseconds())
    header.store(Slot.compactor, Self.me)
  }

  /// Ends this process's claim (with the lock held); a claim another process took over stays its.
  func releaseClaim() {
    if header.load(Slot.compactor) == Self.me { header.store(Slot.compactor, 0) }
  }

  private static var me: UInt64 { UInt64(UInt32(bitPattern: CurrentProcess.id)) }

  // MARK: Installing

  /// With the lock, after an image built in the background was renamed into place as the snapshot: it holds the
  /// journal up to `length` of `generation` (still the current one: the caller checked) and took `input` bytes to
  /// build. Records it; then, past the rewind threshold, empties the journal — what was appended while the image
  /// was built moves to its start, in a new generation (when it is no longer than what the image holds: see
  /// `SuiteJournal.moveTail`) — or else moves `snapshotAt` to `length`. Returns whether the journal was emptied.
  func installBuilt(_ status: FileStatus, input: Int, generation: UInt64, length: Int) -> Bool {
    header.recordSnapshot(status)
    header.store(Slot.compactionInput, UInt64(input))
    let committed = header.length(Slot.committed)
    if committed > thresholds().rewind && committed - length <= length {
      FaultPoint.pause("defaults.rewind.starting")  // tests: other processes read up to `committed` here
      journal.moveTail(from: length, to: committed)
      return true
    }
    header.store(Slot.snapshotAt, (generation & 0xFFFF_FFFF) << 32 | UInt64(length))
    FaultPoint.reach("defaults.snapshot.recorded")
    return false
  }

  /// With the lock, after a compaction of the whole committed state (`length` of `generation`) wrote the snapshot:
  /// records it; with `rewind`, empties the journal in a new generation (returned) — `handedOver`: the state was
  /// exactly the committed journal, so a process that applied that much may skip reading the new snapshot — or
  /// else moves `snapshotAt` to `length`. The suite is under its limits again (the image was checked when written).
  @discardableResult
  func installWritten(
    _ status: FileStatus, input: Int, generation: UInt64, length: Int, rewind: Bool, handedOver: Bool
  ) -> UInt64 {
    header.recordSnapshot(status)
    header.store(Slot.compactionInput, UInt64(input))
    var current = generation
    if rewind {
      header.store(Slot.foldedGeneration, handedOver ? generation : .max)
      header.store(Slot.foldedLength, UInt64(length))
      journal.forgetMove()
      current = header.increment(Slot.generation)
      FaultPoint.reach("defaults.compact.generationBumped")
      header.store(Slot.committed, 0)
    } else {
      header.store(Slot.snapshotAt, (generation & 0xFFFF_FFFF) << 32 | UInt64(length))
      FaultPoint.reach("defaults.snapshot.recorded")
    }
    header.store(Slot.overLimit, 0)
    return current
  }
}
