import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import Synchronization
import SystemLayer

/// The suite's files removed under running processes (`rm -rf` of the container or of `Library/Preferences`, or
/// `rm <suite>.lock`). Each process keeps its mappings of the removed files, and a write would go on into them,
/// unseen by any process that opens the suite afterwards (and lost with the last process that maps them). Rule, in
/// this one file:
/// - **The lock file at the name is the suite.** A process whose header is not the file at `<suite>.lock` moves its
///   store onto the files at the names (`moveToFilesAtName`): it maps the lock file and the journal there (made
///   again when missing, with `Library/Preferences`) at the same addresses — the suite's lock and change signal
///   live in the header, so they move with it.
/// - **Nothing is appended to removed files after the first process moved.** Before it moves, a process marks the
///   removed header (`Slot.filesRemoved`) holding its lock; whoever takes that lock afterwards moves too instead of
///   appending (`locked`), so the removed journal's final state is fixed.
/// - **That final state is carried over once** (`Slot.carriedFrom`: the removed header's inode). The process that
///   sets the new header up makes it the snapshot, exactly; when one that opened the suite after the removal set it
///   up first, the final state fills in only the keys the new files lack (what was written there first wins). A
///   process behind the final state (a snapshot it cannot read any more) carries nothing, and leaves it to one that
///   is not.
/// - **Noticed without a system call on the write path**: the watcher's event (the lock file's name deleted or moved,
///   the directory's watch gone) moves a process in the background; the mark in the removed header moves it at its
///   next lock.
/// A whole container removed is made again by the coordination layer (`CoordinationSpace.recreateAfterRemoval`, which
/// also opens `root` again): the move waits for that. A process of a build before this rule neither marks nor reads
/// the mark: it goes on writing into the removed files until it restarts.
extension DefaultsStore {
  /// How long a move waits for a removed container to be made again (the coordination layer waits up to 2 s for the
  /// removal to finish first).
  static let containerReturnLimit: UInt64 = 10_000_000_000
  /// How long after the first event a move starts: `rm -rf` removes bottom-up, and a directory made again while it
  /// runs would make it fail on a directory that is not empty.
  static let removalSettling: UInt64 = 100_000_000
  /// The generation of a state that moved onto new files: no header holds it (headers count from 1; `.max` is
  /// "never loaded"), so the next catch-up reloads and tells observers what differs.
  static let movedGeneration = UInt64.max - 1

