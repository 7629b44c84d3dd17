import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// The export (`<suite>.plist`, a binary plist other tools read): written from a pinned snapshot without the lock and
/// published with it, unless a tool's edit came first (judged, then the export made again). Its base stays linked as
/// `<suite>.snapshot.exported`: the image an edit is compared with (ExportMirror.swift).
extension DefaultsStore {
  enum ExportState { case current, edited, stale }

  /// Whether `<suite>.plist` is what the last compaction exported (`current`), was changed by another tool since
  /// (`edited`), or was not rewritten with the current snapshot (`stale`: a compaction died, or the disk was full).
  func exportState() throws(Repair) -> ExportState {
    let recorded = header.load(Slot.exportInode)
    if recorded == .max { return .stale }
    let st: FileStatus?
    do {
      st = try Self.beneath(plistItem, in: containerPath) { () throws(FileSystemError) in try root.status(plistItem) }
    } catch {
      throw .unreachable(error)
    }
    guard let st else { return recorded == 0 ? .current : .edited }
    let same =
      recorded == st.inode && header.load(Slot.exportSize) == UInt64(st.size)
      && header.load(Slot.exportTime) == UInt64(bitPattern: st.modificationNanoseconds)
    if same { return header.load(Slot.editsExported) == header.load(Slot.editsApplied) ? .current : .stale }
    // A tool's file already judged (applied or kept aside): rewritten, never judged again — unless its judgement
    // was cut short (`SuiteHeader.Slot.judgingDecision`): then judged again, the same way.
    let judged =
      header.load(Slot.judgedInode) == st.inode && header.load(Slot.judgedSize) == UInt64(st.size)
      && header.load(Slot.judgedTime) == UInt64(bitPattern: st.modificationNanoseconds)
    return judged && header.judging(st) == .none ? .stale : .edited
  }

  /// Writes the export (`<suite>.plist`, a binary plist of the snapshot's state, for other tools). The costly
  /// part — decoding every value and encoding the plist — runs without the lock: the lock is held only to pin the
  /// snapshot the export is made from (a hard link: compactions meanwhile cannot take it away) and to publish the
  /// export, if no tool edited it meanwhile (else that edit is applied first and the export made again). The
  /// pinned image becomes `<suite>.snapshot.exported`, the base an edit of this export is diffed against.
  /// `durable`: survives power loss (`synchronize()`).
  func writeExport(durable: Bool) throws(SharedDefaultsError) {
    // One at a time in this process (they share their temp names); taken before any other lock.
    try exportGate.withLock { _ throws(SharedDefaultsError) in
      guard exportIsBehind() else { return }  // another one just wrote it
      try writeExportAlone(durable: durable)
    }
  }

