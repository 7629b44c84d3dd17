import SystemLayer

/// The header of a suite: `<suite>.lock`, a 4 KiB file every process maps shared (`MappedCounters`). Its words are
/// declared here once (`Slot`, listed in `layout`), with what each means; the rules that order their stores are where they are stored
/// (`SuiteCompactor`, `SuiteJournal.moveTail`, `DefaultsStore.append`). Identities of files (inode, size, modification time) are recorded here so that
/// every process can tell whether the snapshot or the export at a name is the one the suite wrote.
struct SuiteHeader: @unchecked Sendable {  // the memory is atomics (MappedCounters)
  let counters: MappedCounters

  /// The words of the header, by index.
  enum Slot {
    static let magic = 0, generation = 1, committed = 2, snapshotInode = 3, snapshotSize = 4, snapshotTime = 5
    /// Set by a plain compaction: the generation and committed length it folded into the snapshot. A reader
    /// that had applied exactly that much already holds the snapshot's contents and need not read it.
    static let foldedGeneration = 6, foldedLength = 7
    /// The lock word (SharedMemoryLock); bytes of the journal file allocated so far; the change signal.
    static let lock = 8, journalCapacity = 9, changeSequence = 10, listeners = 11
    /// The export's identity (`<suite>.plist`, 0 when none was written with the current snapshot).
    static let exportInode = 12, exportSize = 13, exportTime = 14
    /// Non-zero while the suite is over `snapshotLimits` (a compaction refused to write it): sets fail, removes work.
    static let overLimit = 15
    /// The inode of the journal every process must map (a removed journal is noticed and followed).
    static let journalInode = 16
    /// What the last compaction read to write the snapshot (`checkLimits`' estimate, in bytes): the compaction
    /// threshold follows it, not the snapshot's size, which dedup makes small for many identical values.
    static let compactionInput = 17
    /// Where the snapshot stands in the journal, for a compaction that kept the journal: the generation's low 32
    /// bits and the journal length the snapshot holds, in one word (one store, one load). Whoever loads the snapshot
    /// replays the journal from there; a word of another generation means from 0.
    static let snapshotAt = 18
    /// The generation the export was written in: replaying that generation's journal over the export gives the
    /// state (`recoverState`, when the snapshot is lost).
    static let exportGeneration = 19
    /// The process compacting in the background (its pid; 0: none) and since when (`MonotonicClock`): the others
    /// leave the compaction to it, for `SuiteCompactor.claimDuration` at most (a stopped or dead compactor is then replaced).
    static let compactor = 20, compactorSince = 21
    /// Listeners asleep on the change signal: a commit makes the wake-up system call only when one is.
    static let sleepers = 22
    /// A rewind in the background (`moveTail`): the journal range it moves to the start, and the generation it
    /// empties. `rewindTo` is non-zero while the bytes move: lock-free readers do not trust the journal then, and
    /// the next lock holder finishes a move whose process died during it.
    static let rewindFrom = 23, rewindTo = 24, rewindGeneration = 25
    /// The identity of the last tool's file at the export's name that was judged (`judgeExportAtName`): applied or
    /// kept aside once, never again.
    static let judgedInode = 26, judgedSize = 27, judgedTime = 28
    /// Outside edits applied so far (`judgeEdit`), and how many of them the recorded export holds (the count when
    /// its snapshot was pinned): an export pinned before an edit was applied is never published as current — an
    /// exporter that pinned earlier starts again, and an export that lacks one is `stale`, rewritten at the next
    /// check (a loaded machine saw a tool's applied edit missing from the export for minutes: another process
    /// published an export pinned just before it, and the export counted as current).
    static let editsApplied = 29, editsExported = 30
    /// Where the journal of the current generation came from, when a rewind moved a tail (`SuiteJournal.moveTail`):
    /// the generation's low 32 bits and the offset in the emptied generation where the moved bytes began, in one
    /// word. A process current in the emptied generation past that offset holds the same state as the new snapshot
    /// and the journal up to its length less the offset: it goes on without reading anything
    /// (`SuiteJournal.movedFrom`). Every other way to a new generation sets it to 0.
    static let movedAt = 31
    /// A judgement of a tool's file (`judgeEdit`) under way, or cut short by its process's death: what was decided
    /// (`Judging`), for which file (inode, size, modification time), and — for an apply — where its commit goes (the
    /// generation's low 32 bits and the committed length, in one word). The next lock holder settles an apply whose
    /// process died (`settleJudging`): committed if the journal moved past that point, else to apply again. So an
    /// edit whose judgement a kill interrupted is judged again the same way — never lost (it was recorded as
    /// judged), never applied twice, never kept aside because of the pairs its own apply had learned.
    static let judgingDecision = 32, judgingInode = 33, judgingSize = 34, judgingTime = 35, judgingAt = 36
    /// The checksum of the last record committed, with bit 32 set (0: not known — a build before this word, or
    /// nothing committed yet), stored by `DefaultsStore.append` just before the commit point. A journal at the name
    /// that is not the recorded inode but whose committed bytes are intact records ending with this one is the same
    /// journal copied (`cp -a`, a backup restored): it is kept (`SuiteJournal.follow`).
    static let lastRecord = 37
    /// Non-zero: this header's file was removed and a process moved onto the files at the names; whoever takes
    /// its lock moves too instead of appending (DefaultsStore+RemovedFiles.swift).
    static let filesRemoved = 38
    /// The inode of the removed header whose final state was carried into this suite (once).
    static let carriedFrom = 39
    // Free: 40–510 (511 is the file's epoch, `MappedCounters`). A new word goes after the last one; a word is never
    // moved or reused (processes of an older build may map the same header).
  }

