import SystemLayer

/// The words of `.coordination/counters`, a `MappedCounters` file every process of the container maps (created
/// and sized by `CoordinationSpace`). Declared once, here; a test checks the ranges are disjoint and fit
/// (`layout`). The file is shared with processes of older builds: never move a range, add new ones in free words.
///
/// Free today: 4–7, 10–15, 144–255, 384–510 (511 is the file's epoch, `MappedCounters`).
package enum CoordinationCounters {
  /// Bumped by every presenter registration and removal (`PresenterRegistry`): unchanged since the registry was
  /// seen empty, an access reads no bucket at all.
  package static let presenterGeneration = 0
  /// Removing unused lock files (Rule 3b, `LockFileSweep`): the sweep sequence (odd while a removal is under way),
  /// the lock files ever created in the container, and that count when the last finished sweep began.
  package static let lockSweepSequence = 1, lockFilesCreated = 2, lockFilesCreatedAtSweep = 3
  /// Lock revocation (Rule 4a, `LockRevocation`): the wake word — a `ChangeSignal` sequence every caching
  /// process's sweeper sleeps on, posted by a refused tree EX request — and its listener count.
  package static let revocationWake = 8, revocationListeners = 9
  /// Lock revocation, one word per bucket (64 buckets by a hash of the lock key's path): the bucket's generation,
  /// bumped by a revoker; then the time (monotonic nanoseconds) until which a revocation is pending there.
  package static let revocationGenerations = 16..<80
  package static let revocationPendingUntil = 80..<144
  /// The presenter registry's bucket generations (`PresenterRegistry`): 128 slots by a hash of the record's
  /// path, bumped by a registration or removal of a record in a bucket on that path.
  package static let presenterBuckets = 256..<384

  package static let layout = MappedLayout(
    file: CoordinationPaths.counters,
    [
      ("presenter generation", MappedLayout.word(presenterGeneration)),
      ("lock sweep sequence", MappedLayout.word(lockSweepSequence)),
      ("lock files created", MappedLayout.word(lockFilesCreated)),
      ("lock files created at the last sweep", MappedLayout.word(lockFilesCreatedAtSweep)),
      ("revocation wake", MappedLayout.word(revocationWake)),
      ("revocation listeners", MappedLayout.word(revocationListeners)),
      ("revocation generations", revocationGenerations),
      ("revocation pending until", revocationPendingUntil),
      ("presenter bucket generations", presenterBuckets),
    ])
}
