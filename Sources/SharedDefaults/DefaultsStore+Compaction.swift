import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// Compaction: folding the journal into the next snapshot image — what is folded and how the image is built. When,
/// who, and the order of the stores that install it are SuiteCompactor.swift's. A writer that crosses the threshold
/// builds the image in the background without the lock (`startCompaction`, `finishCompaction`) and installs it with
/// the lock; idle for 5 s, and `synchronize()`, compact and then export.
extension DefaultsStore {
  /// Makes the snapshot current and durable (survives power loss). `emptyingJournal` (tests) forces the
  /// compaction that starts a new generation, which otherwise waits for the journal to grow.
  ///
  /// The image is built as a background compaction builds it — from the recorded snapshot and the journal up to
  /// now, without the lock (a set waited 272 ms behind a `synchronize()` of 400,000 keys that built it with the
  /// lock) — then written and synced, and installed with the lock. Overtaken by another compaction, it is built
  /// again once, then with the lock. An export edited by another tool, and `emptyingJournal`, take the lock for the
  /// whole compaction, as before.
  func synchronize(emptyingJournal: Bool = false) throws(SharedDefaultsError) {
    try refuseIfReadOnly()
    synchronizing.add(1, ordering: .sequentiallyConsistent)
    defer { synchronizing.subtract(1, ordering: .sequentiallyConsistent) }
    waitForBackgroundWork()
    for attempt in 0..<3 {
      let work = try exclusively { s throws(SharedDefaultsError) -> Compaction? in
        if attempt == 2 || emptyingJournal || (try? exportState()) == .edited {
          try catchUpExclusively(&s)
          let rewind = emptyingJournal || s.length > compactor.thresholds().rewind
          try compact(&s, durable: true, handOver: true, rewind: rewind)
          return nil
        }
        let generation = header.load(Slot.generation)
        let committed = header.length(Slot.committed)
        return Compaction(
          token: 0, image: nil, frozen: [], generation: generation,
          start: header.snapshotStart(generation: generation, committed: committed), length: committed,
          snapshot: header.recordedSnapshot(), headerInode: header.counters.identity.inode)
      }
      guard let work, !finishCompaction(work, durable: true) else { break }
    }
    try writeExport(durable: true)
  }

  // MARK: Compaction in the background

  /// Changes held over the image past which a set starts a compaction, whatever the journal's size (at least; a
  /// quarter of the image's keys for large suites).
  static let changesBeforeCompaction = 65_536

  /// What a compaction in the background folds, into the state at (generation, length): this process's frozen
  /// changes over its image (`token` non-zero), or else the journal from `start` over the snapshot. Not the whole
  /// `SuiteValues`: holding its `changes` would make the writer's next set copy them.
  struct Compaction: @unchecked Sendable {  // the image and the frozen tiers are immutable
    var token: UInt64
    var image: SuiteImage?
    var frozen: [SuiteValues.Tier]
    var generation: UInt64
    var start: Int
    var length: Int
    var snapshot: Identity
    /// The header's file (a store that moved onto files made again installs nothing it built from the removed ones).
    var headerInode: UInt64
  }

  /// With the lock held: builds the next snapshot on the background queue, without the lock (`finishCompaction`).
  /// When this process holds the committed state (a lone writer), from its changes, frozen — writers go on into a
  /// new table, and the process goes on from the new image; otherwise from the snapshot and the journal past it,
  /// read in the background (catching up here would cost the lock what other processes wrote).
  func startCompaction(_ s: inout State) {
    guard compactor.claimIsFree(), s.values.frozenToken == 0 else { return }
    let generation = header.load(Slot.generation)
    let committed = header.length(Slot.committed)
    let current =
      s.generation == generation && s.length == committed && s.pendingOwn.isEmpty && s.values.damage == nil
      && !headerLost.load(ordering: .relaxed) && journal.intact
    let token = current ? s.values.freeze() ?? 0 : 0
    compactor.claim()
    let work = Compaction(
      token: token, image: s.values.image, frozen: token == 0 ? [] : s.values.frozen, generation: generation,
      start: header.snapshotStart(generation: generation, committed: committed), length: committed,
      snapshot: header.recordedSnapshot(), headerInode: header.counters.identity.inode)
    compactions.enter()
    background.async { [weak self, compactions] in
      defer { compactions.leave() }
      self?.finishCompaction(work)
    }
  }

  /// The recorded snapshot of `work` and the journal's records from `work.start` to `work.length`, as changes
  /// (last one wins), read without the lock: a seqlock read, checked against the generation after.
  struct Superseded: Error {}