  func writeExportAlone(durable: Bool) throws(SharedDefaultsError) {
    // One descriptor of the suite's directory for the whole export: resolved once beneath the container (a swap of
    // a directory on the way for a symlink fails here, cleanly), every name after it relative to it.
    let dir = try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
      try root.openDirectory(Self.preferences)
    }
    let pinned = "\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-export-\(suite).snapshot"
    let temp = "\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-export-\(suite).plist"
    defer {
      try? dir.removeFile(pinned)
      try? dir.removeFile(temp)
    }
    for _ in 0..<3 {
      // 1. Pin the snapshot, after judging a tool's file at the name (an applied one is compacted into the
      // snapshot: the export shows it); with the image of the export it replaces, whose pairs it stops showing.
      let start = try exclusively { s throws(SharedDefaultsError) -> (SuiteImage, SuiteImage?, UInt64, UInt64)? in
        try catchUpExclusively(&s)
        try applyKeptExports(in: dir, &s)
        if (try? exportState()) == .edited, try judgeExportAtName(&s, durable: durable) == .later, !durable {
          return nil  // being written by the tool: looked at again later
        }
        do throws(FileSystemError) {
          try dir.removeFile(pinned)
          try dir.link("\(suite).snapshot", to: pinned)
        } catch {
          if error.errno == .noSuchFileOrDirectory { return nil }  // no snapshot yet: nothing to export
          throw .system(error)
        }
        guard let fd = try? dir.open(pinned, .readOnly), let image = try? SuiteImage(mapping: fd) else {
          return nil  // damaged: repaired at the next catch-up, exported after
        }
        let previous: SuiteImage? =
          if let fd = try? dir.open("\(suite).snapshot.exported", .readOnly) { try? SuiteImage(mapping: fd) } else {
            nil
          }
        return (image, previous, header.load(Slot.generation), header.load(Slot.editsApplied))
      }
      guard let (image, previous, generation, edits) = start else { return }
      FaultPoint.pause("defaults.export.pinned")  // tests: another process applies a tool's edit here
      // 2. Without the lock: the plist, in a temp file (durable: synced); the pairs the name stops showing.
      let written = try writeExportFile(of: image, as: temp, in: dir, durable: durable)
      let superseded = previous.flatMap { ExportMirror.superseded(from: $0, to: image) }
      if previous != nil, superseded == nil {
        Self.logger.warning(
          "suite '\(suite)': the image of the last export does not read; its values are not remembered")
      }
      // 3. Publish it — unless another process exported meanwhile (the pairs are not of the export at the name), or
      // an outside edit was applied since the pin, or a tool's file there, judged now, changes the state (this
      // export lacks them): then start again.
      let published = try exclusively { s throws(SharedDefaultsError) -> Bool in
        guard (try? dir.status(of: "\(suite).snapshot.exported"))??.inode == previous?.status?.inode,
          header.load(Slot.editsApplied) == edits
        else { return false }
        var unfinished = false
        if (try? exportState()) == .edited {
          try catchUpExclusively(&s)
          switch try judgeExportAtName(&s, durable: durable) {
          case .applied: return false
          case .later: unfinished = true  // durable only: the tool's write lands in the replaced file
          case .none, .keptAside: break
          }
        }
        FaultPoint.pause("defaults.export.publishing")  // tests: a tool begins an in-place write here
        try publishExport(
          temp, in: dir, written: written, pinned: pinned, generation: generation, edits: edits, durable: durable,
          unfinished: unfinished, superseded: superseded ?? [], &s)
        return true
      }
      if published {
        if durable { try SharedDefaultsError.wrap { () throws(FileSystemError) in try header.sync() } }
        return
      }
    }
    scheduleExportCheck(after: Self.exportRetryDelay)  // overtaken three times: later
  }

  /// Writes the binary plist of `image` as `name` in `dir` (AtomicReplace), value by value
  /// (`BinaryPropertyListWriter.writeDictionary`): only the keys, the small values and one large value are in
  /// memory at a time, and a large value's pages of the image are given back once written.
  func writeExportFile(of image: SuiteImage, as name: String, in dir: borrowing SystemFD, durable: Bool)
    throws(SharedDefaultsError) -> FileStatus
  {
    var keys: [String] = []
    var entries: [SuiteImage.Entry] = []
    keys.reserveCapacity(image.count)
    entries.reserveCapacity(image.count)
    let faults = image.faultCount
    // Errors other than the file's cross the replace's closure (which throws FileSystemError) kept aside.
    var refused: SharedDefaultsError?
    func unwritable(_ error: any Error) -> SharedDefaultsError {
      .unsupportedValue("the suite cannot be written as a property list: \(error)")
    }
    do {
      try image.forEachEntry { entry, key in
        keys.append(key)
        entries.append(entry)
      }
      return try SharedDefaultsError.wrap { () throws(FileSystemError) in
        try AtomicReplace.write(
          parts: 1, in: dir, name: name, mode: fileMode, durability: durable ? .powerLoss : .processCrash
        ) { (fd, _) throws(FileSystemError) in
          // Small pieces are gathered and written a megabyte at a time.
          var pending: [UInt8] = []
          let chunk = 1 << 20
          do {
            try BinaryPropertyListWriter.writeDictionary(keys: keys) { i in
              let entry = entries[i]
              let value = try image.value(of: entry)
              if entry.valueLength >= SuiteValues.releasedValueBytes {
                image.releaseResidentPages(in: entry.valueOffset..<(entry.valueOffset + entry.valueLength))
              }
              return value
            } write: { bytes in
              if pending.count + bytes.count > chunk, !pending.isEmpty {
                try fd.writeAll(pending)
                pending.removeAll(keepingCapacity: true)
              }
              if bytes.count >= chunk { try fd.writeAll(bytes) } else { pending.append(contentsOf: bytes) }
            }
            try fd.writeAll(pending)
            guard image.faultCount == faults else {
              throw SuiteImage.Corruption(offset: 0, reason: "the file was truncated while it was read")
            }
          } catch let error as FileSystemError {
            throw error
          } catch {
            refused = unwritable(error)
            throw FileSystemError("write", name, .canceled)
          }
        }
      }
    } catch let error as SharedDefaultsError {
      throw refused ?? error
    } catch {
      throw unwritable(error)
    }
  }

  /// Whether the export does not hold the snapshot's state (stale, edited, or written from an older snapshot).
  func exportIsBehind() -> Bool {
    guard (try? exportState()) == .current else { return true }
    return (try? root.status(exportedItem))??.inode != header.load(Slot.snapshotInode)
  }

  /// What the file open as `fd` (at the export's name, about to be replaced) is accounted for as: its identity when
  /// it is the recorded export or a tool's file already judged; else — a tool's file that landed, or an in-place
  /// write that began, after the state was looked at, or one left for later (`unfinished`) — an identity no file
  /// has, so that whatever it holds is judged as a tool's write. Read from the descriptor the export keeps, never
  /// from the name again: a tool truncating the file in between made it "unaccounted", and the export then kept no
  /// second name for it — the tool's write landed in a file with no name (an edit lost under load, issue #32).
  func identityAccounted(for fd: borrowing SystemFD, unfinished: Bool) -> Identity {
    guard !unfinished, let st = try? fd.status() else { return (0, 0, 0) }
    let identity = SuiteHeader.identity(st)
    if let recorded = header.recordedExport(), identity == recorded { return identity }
    return identity == header.judged() ? identity : (0, 0, 0)
  }

  /// With the lock: the temp file `temp` (in `dir`, the suite's directory) becomes the export, the pinned image
  /// its base; the export is recorded, and the history learns the pairs the name stops showing (`superseded`).
  /// The file it replaces is kept under a second name for a tool's write into it (a tool that opened it before the
  /// rename writes there), accounted for as what it was when opened here (`identityAccounted(for:unfinished:)`).
  func publishExport(
    _ temp: String, in dir: borrowing SystemFD, written: FileStatus, pinned: String, generation: UInt64, edits: UInt64,
    durable: Bool,
    unfinished: Bool, superseded: [UInt128], _ s: inout State
  ) throws(SharedDefaultsError) {
    // The file being replaced, kept open first: a tool may write into it (in place) while this runs, and that
    // write must not vanish with the file's name. Any change after this open shows as another identity (judged),
    // any file renamed over the name after it as a displaced one (kept, judged).
    // In a box: it may go on to a background retry (`applyReplacedEditLater`), and closes when the last holder goes.
    let replaced: DescriptorBox? =
      if let fd = try? dir.open("\(suite).plist", .readOnly) { DescriptorBox(fd) } else { nil }
    let accounted = replaced.map { identityAccounted(for: $0.fd, unfinished: unfinished) }
    // First: a kill after it leaves pairs learned, never an export shown without its predecessor's pairs.
    var history = try loadHistory()
    history.insert(superseded)
    try saveHistory(history)
    // And given a second name, for any process to apply a tool's write into it later, whatever becomes of this one.
    let keptName = accounted.map { keptExportName($0) }
    if let keptName {
      try? dir.removeFile(keptName)
      try? dir.link("\(suite).plist", to: keptName)
      // With the image of the export it shows or replaced: the base of a write into it, whatever exports follow.
      try? dir.removeFile(Self.keptBase(keptName))
      try? dir.link("\(suite).snapshot.exported", to: Self.keptBase(keptName))
    }
    header.store(Slot.exportInode, .max)  // stale until recorded: a kill in between leaves it to be rewritten
    // A tool writes into the file being replaced only if it has it open. A write lease held across the rename is
    // granted only when no one else has it open and is broken by any open meanwhile: whole at the end, and the file
    // open nowhere after (an open that found the old file just before the rename and reached the lease just after
    // it was given back), then unchanged (a tool that opened, wrote and closed in between), no tool can write into
    // the replaced file, and its second name goes at once — a process that exits right after `synchronize()` leaves
    // no `.replaced-*` files behind, each the size of the suite. Otherwise, as where leases are refused, it stays.
    var undisturbed = false
    let replacedInode = (try? replaced?.fd.status())??.inode
    var keptDisplaced: String?
    try SharedDefaultsError.wrap { () throws(FileSystemError) in
      FaultPoint.pause("defaults.export.replacing")
      let leased = keptName != nil && replaced?.fd.takeWriteLease() == true
      let displaced: FileStatus?
      do throws(FileSystemError) { displaced = try publish(temp, in: dir) } catch {
        if leased { _ = replaced?.fd.releaseLease() }
        throw error
      }
      if leased { undisturbed = replaced?.fd.releaseLease() == true }
      // Another file than the one opened above was at the name: a tool renamed its edit over it after it was judged,
      // just before this export took the name. Displaced by the exchange, not unlinked: kept, and judged as a write
      // into a replaced export, against the base of the export it replaced (still `<suite>.snapshot.exported`).
      // The file opened above is left at `temp` (removed by the caller; kept under `keptName` as before).
      if let displaced, displaced.inode != replacedInode { keptDisplaced = keepDisplaced(temp, in: dir) }
      if durable { try dir.sync() }
      FaultPoint.reach("defaults.compact.exportWritten")
      try dir.rename(pinned, to: "\(suite).snapshot.exported")
      header.store(Slot.exportGeneration, generation)
      // The identity of what was written, not of what is at the name by now: a tool that wrote into the new
      // export at once must still be seen as an edit.
      header.recordExport(written)
      header.store(Slot.editsExported, edits)
    }
    // The displaced tool's file is judged now, before this export (`synchronize()`) returns and the process may exit.
    if let keptDisplaced {
      let edit: ([String: PropertyListValue], [UInt8], FileStatus)? =
        if let fd = try? dir.open(keptDisplaced, .readOnly) { Self.readEdit(fd) } else { nil }
      if let (edited, bytes, status) = edit {
        try catchUpExclusively(&s)
        try commitReplacedEdit(edited, bytes: bytes, status: status, &s, keptAs: keptDisplaced)
        Self.dropKept(keptDisplaced, in: dir)
      } else {
        scheduleExportCheck()  // not readable now: judged from its second name later, here or in any process
      }
    }
    let quiet = undisturbed && replaced?.fd.isOpenElsewhere() == false  // before the identity is read: see above
    guard let replaced, let accounted, let now = try? replaced.fd.status(), now.kind == .regular,
      SuiteHeader.identity(now) != accounted
    else {
      guard let keptName else { return }
      if quiet {
        Self.dropKept(keptName, in: dir)
      } else {
        // Untouched so far: the second name stays for a while (`applyKeptExports`), a tool may write still.
        scheduleExportCheck(after: Self.keptExportGrace + Self.exportRetryDelay)
      }
      return
    }
    // Written by a tool since it was accounted for (in place, during this rename): judged against its base.
    guard let (edited, bytes, status) = Self.readEdit(replaced.fd) else {
      // Perhaps half-written: a tool that writes in place truncates the file, encodes, then writes (plistlib
      // takes tens of milliseconds in between). Read it again later; its write lands in this inode.
      replacedEdits.enter()
      applyReplacedEditLater(replaced, keptAs: keptName, tries: Self.replacedEditTries)
      return
    }
    try catchUpExclusively(&s)
    try commitReplacedEdit(edited, bytes: bytes, status: status, &s, keptAs: keptName)
    if let keptName { Self.dropKept(keptName, in: dir) }
  }

  /// Puts the export at `temp` (in `dir`) at the export's name. Atomically exchanged with the file there, when there
  /// is one: returns that file's identity, now at `temp` (the caller looks at it, then removes it). When there is
  /// none, renamed without replacing (a file that appears meanwhile is exchanged with instead).
  func publish(_ temp: String, in dir: borrowing SystemFD) throws(FileSystemError) -> FileStatus? {
    let name = "\(suite).plist"
    for _ in 0..<8 {
      do throws(FileSystemError) {
        try dir.exchange(temp, with: name)
        return try dir.status(of: temp)
      } catch  where error.errno == .noSuchFileOrDirectory {
        do throws(FileSystemError) {
          try dir.renameNoReplace(temp, to: name)
          return nil
        } catch  where error.errno == .fileExists {
          continue  // one appeared: exchange with it
        }
      }
    }
    try dir.rename(temp, to: name)  // a name that keeps coming and going: replaced, as a plain rename would
    return nil
  }

  /// A tool's file displaced from the export's name by `publish` (now at `temp`), which nobody judged: kept under a
  /// second name with the base of the export it replaced (`<suite>.snapshot.exported`, not yet moved on), to be
  /// judged like a write into a replaced export. Returns that name (nil, logged, when it could not be kept).
  func keepDisplaced(_ temp: String, in dir: borrowing SystemFD) -> String? {
    let kept = keptExportName((0, 0, 0))  // an identity no file has: judged as written by a tool
    do throws(FileSystemError) {
      try? dir.removeFile(Self.keptBase(kept))
      try dir.link("\(suite).snapshot.exported", to: Self.keptBase(kept))
      try dir.rename(temp, to: kept)
    } catch {
      Self.logger.error("suite '\(suite)': could not keep a file another tool put at '\(plistPath)': \(error)")
      return nil
    }
    Self.logger.notice("suite '\(suite)': a file another tool put at '\(plistPath)' as it was exported is judged next")
    return kept
  }

  /// How long a half-written export is given before it is moved aside as unusable.
  static let exportRetryDelay: Int64 = 250_000_000  // nanoseconds

  /// Looks at the export in the background (it changed, or a reload found it edited or stale): applies an outside
  /// edit, rewrites a stale export.
  ///
  /// `tracked`: a process about to exit waits for it (`waitForBackgroundWork`) — after it applied a tool's edit, the
  /// export must show it even when the process exits at once (a stress writer did, and the edit stayed out of the
  /// export).
  func scheduleExportCheck(after delay: Int64 = 0, tracked: Bool = false) {
    guard !readOnly else { return }
    if tracked { compactions.enter() }
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [self, compactions] in
      defer { if tracked { compactions.leave() } }
      // The whole container went away (deleted): nothing to adopt.
      guard (try? root.status(Self.preferences)) ?? nil != nil else { return }
      if state.withLock({ $0.generation == .max }) {
        // Values dropped (a memory warning) or not loaded yet: loaded again (under the lock, below) only for an
        // export that needs work — skipping those left an applied edit out of the export under memory pressure.
        guard (try? exportState()) != .current || hasKeptExports() else { return }
      }
      if hasKeptExports() {
        // Replaced exports kept for a tool's late write: applied (which marks the export stale) or dropped.
        do {
          let dir = try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
            try root.openDirectory(Self.preferences)
          }
          let pending = try exclusively { s throws(SharedDefaultsError) -> Bool in try applyKeptExports(in: dir, &s) }
          if pending { scheduleExportCheck(after: Self.keptExportGrace) }
        } catch {
          Self.logger.error("suite '\(suite)': could not apply a replaced export's edit: \(error)")
        }
      }
      guard (try? exportState()) != .current else { return }
      do {
        // Applies an edit (`applyOutsideEdit`; a half-written one schedules this check again) and rewrites the
        // export (another process may have done it meanwhile: then the edit is not there any more).
        try writeExport(durable: false)
      } catch {
        Self.logger.error("suite '\(suite)': could not apply the outside change: \(error)")
      }
    }
  }
}