  /// Every word of `Slot`, by name: a test checks that no two share a word and that all fit in the file.
  static let layout = MappedLayout(
    file: "Library/Preferences/<suite>.lock",
    ([
      ("magic", Slot.magic), ("generation", Slot.generation), ("committed", Slot.committed),
      ("snapshotInode", Slot.snapshotInode), ("snapshotSize", Slot.snapshotSize), ("snapshotTime", Slot.snapshotTime),
      ("foldedGeneration", Slot.foldedGeneration), ("foldedLength", Slot.foldedLength), ("lock", Slot.lock),
      ("journalCapacity", Slot.journalCapacity), ("changeSequence", Slot.changeSequence), ("listeners", Slot.listeners),
      ("exportInode", Slot.exportInode), ("exportSize", Slot.exportSize), ("exportTime", Slot.exportTime),
      ("overLimit", Slot.overLimit), ("journalInode", Slot.journalInode), ("compactionInput", Slot.compactionInput),
      ("snapshotAt", Slot.snapshotAt), ("exportGeneration", Slot.exportGeneration), ("compactor", Slot.compactor),
      ("compactorSince", Slot.compactorSince), ("sleepers", Slot.sleepers), ("rewindFrom", Slot.rewindFrom),
      ("rewindTo", Slot.rewindTo), ("rewindGeneration", Slot.rewindGeneration), ("judgedInode", Slot.judgedInode),
      ("judgedSize", Slot.judgedSize), ("judgedTime", Slot.judgedTime), ("editsApplied", Slot.editsApplied),
      ("editsExported", Slot.editsExported), ("movedAt", Slot.movedAt), ("judgingDecision", Slot.judgingDecision),
      ("judgingInode", Slot.judgingInode), ("judgingSize", Slot.judgingSize), ("judgingTime", Slot.judgingTime),
      ("judgingAt", Slot.judgingAt), ("lastRecord", Slot.lastRecord), ("filesRemoved", Slot.filesRemoved),
      ("carriedFrom", Slot.carriedFrom),
    ] as [(String, Int)]).map { ($0.0, MappedLayout.word($0.1)) })

  /// What a judgement of a tool's file decided (`Slot.judgingDecision`).
  enum Judging: UInt64 {
    /// Nothing pending.
    case none = 0
    /// Applying: the history may have learned its pairs; its commit may or may not have happened.
    case applying = 1
    /// Keeping it aside (under `<suite>.plist.unapplied-…`).
    case keepingAside = 2
    /// Judging: nothing learned, nothing decided.
    case judging = 3
    /// An apply cut short before its commit: to apply as decided, its pairs being in the history already.
    case applyAgain = 4
  }

  static let magic: UInt64 = 0x3454_4c46_4544_4347  // "GCDEFLT4"
  /// 0.1.0's header: the plist was the snapshot. Migrated in place (`initializeHeaderLocked`).
  static let legacyMagic: UInt64 = 0x3254_4c46_4544_4347  // "GCDEFLT2"

  // MARK: Words

  func load(_ slot: Int) -> UInt64 { counters.load(slot) }
  /// A length or offset word (committed, capacity, sizes, rewind range) as an `Int` to compute with. The header is a
  /// file anyone who can write the container can write: a word above `maxLength` (256 TiB), which no process of the
  /// suite stores, reads as `maxLength` — a length every check against the journal or a snapshot refuses, far from
  /// overflowing any sum or product of lengths — instead of trapping in `Int(_:)` (a planted 0xFFFF… crashed every
  /// process that opened the suite).
  func length(_ slot: Int) -> Int { Int(min(load(slot), Self.maxLength)) }
  static let maxLength: UInt64 = 1 << 48
  /// The second load of a seqlock read (see `MappedCounters.loadAfterFence`).
  func loadAfterFence(_ slot: Int) -> UInt64 { counters.loadAfterFence(slot) }
  func store(_ slot: Int, _ value: UInt64) { counters.store(slot, value) }
  @discardableResult func increment(_ slot: Int) -> UInt64 { counters.increment(slot) }
  func sync() throws(FileSystemError) { try counters.sync() }
  var faultCount: UInt32 { counters.faultCount }
  var path: String { counters.path }
  func restore() throws(FileSystemError) { try counters.restore() }

