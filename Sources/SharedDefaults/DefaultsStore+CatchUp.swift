import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// Reading and catching up (rule: a read never waits for another process). A read asks the mapped header whether
/// anything changed; if so it applies the new journal records — or maps the snapshot and replays the journal past it
/// — without the suite's lock, as a seqlock reader: the generation is loaded again after the journal's bytes were
/// read, and a different one means they may have been written over (`catchUpWithoutLock`). Only a repair takes the
/// lock (`catchUp`, `reload`, in the background for a reader that already has a state).
extension DefaultsStore {
  /// Runs `read` on the current, whole state (a lazy tail applied). Waits for the suite's lock only when this
  /// process never loaded the suite and it cannot be read without the lock (damaged files, a compaction that did not
  /// finish) — and then without holding `state`.
  func readCurrent<T: Sendable>(_ read: (State) -> T) -> T {
    if let done = state.withLock({ s -> T? in
      guard refreshWithoutWaiting(&s, lazy: false) || readOnly, s.tail == nil else { return nil }
      let result = read(s)
      if s.values.damage != nil { scheduleRepair() }  // the image did not read: this read answered without it
      return result
    }) {
      return done
    }
    do { try exclusively { s throws(SharedDefaultsError) in try catchUpExclusively(&s) } } catch {
      Self.logger.error("suite '\(suite)': could not recover: \(error)")
    }
    return state.withLock { s in read(s) }
  }

  /// Brings `s` up to date without waiting for another process: what a read needs can be read without the
  /// suite's lock (`catchUpWithoutLock`). When that is not possible (a repair is needed), the repair is left to the
  /// background and `s` stays the last good state — unless it was never loaded: then returns false.
  /// `lazy`: a load may leave a long journal past the snapshot unread (DefaultsStore+LazyTail.swift); false applies
  /// a tail left earlier.
  func refreshWithoutWaiting(_ s: inout State, lazy: Bool = true) -> Bool {
    if !lazy { applyTail(&s) }
    guard header.load(Slot.generation) != s.generation || header.load(Slot.committed) != UInt64(s.length) else {
      return true
    }
    for _ in 0..<3 where catchUpWithoutLock(&s, lazy: lazy) {
      mergeTiersIfNeeded(s)
      return true
    }
    // Never answer without this process's own writes: catch up under the lock instead.
    guard s.generation != .max, !s.ownWritesUnapplied else { return false }
    scheduleRepair()
    return true
  }

  /// Catches up under the lock in the background, repairing what needs it (reads never wait for that).
  func scheduleRepair() {
    guard !readOnly, !repairPending.exchange(true, ordering: .acquiringAndReleasing) else { return }
    background.async { [self] in
      repairPending.store(false, ordering: .releasing)
      do { try exclusively { s throws(SharedDefaultsError) in try catchUpExclusively(&s) } } catch {
        Self.logger.error("suite '\(suite)': could not recover: \(error)")
      }
    }
  }

  /// Whether the journal changed in a way only a full catch-up handles (a compaction, a repair, damage).
  func needsCatchUpBeforeAppending(generation: UInt64, length: Int) -> Bool {
    headerLost.load(ordering: .relaxed) || !journal.intact
      || header.load(Slot.generation) != generation || header.length(Slot.committed) < length
  }

  /// Before a set in a new generation (another process emptied the journal), a process without observers takes
  /// the snapshot as its state — mapped, O(1) — and leaves the journal past it to its next read: a full catch-up
  /// here would cost every writer, under the lock, the records appended while the rewind's image was built. False
  /// when that is not possible (observers, which need the difference; damage; a snapshot not yet recorded).
  func adoptSnapshotOnly(_ s: inout State) -> Bool {
    let generation = header.load(Slot.generation)
    let committed = header.length(Slot.committed)
    guard s.observers.isEmpty, s.generation != .max, generation != s.generation, s.values.frozenToken == 0,
      !headerLost.load(ordering: .relaxed), journal.intact,
      header.load(Slot.rewindTo) == 0, let image = try? loadImage(), isRecordedSnapshot(image.status)
    else { return false }
    replaceValues(with: SuiteValues(image: image), in: &s)
    s.generation = generation
    s.length = header.snapshotStart(generation: generation, committed: committed)
    s.pendingOwn = [:]
    s.ownWritesUnapplied = true  // whatever it wrote in the last generation is in the snapshot or past `length`
    return true
  }