  /// The watcher saw the lock file's name or the directory go: moves in the background, once the removal settled.
  /// A container that does not come back is waited for again later, without the writer gate (this process's writes
  /// go on into the removed files meanwhile, as before the removal was noticed).
  func scheduleMoveCheck(after delay: UInt64 = removalSettling) {
    guard !readOnly, !movePending.exchange(true, ordering: .acquiringAndReleasing) else { return }
    background.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak self] in
      guard let self else { return }
      movePending.store(false, ordering: .releasing)
      guard waitForContainer() else {
        Self.logger.error("suite '\(suite)': its files were removed with the container, which is not back yet")
        return scheduleMoveCheck(after: Self.containerReturnLimit)
      }
      writerGate.withLock { _ in _ = moveToFilesAtName() }
    }
  }

  /// Whether the file at `<suite>.lock` is not the header this process maps (removed, replaced, or the container
  /// gone). A system call: only on the paths where a removal is suspected.
  func headerIsElsewhere() -> Bool {
    let item = Self.preferences + "/\(suite).lock"
    guard let atName = (try? root.status(item)) ?? nil else { return true }
    let mine = header.counters.identity
    return atName.inode != mine.inode || atName.device != mine.device
  }

  /// With the writer gate held (no other thread of this process takes the suite's lock or moves): moves the store
  /// onto the files at the names when its header was removed. Returns whether it did. See the rule above.
  func moveToFilesAtName() -> Bool {
    guard !moving.exchange(true, ordering: .acquiringAndReleasing) else { return false }
    defer { moving.store(false, ordering: .releasing) }
    guard headerIsElsewhere() else {
      // The files at the names are this process's (a mark left by a move whose files came back: `mv` and back).
      if header.load(Slot.filesRemoved) != 0 { header.store(Slot.filesRemoved, 0) }
      return false
    }
    guard waitForContainer() else {
      Self.logger.error("suite '\(suite)': its files were removed with the container, which is not back yet")
      return false
    }
    let removed = header.counters.identity.inode
    let lockName = "\(suite).lock"
    let dir: DescriptorBox
    do {
      dir = try Self.beneath(Self.preferences, in: containerPath) { () throws(FileSystemError) in
        for directory in ["Library", Self.preferences] { try root.makeDirectory(directory, mode: directoryMode) }
        return DescriptorBox(try root.openDirectory(Self.preferences))
      }
    } catch {
      Self.logger.error("suite '\(suite)': its files were removed and cannot be made again: \(error)")
      return false
    }
    // The removed files' final state: marked under their lock, so nobody appends after what this process reads.
    _ = lock.lock()
    header.store(Slot.filesRemoved, 1)
    let carried = state.withLock { s -> [String: PropertyListValue]? in
      applyTail(&s)
      guard catchUpWithoutLock(&s, lazy: false), s.generation == header.load(Slot.generation),
        s.length == header.length(Slot.committed)
      else { return nil }
      return try? s.values.dictionary()
    }
    lock.unlock()
    signal.post()  // observers of the removed header hear its final state
    listenForWrites(false)  // a listener counts itself in the header it listens to
    do throws(SharedDefaultsError) {
      let flockFile = DescriptorBox(
        try SharedDefaultsError.wrap { () throws(FileSystemError) in
          try dir.fd.openOrCreate(lockName, mode: fileMode, size: Int64(MappedCounters.fileSize))
        })
      // Held until the header is set up: whoever finds it new sets it up alone (as a process opening the suite).
      Self.flock(flockFile, suite: suite)
      defer { flockFile.fd.unlock() }
      let initializing = try SharedDefaultsError.wrap { () throws(FileSystemError) in try moveMappings(dir) }
      lockFile.withLock { $0 = flockFile }
      Self.logger.warning("suite '\(suite)': its files were removed; this process now uses the ones at the names")
      if initializing {
        // Nobody wrote here yet: the removed files' final state is the new suite's snapshot, exactly (keys removed
        // since an older snapshot stay removed).
        if let carried { try writeImage(of: carried) }
        try initializeHeader()
        if carried != nil { header.store(Slot.carriedFrom, removed) }
      }
      journal.recordInodeIfNone()
    } catch {
      Self.logger.critical("suite '\(suite)': moving onto the files at the names failed: \(error)")
      return false
    }
    do {
      try withLock { () throws(SharedDefaultsError) in
        try state.withLock { s throws(SharedDefaultsError) in
          try catchUpExclusively(&s)
          // Another process set the new files up (it opened the suite after the removal, or moved first): the
          // final state fills in the keys they lack, once; what was written there first wins.
          guard header.load(Slot.carriedFrom) != removed, let carried else { return }
          let records = carried.compactMap { key, value in
            s.values[key] == nil ? JournalFormat.Record(key: key, operation: .set(value), pid: CurrentProcess.id) : nil
          }
          if !records.isEmpty { try append(records, &s) }
          header.store(Slot.carriedFrom, removed)
          Self.logger.notice("suite '\(suite)': carried \(records.count) key(s) over from the removed files")
        }
      }
    } catch {
      Self.logger.error("suite '\(suite)': could not carry the removed files' state over: \(error)")
    }
    if observerCount.load(ordering: .relaxed) > 0 { listenForWrites(true) }
    watchAgain()
    return true
  }

  /// Maps the header and the journal at the names in `dir` at this store's addresses; whether the header is new (then
  /// the caller, holding its flock, sets it up). Under `state`: readers of this process never see the header of one
  /// file and the journal of another.
  private func moveMappings(_ dir: DescriptorBox) throws(FileSystemError) -> Bool {
    let lockName = "\(suite).lock"
    return try state.withLock { s throws(FileSystemError) -> Bool in
      try header.counters.rebind(to: dir.fd.open(lockName, .readWrite))
      let initializing = header.load(Slot.magic) != SuiteHeader.magic
      if initializing, (try? dir.fd.status(of: journal.name))??.inode == journal.inode {
        // The removed header's journal (only the lock file was removed): its bytes are the removed header's, and
        // processes still on that header read them: the new header gets a new file.
        try dir.fd.removeFile(journal.name)
      }
      try journal.map(dir.fd.openOrCreate(journal.name, mode: fileMode, size: 0))
      seenHeaderFaults.store(header.faultCount, ordering: .relaxed)
      s.generation = Self.movedGeneration
      s.length = 0
      s.pendingOwn = [:]
      s.ownWritesUnapplied = false
      s.scanned = (.max, 0)
      return initializing
    }
  }

  /// Whether the container directory this process resolves beneath is there: after `rm -rf` of the container,
  /// waits (bounded) for the coordination layer to make it again and open it again (`root` then names the new one).
  private func waitForContainer() -> Bool {
    let deadline = MonotonicClock.nanoseconds() + Self.containerReturnLimit
    var pause: UInt64 = 10_000_000
    while true {
      if let st = try? root.fd.status(), st.linkCount > 0 { return true }
      guard MonotonicClock.nanoseconds() < deadline else { return false }
      MonotonicClock.sleep(nanoseconds: pause)
      pause = min(pause * 2, 500_000_000)
    }
  }

  /// The directory's watch died with it: watch the one at the path now.
  private func watchAgain() {
    let old = registrations.withLock { registrations in
      defer { registrations.watch = nil }
      return registrations.watch
    }
    if let old { Watcher.shared.cancel(old) }
    startWatching()
  }
}