  // MARK: Identities and positions

  /// A file's identity as the header records it: inode, size, modification time.
  typealias Identity = (inode: UInt64, size: Int64, time: Int64)

  /// A file's identity (0s for none), to compare with one the header recorded.
  static func identity(_ st: FileStatus?) -> Identity {
    (st?.inode ?? 0, st?.size ?? 0, st?.modificationNanoseconds ?? 0)
  }

  func recordSnapshot(_ st: FileStatus?) {
    store(Slot.snapshotInode, st?.inode ?? 0)
    store(Slot.snapshotSize, UInt64(st?.size ?? 0))
    store(Slot.snapshotTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
  }

  /// The snapshot's identity as the header records it.
  func recordedSnapshot() -> Identity {
    (load(Slot.snapshotInode), Int64(length(Slot.snapshotSize)), Int64(bitPattern: load(Slot.snapshotTime)))
  }

  func recordExport(_ st: FileStatus?) {
    store(Slot.exportSize, UInt64(st?.size ?? 0))
    store(Slot.exportTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
    store(Slot.exportInode, st?.inode ?? 0)
  }

  /// The recorded export's identity (nil when none or stale).
  func recordedExport() -> Identity? {
    let inode = load(Slot.exportInode)
    guard inode != 0 && inode != .max else { return nil }
    return (inode, Int64(length(Slot.exportSize)), Int64(bitPattern: load(Slot.exportTime)))
  }

  func recordJudged(_ st: FileStatus?) {
    store(Slot.judgedSize, UInt64(st?.size ?? 0))
    store(Slot.judgedTime, UInt64(bitPattern: st?.modificationNanoseconds ?? 0))
    store(Slot.judgedInode, st?.inode ?? 0)
  }

  /// The identity of the last tool's file that was judged.
  func judged() -> Identity {
    (load(Slot.judgedInode), Int64(length(Slot.judgedSize)), Int64(bitPattern: load(Slot.judgedTime)))
  }

  /// What is pending for the file `st` (`Slot.judgingDecision`): `.none` when nothing, or for another file.
  func judging(_ st: FileStatus) -> Judging {
    let decision = Judging(rawValue: load(Slot.judgingDecision)) ?? .none
    guard decision != .none, load(Slot.judgingInode) == st.inode, load(Slot.judgingSize) == UInt64(st.size),
      load(Slot.judgingTime) == UInt64(bitPattern: st.modificationNanoseconds)
    else { return .none }
    return decision
  }

  /// With the lock: a judgement of `st` starts (decision first, so a kill at any point leaves it pending or none).
  func beginJudging(_ st: FileStatus) {
    store(Slot.judgingDecision, Judging.judging.rawValue)
    store(Slot.judgingSize, UInt64(st.size))
    store(Slot.judgingTime, UInt64(bitPattern: st.modificationNanoseconds))
    store(Slot.judgingInode, st.inode)
  }

  /// With the lock: the judgement in progress decided `decision` (an apply: its commit goes at the journal's end).
  func decideJudging(_ decision: Judging) {
    store(Slot.judgingAt, journalPosition())
    store(Slot.judgingDecision, decision.rawValue)
  }

  /// With the lock, when taking it or after a failed apply: an apply left pending by its process (dead, or failed)
  /// was committed if the journal moved since it decided (nobody else could append before this lock holder), else
  /// it is to be applied again.
  func settleJudging() {
    guard load(Slot.judgingDecision) == Judging.applying.rawValue else { return }
    let committed = load(Slot.judgingAt) != journalPosition()
    store(Slot.judgingDecision, committed ? Judging.none.rawValue : Judging.applyAgain.rawValue)
  }

  private func journalPosition() -> UInt64 {
    (load(Slot.generation) & 0xFFFF_FFFF) << 32 | (load(Slot.committed) & 0xFFFF_FFFF)
  }

  /// The journal offset from which records are not in the snapshot, in `generation` (0 unless a compaction of
  /// this generation kept the journal).
  func snapshotStart(generation: UInt64, committed: Int) -> Int {
    let word = load(Slot.snapshotAt)
    guard word >> 32 == generation & 0xFFFF_FFFF else { return 0 }
    let length = Int(word & 0xFFFF_FFFF)
    return length <= committed ? length : 0
  }
}
