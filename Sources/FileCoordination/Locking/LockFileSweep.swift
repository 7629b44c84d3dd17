import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// **Rule 3b: unused lock files are removed, and a lock is never taken on a removed one** — in one place.
///
/// Lock files are made on demand (one per coordinated item and kind, LockOrder.swift) and were never removed: 200
/// writes of distinct files left 402 of them, each an inode and a block, for good. Removing one is safe only if no
/// process can go on to "hold" it after: a flock on a removed inode excludes nobody, while the next process that
/// opens the name makes a new file and locks that.
///
/// - *The remover* (`sweep`) takes the directory's own flock (one sweep at a time; a dead sweeper's goes with it),
///   then, for each lock file: `LOCK_EX | LOCK_NB` on its own descriptor — held by nobody, or it is skipped —, checks
///   that the name still is that inode with a link and that no process has it open (a process keeping it for its
///   next access would only make it again), and removes the name between two bumps of the container's
///   *sweep sequence* (`CoordinationCounters.lockSweepSequence`): odd while a removal is under way, even after.
///   It unlocks only after the second bump.
/// - *Every acquirer* (`LockTable.take`) reads the sequence (with the counters' epoch) before it opens a lock file
///   (`mark`), and after each flock it takes compares (`verify`): the sequence unchanged and even, in the same
///   epoch, the file cannot have been removed since
///   (a removal ends with a bump before the remover unlocks, and the flock was granted after that unlock — or the
///   remover died, leaving the sequence odd). Otherwise one `fstat`: no link left, the acquirer unlocks, opens the
///   name again and takes the new file's lock. While anyone holds a lock, nobody can remove its file, so the check
///   made under the flock stays true until it is released; a descriptor kept open between accesses keeps the
///   sequence it was last checked at.
/// - A remover killed between its bumps leaves the sequence odd: every acquirer then checks with `fstat` (safe,
///   one call slower) until the next sweep, which a process opening the container starts, makes it even again.
///   One *stopped* there (SIGSTOP) still holds the removed file's lock: an acquirer waiting on that file sees the
///   odd sequence and the file's lost link while it waits (`isRemovedWhileWaiting`), and opens the name again.
/// - *Older builds* lock files without reading the sequence: while a process of one lives (its liveness lock is
///   empty; this build's holds a marker, Liveness.swift), a sweep removes nothing. Left open: such a process that
///   starts during a sweep and opens a file between that file's checks and its removal.
/// - *When*: once `threshold` lock files were created in the container (a shared count) since the last finished
///   sweep, the process that creates one sweeps in the background. So about `threshold` unused lock files stay,
///   besides those live processes keep open (up to 256 each, LockTable), which a later sweep removes once closed.
///
/// *What if you don't:* remove without the sequence and two writers, one on the old inode and one on the new, both
/// hold the "exclusive" lock (LockFileSweepTests' counter loses increments). Never remove them and the directory
/// grows by two files per item ever written, a download's destination included.
struct LockFileSweep: Sendable {
  static let sequence = CoordinationCounters.lockSweepSequence
  static let created = CoordinationCounters.lockFilesCreated
  static let createdAtSweep = CoordinationCounters.lockFilesCreatedAtSweep
  /// Lock files created in the container between two sweeps. Tests make it small.
  package static let threshold = Atomic<UInt64>(256)

  let counters: MappedCounters
  /// Whether a live process of the container runs a build that does not read the sequence (Liveness.swift,
  /// `olderBuildIsAlive`): no sweep removes anything while one lives.
  let olderBuildIsAlive: @Sendable () -> Bool

  /// The sequence, read before opening a lock file — plus twice the counters' epoch (`MappedCounters.epoch`; the
  /// parity stays the sequence's). A counters file that lost its values (truncated, then healed) or was made anew
  /// (the container removed and made again, `rebind`) starts a new epoch: its sequence, counted up from zero
  /// again, could show a value a descriptor was checked at while that descriptor's file was removed since.
  func mark() -> UInt64 { counters.load(Self.sequence) &+ (counters.epoch &<< 1) }

  /// After a flock on `fd` was taken, with `seen` the mark read before the file was opened (or at its last check):
  /// the mark to keep with the descriptor, or nil when the file was removed (its lock excludes no one: unlock and
  /// open the name again).
  func verify(_ fd: borrowing SystemFD, seen: UInt64) -> UInt64? {
    let now = mark()
    if now == seen && now & 1 == 0 { return now }
    // An fstat that fails on an open descriptor says nothing: treated as removed, the lock is taken anew.
    guard let status = try? fd.status(), status.linkCount > 0 else { return nil }
    return now
  }