  // MARK: Catching up

  /// Catches up without the suite's lock, as a seqlock reader: a writer only writes past the committed length,
  /// and a compaction bumps the generation before anything is written over (or the snapshot's recorded identity
  /// changes), so what was read is good if the generation is the same after reading it (`loadAfterFence`).
  /// Returns false when it must be tried again or done under the lock (the files changed meanwhile, or need a
  /// repair: damage, a snapshot whose compaction did not finish).
  func catchUpWithoutLock(_ s: inout State, lazy: Bool = true) -> Bool {
    guard !headerLost.load(ordering: .relaxed), journal.intact
    else { return false }
    let generation = header.load(Slot.generation)
    let committed = header.length(Slot.committed)
    guard header.load(Slot.rewindTo) == 0 else { return false }  // the journal's bytes are moving (`moveTail`)
    if generation != s.generation { _ = followMovedTail(&s, generation: generation, committed: committed) }
    var values: SuiteValues?
    var start = s.length
    if generation != s.generation || committed < s.length
      || reloadIsCheaper(s, generation: generation, committed: committed)
    {
      let folded =
        s.generation != .max && s.pendingOwn.isEmpty && s.tail == nil
        && header.load(Slot.foldedGeneration) == s.generation
        && header.load(Slot.foldedLength) == UInt64(s.length)
      if folded {
        start = 0  // a compaction folded exactly what we have into the snapshot: skip reading it
      } else {
        // Read before the snapshot: a compaction that keeps the journal replaces the file first, then moves this
        // (replaying from an older point over a newer snapshot changes nothing).
        start = header.snapshotStart(generation: generation, committed: committed)
        let image: SuiteImage?
        do { image = try loadImage() } catch { return false }
        guard isRecordedSnapshot(image?.status) else { return false }
        values = SuiteValues(image: image)
      }
    }
    let loaded = s.generation != .max
    if lazy, let image = values, s.observers.isEmpty,
      committed - start >= Self.lazyTailBytes
    {
      // A long journal past the snapshot (its writer never compacted): left unread, for point reads to scan —
      // applied in the background after a few scans, or at once by a process that was reading already.
      guard header.loadAfterFence(Slot.generation) == generation, header.load(Slot.rewindTo) == 0 else { return false }
      replaceValues(with: image, in: &s)
      let tail = LazyTail(range: start..<committed)
      s.tail = tail
      s.pendingOwn = [:]
      s.generation = generation
      s.length = committed
      s.ownWritesUnapplied = false
      if loaded { scheduleTailApplication(tail, &s) }
      if (try? exportState()) != .current || hasKeptExports() { scheduleExportCheck() }
      return true
    }
    if lazy, values == nil, handOverCatchUp(&s, committed: committed) { return true }
    // Between the header's load and the journal's read: another process may empty the journal and write over it
    // here, which only the generation's second load below tells (tests pause here).
    if values == nil { FaultPoint.pause("defaults.read.headerLoaded") }
    var (records, offsets): ([JournalFormat.Record], [Int])
    switch journal.readWithoutLock(from: start, to: committed, generation: generation) {
    case .records(let read, let at): (records, offsets) = (read, at)
    case .changed: return false
    case .unreadable:
      // Committed, in an unchanged generation, and still not a record: rule 1 was broken, or the file damaged.
      Self.committedButUnreadable.add()
      return false
    }
    if var values {
      for record in records { apply(record, to: &values) }
      replaceValues(with: values, in: &s)
      s.pendingOwn = [:]
      if (try? exportState()) != .current || hasKeptExports() { scheduleExportCheck() }
    } else {
      if start == 0 { s.pendingOwn = [:] }
      records = withoutSuperseded(records, at: offsets, by: s.pendingOwn)
      s.pendingOwn = [:]
      apply(records, to: &s)
    }
    s.generation = generation
    s.length = committed
    s.ownWritesUnapplied = false
    if values == nil, rebaseIsWorthIt(s) { scheduleRebase() }  // O(the journal past the snapshot): not on a read
    return true
  }