  func snapshotAndJournal(_ work: Compaction) throws -> (SuiteImage?, [String: PropertyListValue?]) {
    let image = try loadImage(counted: false)
    // Another compaction came first: nothing to do.
    guard SuiteHeader.identity(image?.status) == work.snapshot else { throw Superseded() }
    let records: [JournalFormat.Record]
    switch journal.readWithoutLock(from: work.start, to: work.length, generation: work.generation) {
    case .records(let read, _): records = read
    case .changed: throw Superseded()
    case .unreadable(let reason):
      throw SharedDefaultsError.system(FileSystemError("read", journal.path + ": " + reason, .ioError))
    }
    var changes: [String: PropertyListValue?] = [:]
    changes.reserveCapacity(records.count)
    for record in records {
      switch record.operation {
      case .set(let value): changes.updateValue(value, forKey: record.key)
      case .remove: changes.updateValue(nil, forKey: record.key)
      }
    }
    return (image, changes)
  }

  /// Builds the image of `work` and writes it beside the snapshot (no lock); then, with the lock, installs it as
  /// the snapshot if nothing replaced the snapshot or emptied the journal meanwhile (else drops it: the state it
  /// holds is in the journal still). Installing is a rename and three header stores: the kill points of a
  /// compaction that keeps the journal (`defaults.snapshot.*`) hold here as in `compact`.
  @discardableResult
  func finishCompaction(_ work: Compaction, durable: Bool = false) -> Bool {
    // A temp name of this process (`AtomicReplace`'s form): swept if it dies before the rename. `synchronize()`'s
    // own: a background compaction of this process may be building meanwhile.
    let kind = durable ? "sync" : "next"
    let next = Self.preferences + "/\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-\(kind)-\(suite).snapshot"
    var built: (bytes: Int, status: FileStatus)?
    var installed = false
    do {
      // The frozen tiers as one table: O(changes), here in the background.
      var (image, changes) = (work.image, SuiteValues.mergedTable(work.frozen))
      if work.token == 0 { (image, changes) = try snapshotAndJournal(work) }
      let written = try writeImageFile(
        next, base: image, changes: changes, generation: work.generation, position: work.length,
        durability: durable ? .powerLoss : .processCrash)
      built = (written.built.length, written.status)
    } catch is Superseded {
      // Another compaction came first: nothing to do.
    } catch {
      Self.logger.warning("suite '\(suite)': compaction failed, the journal keeps growing: \(error)")
    }
    FaultPoint.pause("defaults.compaction.installing")
    do {
      try exclusively { s throws(SharedDefaultsError) in
        defer { compactor.releaseClaim() }
        guard let built, header.counters.identity.inode == work.headerInode,
          header.load(Slot.generation) == work.generation, header.recordedSnapshot() == work.snapshot
        else {
          try? root.removeFile(next)
          s.values.thaw(token: work.token)
          return
        }
        FaultPoint.reach("defaults.snapshot.writing")
        try Self.beneath(snapshotItem, in: containerPath) { () throws(FileSystemError) in
          try root.rename(next, to: "\(suite).snapshot")
          if durable {
            let dir = try root.openDirectory(Self.preferences)
            try dir.sync()
          }
        }
        FaultPoint.reach("defaults.snapshot.written")
        let rewind = compactor.installBuilt(
          built.status, input: built.bytes, generation: work.generation, length: work.length)
        Self.compactionsInstalled.add()
        // This process goes on from the new image when it holds at least what the image does (else it reloads
        // at its next access, as other processes do after a rewind).
        let image = mapSnapshot(written: built.status)
        let holds = !rewind || (s.generation == work.generation && s.length >= work.length)
        if holds, let image, let dropped = s.values.install(image, token: work.token) {
          release(dropped)
          if rewind {
            // The same records, `work.length` bytes earlier, in the new generation.
            s.generation = header.load(Slot.generation)
            s.length -= work.length
            s.pendingOwn = s.pendingOwn.compactMapValues {
              $0.start >= work.length ? ($0.start - work.length, $0.end - work.length) : nil
            }
          }
        } else {
          s.values.thaw(token: work.token)
        }
        if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
        installed = true
      }
    } catch {
      Self.logger.warning("suite '\(suite)': could not install the compacted snapshot: \(error)")
      state.withLock { s in
        s.values.thaw(token: work.token)
        mergeTiersIfNeeded(s)
      }
    }
    return installed
  }

  // MARK: Compaction