  /// While an acquirer's flock on `fd` is refused: whether the file was removed meanwhile — its remover holds it
  /// until its second bump, and a remover stopped there (SIGSTOP) would keep the acquirer waiting on a file nobody
  /// can reach by name while the name leads to a new one. Costs a load; an `fstat` only while the sequence is odd
  /// (a removal under way, or its remover dead before its second bump).
  func isRemovedWhileWaiting(_ fd: borrowing SystemFD) -> Bool {
    guard counters.load(Self.sequence) & 1 == 1, let status = try? fd.status() else { return false }
    return status.linkCount == 0
  }

  /// Counts one lock file created: whether a sweep is due.
  func noteCreated() -> Bool {
    let created = counters.increment(Self.created)
    return created &- counters.load(Self.createdAtSweep) >= Self.threshold.load(ordering: .relaxed)
  }

  /// Whether a sweeper died between its two bumps (the sequence is odd): a sweep makes it even again.
  var needsRepair: Bool { counters.load(Self.sequence) & 1 == 1 }

  /// Removes every lock file in `locks` that no process holds — nor has open, with `keepingOpen` (tests sweep
  /// those too, to race with the acquirers that have them open: the case the sequence is for) —; returns how many.
  /// Returns 0 at once when another process sweeps.
  func sweep(_ locks: borrowing SystemFD, keepingOpen: Bool = true) -> Int {
    guard let directory = try? locks.open(".", [.readOnly, .directory]),
      (try? directory.lock(.exclusive, nonBlocking: true)) == true
    else { return 0 }
    defer { directory.unlock() }
    // The last sweeper died between its bumps: it removes nothing more, so its "after" bump is made for it.
    if needsRepair { counters.increment(Self.sequence) }
    let created = counters.load(Self.created)
    // A process of a build before this rule locks a file it opened without looking at the sequence. The sweep is
    // counted as done all the same: the next one comes `threshold` creations later, not at every creation.
    if olderBuildIsAlive() {
      counters.store(Self.createdAtSweep, created)
      return 0
    }
    var removed = 0
    for (name, isDirectory) in (try? locks.entries()) ?? [] where !isDirectory && LockOrder.isLockFileName(name) {
      if remove(name, in: locks, keepingOpen: keepingOpen) { removed += 1 }
    }
    // Only a finished sweep counts: a short-lived process (a `groupctl write`) often exits before its background
    // sweep is done, and the next process then goes on where it stopped (what it removed is gone).
    counters.store(Self.createdAtSweep, created)
    return removed
  }

  private func remove(_ name: String, in locks: borrowing SystemFD, keepingOpen: Bool) -> Bool {
    // O_NOFOLLOW | O_NONBLOCK (every open of SystemLayer): a planted link or FIFO neither leads out nor blocks.
    guard let fd = try? locks.open(name, .readWrite), (try? fd.status())?.kind == .regular,
      (try? fd.lock(.exclusive, nonBlocking: true)) == true
    else { return false }
    defer { fd.unlock() }  // before the descriptor closes: a child being spawned may hold a copy of it
    // Under the flock: still linked, and still the file of that name (another sweeper may have replaced it since
    // this open — not while we hold the lock, but before).
    guard let mine = try? fd.status(), mine.linkCount > 0,
      let named = try? locks.status(of: name), named.inode == mine.inode, named.device == mine.device
    else { return false }
    // A file some process keeps open, idle, for its next access (LockTable keeps up to 256) stays: removing it
    // would only make that process create it again. Nil (a file of another user: no lease) is not a reason to keep
    // it; the sequence, not this check, is what keeps exclusion (an open may come right after it).
    if keepingOpen, fd.isOpenElsewhere() == true { return false }
    counters.increment(Self.sequence)  // odd: a removal under way
    defer { counters.increment(Self.sequence) }  // even again, before the unlock above
    let unlinked = (try? locks.removeFile(name)) != nil
    FaultPoint.reach("locks.sweepRemoved")  // a test kills a sweeper here: the sequence stays odd
    FaultPoint.pause("locks.sweepRemoved")  // or stops it here, holding the removed file
    return unlinked
  }
}