  /// After a rewind that moved a tail (`SuiteJournal.moveTail`: the new generation's journal is the emptied one's
  /// bytes from `from` on), a process that had read its generation past `from` holds what the new snapshot and the
  /// journal up to its length less `from` hold: it goes on from there and reads nothing — no snapshot, no replay.
  /// Every process used to reload at every rewind: the moved tail — what was appended while the image was built —
  /// replayed on a reader's thread, and with observers the whole suite compared. Its values keep their older image
  /// until a rebase in the background
  /// (`rebaseIsWorthIt`). False when this does not apply (the caller reloads): another kind of new generation, a
  /// process behind `from`, a lazy tail that began before `from`. Without the lock: the generation is loaded again
  /// after.
  func followMovedTail(_ s: inout State, generation: UInt64, committed: Int) -> Bool {
    let old = s.generation
    guard old != .max, generation == old &+ 1, s.values.damage == nil,
      let from = journal.movedFrom(into: generation), s.length >= from, s.length - from <= committed,
      s.tail.map({ $0.range.lowerBound >= from }) ?? true,
      header.loadAfterFence(Slot.generation) == generation, journal.movedFrom(into: generation) == from
    else { return false }
    s.generation = generation
    s.length -= from
    if let tail = s.tail {
      // A tail not yet applied is the same records, moved too (the application under way is dropped).
      let moved = tail.moved(back: from)
      s.tail = moved
      if tail.applying { scheduleTailApplication(moved, &s) }
    }
    // Own commits past `length` are past `from`: the same records, `from` bytes earlier.
    s.pendingOwn = s.pendingOwn.compactMapValues { $0.start >= from ? ($0.start - from, $0.end - from) : nil }
    s.scanned = s.scanned.generation == old && s.scanned.to >= from ? (generation, s.scanned.to - from) : (.max, 0)
    return true
  }

  /// Whether this process, current, holds many changes over an older image than the recorded snapshot, and taking
  /// that snapshot and the journal past it instead — the same state — applies fewer records than it holds: a
  /// reader of a growing suite otherwise keeps every change it applied until the next rewind, and its memory
  /// follows what others write, not what it reads.
  func rebaseIsWorthIt(_ s: State) -> Bool {
    guard s.values.changeCount > Self.changesBeforeCompaction, s.values.frozenToken == 0, s.values.damage == nil,
      s.generation == header.load(Slot.generation), s.length == header.length(Slot.committed),
      SuiteHeader.identity(s.values.image?.status) != header.recordedSnapshot()
    else { return false }
    let start = header.snapshotStart(generation: s.generation, committed: s.length)
    return (s.length - start) / 32 < s.values.changeCount  // a record takes 32 bytes or more
  }

  /// In the background: the recorded snapshot and the journal past it become this process's values (the same
  /// state, fewer changes held). Read without the suite's lock and without `state` (reads go on meanwhile; a
  /// reader following a fast-growing suite stalled 1.15 s doing this itself), as `catchUpWithoutLock` reads;
  /// installed if `state` is still in that generation, with the few records reads applied meanwhile replayed over
  /// it (else dropped: the next catch-up asks again). Observers hear nothing: no value changed.
  /// `waitForBackgroundWork` waits for it.
  /// Journal bytes past which a rebase catches up outside `state` before it installs.
  static let rebaseCatchUpBytes = 64 << 10