  /// Rewrites the snapshot from `s`, and with `rewind` empties the journal. Needs the lock and a current `s`.
  ///
  /// The snapshot is an image: the last image's entries copied as they are and the changes over them encoded,
  /// O(bytes) with no value decoded. The export (`writeExport`) is written after, and without the lock.
  ///
  /// Order (each step a kill point that the others recover from): the snapshot is written — a complete state:
  /// readers that find it unrecorded replay the journal over it, which changes nothing — and then installed
  /// (`SuiteCompactor.installWritten`).
  ///
  /// An export being edited by another tool that cannot be read yet is left alone (its base, the image it was
  /// written from, stays pinned as `<suite>.snapshot.exported`, whatever the snapshot becomes) and looked at again.
  func compact(
    _ s: inout State, durable: Bool, handOver: Bool = false, rewind: Bool = true
  ) throws(SharedDefaultsError) {
    guard s.generation != .max else {
      // Never write a state this process did not load: that would drop the suite.
      throw .system(FileSystemError("compact", directory + "/\(suite).snapshot", .ioError))
    }
    // An export edited by another tool is judged first (one that may be half-written is looked at again later).
    if (try? exportState()) == .edited { _ = try judgeExportAtName(&s, durable: durable) }
    // Only a plain compaction (the state is exactly the committed journal) may let readers skip the snapshot.
    let folded = header.load(Slot.generation)
    // The image of the state: the last image's entries copied as they are, the changes over them encoded,
    // written straight to the snapshot's temp file.
    let (base, changes) = s.values.imageParts
    let durability: AtomicReplace.Durability = durable ? .powerLoss : .processCrash
    if !rewind { FaultPoint.reach("defaults.snapshot.writing") }
    let written = try writeImageFile(
      snapshotItem, base: base, changes: changes,
      generation: rewind ? header.load(Slot.generation) &+ 1 : s.generation, position: rewind ? 0 : s.length,
      durability: durability)
    if rewind {
      FaultPoint.reach("defaults.compact.snapshotWritten")
    } else {
      FaultPoint.reach("defaults.snapshot.written")
    }
    // What the next compaction reads: this image (copied entry by entry) and the journal past it.
    let generation = compactor.installWritten(
      written.status, input: written.built.length, generation: s.generation, length: s.length, rewind: rewind,
      handedOver: handOver && folded == s.generation)
    // This process goes on from the image it wrote (the changes it held are in it).
    if let image = mapSnapshot(written: written.status) { release(s.values.rebase(onto: image)) }
    if rewind {
      s.generation = generation
      s.length = 0
      s.ownWritesUnapplied = false
      s.pendingOwn = [:]
    }
    if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
  }

  /// Refuses a state whose export the next process could not read back (the same limits as reading it), and
  /// records that the suite is over them: sets then fail with `suiteTooLarge` until removals bring it back under.
  /// `objects` and `payload` are the image's counts (its header): property-list objects, and bytes of strings,
  /// data and keys.
  func checkLimits(objects: Int, payload: Int) throws(SharedDefaultsError) -> Int {
    let limits = Self.snapshotLimits
    guard objects <= limits.maxObjects, payload <= limits.maxBytes else {
      header.store(Slot.overLimit, 1)
      throw .suiteTooLarge(
        directory + "/\(suite).snapshot",
        "it holds \(objects) values and \(payload) bytes of strings and data; the limits are \(limits.maxObjects) and \(limits.maxBytes)"
      )
    }
    return payload + 16 * objects
  }

  /// Called after `markIdleCheck()` said so: checks again once writes have stopped for a while.
  func scheduleIdleCompaction() {
    // Weak: a store nobody uses is released without waiting for its idle compaction (the journal keeps its writes).
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.idleCompaction))) { [weak self] in
      guard let self else { return }
      let idle = state.withLock { s -> Bool in
        s.idleCheckScheduled = false
        return MonotonicClock.nanoseconds() - s.lastWrite >= Self.idleCompaction
      }
      // A synchronize under way compacts and exports: look again later (nothing is left to do then, usually).
      guard idle, synchronizing.load(ordering: .sequentiallyConsistent) == 0 else {
        if state.withLock({ $0.markIdleCheck() }) { scheduleIdleCompaction() }
        return
      }
      // (A compaction started in the background ran before this: both are on the serial `background` queue.
      // Waiting for `compactions` here would wait for work queued behind this closure.)
      let committed = header.length(Slot.committed)
      do {
        if committed > header.snapshotStart(generation: header.load(Slot.generation), committed: committed) {
          try exclusively { s throws(SharedDefaultsError) in
            try catchUpExclusively(&s)
            guard s.length > header.snapshotStart(generation: s.generation, committed: s.length) else { return }
            let rewind = s.length > compactor.thresholds().rewind
            try compact(&s, durable: false, handOver: true, rewind: rewind)
          }
        }
        // The export follows the snapshot once writes stop (compactions while they go on leave it behind).
        if exportIsBehind() { try writeExport(durable: false) }
      } catch {
        Self.logger.warning("suite '\(suite)': idle compaction failed: \(error)")
      }
    }
  }
}
