import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// Another tool's edits of the export, judged once by ExportMirror's rule: applied as the tool's change when certain,
/// else kept aside and reported. Covers the file at the export's name, writes into an export that was replaced while
/// the tool had it open (kept under a second name, `<suite>.plist.replaced-…`), and the history of what the name
/// showed (`<suite>.plist.history`).
extension DefaultsStore {
  /// A tool's file at the export's name, or written into a replaced export, that no process judged yet is judged
  /// before this process's first read when the suite's lock is free: a process started after a tool's edit reads it
  /// (running ones hear of it through inotify). With the lock held elsewhere it is judged in the background.
  func judgePendingEdit() {
    guard !readOnly else { return }
    let kept = hasKeptExports()
    guard kept || (try? exportState()) == .edited else { return }
    do {
      // Never waits for another process (a reader must not): with the lock taken, the background check judges it.
      let judged: Void? = try writerGate.withLock { _ throws(SharedDefaultsError) -> Void? in
        try withLockIfFree { () throws(SharedDefaultsError) -> Void in
          try state.withLock { s throws(SharedDefaultsError) -> Void in
            try catchUpExclusively(&s)
            if kept, let dir = try? root.openDirectory(Self.preferences) {
              try applyKeptExports(in: dir, &s)
            }
            if (try? exportState()) == .edited { _ = try judgeExportAtName(&s, durable: false) }
          }
        }
      }
      // Judged here or not, the export is looked at: a judged tool's file at the name is rewritten.
      _ = judged
      scheduleExportCheck()
    } catch {
      Self.logger.error("suite '\(suite)': could not apply the outside change: \(error)")
    }
  }

  /// What became of a tool's file at the export's name (`judgeExportAtName`).
  enum Judged { case none, applied, keptAside, later }