  func scheduleRebase() {
    guard !rebasePending.exchange(true, ordering: .acquiringAndReleasing) else { return }
    compactions.enter()
    background.async { [weak self, compactions] in
      defer { compactions.leave() }
      guard let self else { return }
      rebasePending.store(false, ordering: .releasing)
      let at = state.withLock { s in rebaseIsWorthIt(s) ? (s.generation, s.length) : nil }
      guard let (generation, start) = at, var values = rebased(generation: generation, committed: start)
      else { return }
      // Reads went on meanwhile, applying what a fast writer appended: those records are applied here too, outside
      // `state`, until few are left for the install (applying tens of thousands under it held a read up 100 ms).
      var committed = start
      for _ in 0..<4 {
        guard let length = state.withLock({ $0.generation == generation ? $0.length : nil }),
          length - committed > Self.rebaseCatchUpBytes
        else { break }
        guard let records = journal.recordsWithoutLock(from: committed, to: length, generation: generation) else {
          return
        }
        for record in records { apply(record, to: &values) }
        committed = length
      }
      state.withLock { s in
        guard s.generation == generation, s.length >= committed, s.pendingOwn.isEmpty, !s.ownWritesUnapplied,
          s.values.frozenToken == 0, s.values.damage == nil
        else { return }
        if s.length > committed {
          // The records reads applied since the last catch-up above (a few) are applied here too.
          guard let records = journal.recordsWithoutLock(from: committed, to: s.length, generation: generation)
          else { return }
          for record in records { apply(record, to: &values) }
        }
        release(s.values)
        s.values = values
        s.tail = nil  // the rebased values are the whole state
        mergeTiersIfNeeded(s)
      }
    }
  }

  /// The state at (generation, committed) read from the recorded snapshot and the journal past it; nil if that
  /// cannot be read without the lock (the files changed meanwhile, damage).
  private func rebased(generation: UInt64, committed: Int) -> SuiteValues? {
    guard header.load(Slot.rewindTo) == 0, let image = try? loadImage(counted: false),
      isRecordedSnapshot(image.status)
    else { return nil }
    let start = header.snapshotStart(generation: generation, committed: committed)
    guard let records = journal.recordsWithoutLock(from: start, to: committed, generation: generation) else {
      return nil
    }
    var values = SuiteValues(image: image)
    for record in records { apply(record, to: &values) }
    return values
  }

  /// Brings `s` to the committed state. Needs the lock. Throws `Repair` when files need repairing first.
  func catchUp(_ s: inout State) throws(Repair) {
    if !journal.intact {
      throw .corruptJournal("the journal file was truncated by another program")
    }
    let generation = header.load(Slot.generation)
    let committed = header.length(Slot.committed)
    if let damage = s.values.damage {
      // A lookup found the image damaged: the snapshot is repaired if it is that image, else read again.
      guard !isRecordedSnapshot(s.values.image?.status) else {
        throw .corruptSnapshot("\(suite).snapshot", damage.description)
      }
      try reload(&s, generation: generation, committed: committed)
      return
    }
    if generation != s.generation { _ = followMovedTail(&s, generation: generation, committed: committed) }
    // Shorter than what we applied, same generation: a compaction stored its generation and then set the length
    // back (or died between the two); its snapshot is complete (it was written first), so reload from it.
    if generation != s.generation || committed < s.length
      || reloadIsCheaper(s, generation: generation, committed: committed)
    {
      try reload(&s, generation: generation, committed: committed)
      return
    }
    guard committed != s.length else { return }
    let (bytes, truncated) = journal.read(from: s.length, to: committed)
    var records: [JournalFormat.Record] = []
    var offsets: [Int] = []
    var corruption = truncated
    do { try JournalFormat.decode(bytes, base: s.length, into: &records, offsets: &offsets) } catch {
      corruption = corruption ?? error.description
    }
    records = withoutSuperseded(records, at: offsets, by: s.pendingOwn)
    if corruption == nil { s.pendingOwn = [:] }  // every pending commit ends at or before `committed`
    apply(records, to: &s)
    if let corruption { throw .corruptJournal(corruption) }
    s.length = committed
    s.ownWritesUnapplied = false
    // Not here, under the suite's lock: its reading is O(the journal past the snapshot).
    if rebaseIsWorthIt(s) { scheduleRebase() }
  }

  /// Whether reading the snapshot and the journal past it costs less than the journal from where `s` stands: a
  /// process that only writes catches up only when it compacts, and 4 writers decoding megabytes of each other's
  /// records under the lock ran at 0.7× the speed of reloading their 60 KB snapshot. Per value, parsing the
  /// snapshot and replacing the state costs about what decoding and applying a record does, and a record takes
  /// 2–3 times the bytes of a snapshot entry: so the snapshot wins when the journal behind it is over 4 times
  /// its size (a process that reads often never comes to that).
  func reloadIsCheaper(_ s: State, generation: UInt64, committed: Int) -> Bool {
    let start = header.snapshotStart(generation: generation, committed: committed)
    return start > s.length && 4 * header.length(Slot.snapshotSize) < start - s.length
  }

  /// `records` (at `offsets`) less those that this process's own pending commits supersede: those are applied
  /// already, and newer than any record of the same key before them.
  func withoutSuperseded(
    _ records: [JournalFormat.Record], at offsets: [Int], by pending: [String: (start: Int, end: Int)]
  ) -> [JournalFormat.Record] {
    guard !pending.isEmpty else { return records }
    return zip(records, offsets).filter { record, offset in
      guard let own = pending[record.key] else { return true }
      return offset >= own.end
    }.map(\.0)
  }

  /// Reads the snapshot and the whole journal (after a compaction somewhere, or on first use). The snapshot and
  /// the journal's good records are applied even when the journal is damaged: the repair that follows then
  /// starts from everything that can still be read, never from an empty state.
  func reload(_ s: inout State, generation: UInt64, committed: Int) throws(Repair) {
    let recorded = try snapshotIsTheRecordedOne()
    if recorded, s.generation != .max, s.pendingOwn.isEmpty, header.load(Slot.foldedGeneration) == s.generation,
      header.load(Slot.foldedLength) == UInt64(s.length), header.load(Slot.generation) == generation
    {
      // A compaction folded exactly what we have into the snapshot: skip reading it.
      s.generation = generation
      s.length = 0
      try catchUp(&s)
      return
    }
    // A snapshot that is not the recorded one was written by a compaction that died before recording it: it holds
    // everything up to the journal's committed length, so replaying the journal over it changes nothing.
    let start = header.snapshotStart(generation: generation, committed: committed)
    let image = try loadImage()
    var values = SuiteValues(image: image)
    if !recorded {
      // Either way it is the state to start from; a copied or restored container (every inode new) says this once.
      Self.logger.notice(
        "suite '\(suite)': adopting a snapshot the header did not record (a compaction did not finish, or the container was copied)"
      )
      header.recordSnapshot(image?.status)
    }
    let (bytes, truncated) = journal.read(from: start, to: committed)
    var records: [JournalFormat.Record] = []
    var corruption = truncated
    do { try JournalFormat.decode(bytes, base: start, into: &records) } catch {
      corruption = corruption ?? error.description
    }
    for record in records { apply(record, to: &values) }
    replaceValues(with: values, in: &s)
    s.pendingOwn = [:]
    s.generation = generation
    s.length = committed
    s.ownWritesUnapplied = false
    if let corruption { throw .corruptJournal(corruption) }
    // Checked in the background: an export edited by another tool never delays or fails this operation.
    if (try? exportState()) != .current || hasKeptExports() { scheduleExportCheck() }
  }
}