  /// With the lock and `s` current: a tool's file at the export's name is judged once (ExportMirror's rule) —
  /// its change committed, or the file kept aside — and its identity recorded as judged, so that neither this
  /// process nor another judges it again (`exportState` calls it `stale`: rewritten, never applied twice). A file
  /// that does not parse but may be one being written (`ExportMirror.mayBeUnfinished`) is left `later`
  /// (`durable`: not waited for — a later write lands in the file the export replaces, `publishExport`); any other
  /// is moved aside as corrupt.
  func judgeExportAtName(_ s: inout State, durable: Bool) throws(SharedDefaultsError) -> Judged {
    let read: (bytes: [UInt8], status: FileStatus)
    let fd: SystemFD
    do {
      fd = try root.openFile(plistItem, .readOnly)
    } catch {
      if error.errno == .noSuchFileOrDirectory { return .none }
      if error.errno == .improperLink { throw .container(.pathEscapesContainer(plistItem, container: containerPath)) }
      Self.logger.error(
        "suite '\(suite)': '\(plistPath)' written by another tool cannot be read (\(error)); moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    do { read = try fd.readRegularFile(limit: Self.snapshotLimits.maxBytes) } catch {
      Self.logger.error(
        "suite '\(suite)': '\(plistPath)' written by another tool cannot be read (\(error)); moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    guard let edited = Self.parseEdit(read.bytes) else {
      if ExportMirror.mayBeUnfinished(read.bytes, fd, modified: read.status.modificationNanoseconds) {
        if !durable { scheduleExportCheck(after: Self.exportRetryDelay) }
        return .later
      }
      Self.logger.error("suite '\(suite)': '\(plistPath)' written by another tool is not a property list; moved aside")
      quarantine("\(suite).plist")
      return .none
    }
    // Recorded first: judging compacts, which looks at the name again. Forgotten if judging fails (retried). The
    // judgement itself is recorded before (`beginJudging`): a kill in between leaves the file pending, not judged.
    if header.judging(read.status) == .none { header.beginJudging(read.status) }
    header.recordJudged(read.status)
    do {
      return try judgeEdit(edited, bytes: read.bytes, status: read.status, base: try? loadImage(exportedItem), &s)
    } catch {
      header.recordJudged(nil)
      throw error
    }
  }

  /// With the lock and `s` current: applies `edited` (a tool's version of the export, `bytes` as read) as what it
  /// changed against `base` (the image of the export it replaced or was written into) when ExportMirror's rule
  /// says that is certain; else keeps it aside as `<suite>.plist.unapplied-…` and reports it (error log, `groupctl
  /// defaults read`, `groupctl doctor`). Either way the history learns the pairs it showed.
  ///
  /// Idempotent across kills (`SuiteHeader.Slot.judgingDecision`, for the file `status`): the decision is recorded
  /// before the history learns anything, and an apply's commit point with it; a judgement cut short is carried out
  /// again as decided — an apply whose commit did not happen is applied (the history's own pairs, learned by it, do
  /// not keep it aside), one whose commit did is not applied twice (a value written since stays).
  func judgeEdit(
    _ edited: [String: PropertyListValue], bytes: [UInt8], status: FileStatus, base: SuiteImage?, _ s: inout State
  ) throws(SharedDefaultsError) -> Judged {
    let baseValues = base.flatMap { try? SuiteValues(image: $0).dictionary() } ?? [:]
    var history = try loadHistory()
    let pending = header.judging(status)
    let (judgement, learned): (ExportMirror.Judgement, [UInt128])
    switch pending {
    case .applyAgain: (judgement, learned) = (.apply(ExportMirror.changes(edited, base: baseValues)), [])
    case .keepingAside:
      (judgement, learned) = (.keepAside(Array(ExportMirror.changes(edited, base: baseValues).keys)), [])
    case .none, .judging, .applying:
      if pending == .none { header.beginJudging(status) }
      (judgement, learned) = ExportMirror.judge(edited, base: baseValues, history: history)
    }
    if case .apply = judgement { header.decideJudging(.applying) } else { header.decideJudging(.keepingAside) }
    history.insert(learned)
    do throws(SharedDefaultsError) {
      try saveHistory(history)  // first: a kill after it leaves pairs learned, never an edit judged without them
    } catch {
      header.settleJudging()  // nothing committed: applied again at the next judgement of this file
      throw error
    }
    FaultPoint.reach("defaults.edit.learned")
    switch judgement {
    case .keepAside(let keys):
      let name = ExportMirror.unappliedName(suite, of: status)
      _ = try Self.beneath(Self.preferences + "/" + name, in: containerPath) { () throws(FileSystemError) in
        try root.replaceFile(Self.preferences + "/" + name, with: bytes, mode: fileMode)
      }
      FaultPoint.reach("defaults.edit.keptAside")
      header.decideJudging(.none)
      Self.logger.error(
        "suite '\(suite)': an edit of '\(plistPath)' by another tool was not applied: \(keys.sorted().prefix(5).joined(separator: ", ")) hold values the export showed before (the tool may have read an older export); kept as '\(directory)/\(name)'"
      )
      return .keptAside
    case .apply(let changes):
      // What already holds the tool's value needs no record (and observers no event).
      let records = changes.keys.sorted().compactMap { key -> JournalFormat.Record? in
        let value = changes[key]!
        guard s.values[key] != value else { return nil }
        return JournalFormat.Record(key: key, operation: value.map { .set($0) } ?? .remove, pid: 0)
      }
      guard !records.isEmpty else {
        // Every change it makes is held already (e.g. the export of a copied container: a new inode, the same values).
        header.decideJudging(.none)
        return .applied
      }
      Self.logger.info("suite '\(suite)': applying \(records.count) change(s) made to '\(plistPath)' by another tool")
      var encoded: [UInt8] = []
      do throws(SharedDefaultsError) {
        for record in records { try JournalFormat.encode(record, into: &encoded) }
        try append(encoded, records, &s, mayCompact: false)
      } catch {
        header.settleJudging()  // committed or not, as the journal says
        throw error
      }
      FaultPoint.reach("defaults.edit.committed")
      header.decideJudging(.none)
      try catchUpOrThrow(&s)
      // Into the snapshot at once: exports are made from it, and the next one must show the change.
      try compact(&s, durable: false, handOver: true, rewind: s.length > compactor.thresholds().rewind)
      header.increment(Slot.editsApplied)  // the export lacks it until one pinned from now on is published
      scheduleExportCheck(tracked: true)
      return .applied
    }
  }

  /// The history of what the export's name showed (`ExportMirror`); empty when there is none. A history that fails to read for a passing reason (an I/O error, no memory or descriptors) throws: taken as
  /// empty and saved, it would forget every pair — and a stale copy could then roll a committed value back (found
  /// by the I/O-error loops). One that is not there, or not a history (another kind of file, too large), is empty.
  func loadHistory() throws(SharedDefaultsError) -> ExportHistory {
    do {
      return ExportHistory(
        bytes: try root.readFile(Self.preferences + "/" + ExportMirror.historyName(suite), limit: 1 << 24).bytes)
    } catch {
      guard error.isPassing else { return ExportHistory(bytes: nil) }
      throw .system(error)
    }
  }

  func saveHistory(_ history: ExportHistory) throws(SharedDefaultsError) {
    guard history.changed else { return }
    let item = Self.preferences + "/" + ExportMirror.historyName(suite)
    _ = try Self.beneath(item, in: containerPath) { () throws(FileSystemError) in
      try root.replaceFile(item, with: history.bytes, mode: fileMode)
    }
  }

  /// The names of this suite's outside edits that were kept aside, not applied (`ExportMirror`).
  func unappliedEdits() -> [String] {
    guard let dir = try? root.openDirectory(Self.preferences) else { return [] }
    return ExportMirror.unapplied(suite, in: dir).map { directory + "/" + $0 }
  }

  /// The dictionary in a tool's version of the export (nil when it does not parse, or is not a dictionary).
  static func parseEdit(_ bytes: [UInt8]) -> [String: PropertyListValue]? {
    guard case .dictionary(let edited)? = try? PropertyListValue(bytes: bytes, limits: Self.snapshotLimits) else {
      return nil
    }
    return edited
  }

  /// The second name of a file about to be replaced by an export, accounted for as `identity`:
  /// `<suite>.plist.replaced-<inode>-<size>-<modified ns>-<now, s>`. A file there that no longer has that identity
  /// was written by a tool.
  func keptExportName(_ identity: Identity) -> String {
    "\(suite).plist.replaced-\(identity.inode)-\(identity.size)-\(identity.time)-\(RealtimeClock.seconds())"
  }

  /// Whether a replaced export is kept under a second name (`keptExportName`), waiting for `applyKeptExports`.
  func hasKeptExports() -> Bool {
    let prefix = "\(suite).plist.replaced-"
    guard let dir = try? root.openDirectory(Self.preferences) else { return false }
    return ((try? dir.entries()) ?? []).contains { $0.name.hasPrefix(prefix) }
  }

  /// The name of the image a kept export was made from (pinned beside it).
  static func keptBase(_ keptName: String) -> String {
    keptName.replacingOccurrences(of: ".plist.replaced-", with: ".snapshot.replaced-")
  }

  /// Removes a kept export and its base.
  static func dropKept(_ keptName: String, in dir: borrowing SystemFD) {
    try? dir.removeFile(keptName)
    try? dir.removeFile(keptBase(keptName))
  }

  /// How long an untouched replaced export keeps its second name at least: a tool that opened the export before
  /// it was replaced writes into it (plistlib's read-modify-write takes milliseconds; a loaded machine, seconds).
  /// It is kept longer while any process still has it open (`SystemFD.isOpenElsewhere`).
  static let keptExportGrace: Int64 = 2_000_000_000  // nanoseconds

  /// Where it cannot be told whether a file is open elsewhere (leases refused): how long it is kept instead.
  static let keptExportLimit: Int64 = 120_000_000_000  // nanoseconds

  /// With the lock: applies the tools' writes into replaced exports kept by any process
  /// (`keptExportName`) — the replacing one may have died or exited before it could — and removes those done
  /// with: judged (applied or kept aside), untouched past `keptExportGrace` and open nowhere, or written but not
  /// a property list and no longer being written (moved aside, logged). Returns whether some are left for later.
  @discardableResult
  func applyKeptExports(in dir: borrowing SystemFD, _ s: inout State) throws(SharedDefaultsError) -> Bool {
    let prefix = "\(suite).plist.replaced-"
    let now = RealtimeClock.nanoseconds()
    var left = false
    for (name, _) in (try? dir.entries()) ?? [] where name.hasPrefix(prefix) {
      let fields = name.dropFirst(prefix.count).split(separator: "-").compactMap { Int64($0) }
      guard fields.count == 4, let fd = try? dir.open(name, .readOnly) else {
        Self.dropKept(name, in: dir)
        continue
      }
      guard let st = try? fd.status(), st.kind == .regular else {
        Self.dropKept(name, in: dir)
        continue
      }
      if SuiteHeader.identity(st) == (UInt64(fields[0]), fields[1], fields[2]) {
        // Untouched: dropped once no tool can write into it any more (nobody else has it open).
        // The name holds whole seconds (any number: the name may be anybody's).
        let age = now - min(fields[3], now / 1_000_000_000) * 1_000_000_000
        let openElsewhere = fd.isOpenElsewhere() ?? (age < Self.keptExportLimit)
        if age > Self.keptExportGrace, !openElsewhere {
          Self.dropKept(name, in: dir)
        } else {
          left = true
        }
        continue
      }
      if let (edited, bytes, status) = Self.readEdit(fd) {
        try catchUpExclusively(&s)  // only now: a kept export left untouched costs the lock no catching up
        try commitReplacedEdit(edited, bytes: bytes, status: status, &s, keptAs: name)
        Self.dropKept(name, in: dir)
      } else if !ExportMirror.mayBeUnfinished([], fd, modified: st.modificationNanoseconds) {
        Self.logger.error(
          "suite '\(suite)': '\(directory)/\(name)', an export another tool wrote while it was replaced, is not a property list; moved aside"
        )
        quarantine(name)
        try? dir.removeFile(Self.keptBase(name))
      } else {
        left = true
      }
    }
    // Bases whose export is gone (a process died between the two removals).
    let kept = Set(((try? dir.entries()) ?? []).map(\.name))
    for name in kept where name.hasPrefix("\(suite).snapshot.replaced-") {
      if !kept.contains(name.replacingOccurrences(of: ".snapshot.replaced-", with: ".plist.replaced-")) {
        try? dir.removeFile(name)
      }
    }
    return left
  }

  /// Judges the edit a tool wrote into an export that was replaced, against the image that export was made from
  /// (pinned beside its second name; else the last export's — then any value it shows that changed since keeps
  /// it aside). An applied one is compacted into the snapshot, and the export, which lacks it, rewritten soon.
  func commitReplacedEdit(
    _ edited: [String: PropertyListValue], bytes: [UInt8], status: FileStatus, _ s: inout State,
    keptAs keptName: String?
  ) throws(SharedDefaultsError) {
    let base =
      keptName.flatMap { try? loadImage(Self.preferences + "/" + Self.keptBase($0)) } ?? (try? loadImage(exportedItem))
    guard try judgeEdit(edited, bytes: bytes, status: status, base: base, &s) == .applied else { return }
    scheduleExportCheck()
  }

  /// The dictionary in a tool's version of the export, open as `fd`, its bytes and the file's status (nil when it
  /// does not parse yet).
  static func readEdit(_ fd: borrowing SystemFD) -> ([String: PropertyListValue], [UInt8], FileStatus)? {
    guard let st = try? fd.status(), st.kind == .regular,
      let read = try? fd.read(at: 0, count: Int(min(st.size, Int64(Self.snapshotLimits.maxBytes)))),
      let edited = parseEdit(read)
    else { return nil }
    return (edited, read, st)
  }

  /// How many times a replaced export is read again (`exportRetryDelay` apart) before it is left to its second
  /// name (`applyKeptExports`, in any process).
  static let replacedEditTries = 8

  /// Reads `replaced` (an export a tool was writing when a compaction replaced it) every `exportRetryDelay`
  /// until it parses, then judges it; closes it. After `tries` it is left under its second name, and logged.
  /// Entered in `replacedEdits` by the caller; leaves it when done.
  func applyReplacedEditLater(_ replaced: DescriptorBox, keptAs keptName: String?, tries: Int) {
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.exportRetryDelay))) { [weak self, replacedEdits] in
      guard let self else {
        return replacedEdits.leave()
      }
      guard let (edited, bytes, status) = Self.readEdit(replaced.fd) else {
        if tries > 1 { return applyReplacedEditLater(replaced, keptAs: keptName, tries: tries - 1) }
        defer { replacedEdits.leave() }
        // Still kept under its second name: the next export, here or in any process, tries again.
        Self.logger.warning(
          "suite '\(suite)': '\(plistPath)' was written by another tool while it was replaced, and does not read yet")
        if keptName != nil { scheduleExportCheck(after: Self.keptExportGrace) }
        return
      }
      defer { replacedEdits.leave() }
      do {
        try exclusively { s throws(SharedDefaultsError) in
          // Judged once: by whoever still finds its second name (another process may have judged it from there).
          if let keptName, (try? root.status(Self.preferences + "/" + keptName)) ?? nil == nil { return }
          try catchUpExclusively(&s)
          try commitReplacedEdit(edited, bytes: bytes, status: status, &s, keptAs: keptName)
          if let keptName {
            try? root.removeFile(Self.preferences + "/" + keptName)
            try? root.removeFile(Self.preferences + "/" + Self.keptBase(keptName))
          }
        }
      } catch {
        Self.logger.error("suite '\(suite)': could not apply the edit of '\(plistPath)' by another tool: \(error)")
      }
    }
  }
}
