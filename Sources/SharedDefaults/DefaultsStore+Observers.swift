import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import PropertyList
import Synchronization
import SystemLayer

/// Applying records and telling observers: changes are delivered on one serial queue in commit order; another
/// process's commits arrive through the suite's change signal (writes through a mapping make no inotify event), and
/// edits of the export through inotify.
extension DefaultsStore {
  // MARK: Applying and events

  func apply(_ record: JournalFormat.Record, to values: inout SuiteValues) {
    switch record.operation {
    case .set(let value): values.set(value, forKey: record.key)
    case .remove: values.set(nil, forKey: record.key)
    }
  }

  func apply(_ records: [JournalFormat.Record], to s: inout State) {
    guard !s.observers.isEmpty else {
      for record in records { apply(record, to: &s.values) }
      return
    }
    var changes: [DefaultsChange] = []
    for record in records {
      let old: PropertyListValue?
      let new: PropertyListValue?
      switch record.operation {
      case .set(let value):
        new = value
      case .remove:
        new = nil
      }
      old = s.values[record.key]
      s.values.set(new, forKey: record.key)
      // Process id 0: an edit of the export by another tool.
      let origin = record.pid == 0 ? nil : record.pid
      changes.append(DefaultsChange(key: record.key, oldValue: old, newValue: new, originProcessID: origin))
    }
    deliver(changes, to: s.observers)
  }

  /// Replaces the whole state (reload, adoption) and reports the keys whose values differ.
  func replaceValues(with values: SuiteValues, in s: inout State) {
    let first = s.generation == .max
    if !first && !s.observers.isEmpty {
      // O(suite) with observers only: what every key was and is.
      let before = (try? s.values.dictionary()) ?? [:]
      let after = (try? values.dictionary()) ?? [:]
      var changes: [DefaultsChange] = []
      for key in Set(before.keys).union(after.keys) where before[key] != after[key] {
        changes.append(DefaultsChange(key: key, oldValue: before[key], newValue: after[key], originProcessID: nil))
      }
      deliver(changes.sorted { $0.key < $1.key }, to: s.observers)
    }
    release(s.values)
    s.values = values
    s.tail = nil
  }

  /// Frees a dropped state on the background queue: a table of many values takes milliseconds to free.
  func release(_ values: SuiteValues) {
    guard values.changeCount > 1024 else { return }
    background.async { withExtendedLifetime(values) {} }
  }

  /// Queued in application order on one serial queue, so observers see changes in commit order.
  func deliver(_ changes: [DefaultsChange], to observers: [UInt64: Observer]) {
    guard !changes.isEmpty, !observers.isEmpty else { return }
    let targets = Array(observers.values)
    deliveries.async {
      for change in changes {
        for observer in targets where observer.keys?.contains(change.key) ?? true { observer.deliver(change) }
      }
    }
  }

  func addObserver(keys: Set<String>?, _ deliver: @escaping @Sendable (DefaultsChange) -> Void) -> UInt64 {
    _ = readCurrent { _ in 0 }  // start from the current state: later changes only
    return state.withLock { s in
      _ = refreshWithoutWaiting(&s, lazy: false)  // observers compare old values: the whole state
      s.nextObserver += 1
      s.observers[s.nextObserver] = Observer(keys: keys, deliver: deliver)
      if observerCount.add(1, ordering: .relaxed).newValue == 1 { listenForWrites(true) }
      return s.nextObserver
    }
  }

  func removeObserver(_ id: UInt64) {
    if state.withLock({ $0.observers.removeValue(forKey: id) }) != nil,
      observerCount.subtract(1, ordering: .relaxed).newValue == 0
    {
      listenForWrites(false)
    }
  }

  // MARK: Other processes' writes

  /// inotify on `Library/Preferences`: a snapshot replaced (compaction, or an outside tool) — always watched.
  func startWatching() {
    let plistName = "\(suite).plist"
    do {
      let journalName = "\(suite).journal"
      let lockName = "\(suite).lock"
      let gone = Watcher.delete | Watcher.movedFrom
      let watchGone = Watcher.deleteSelf | Watcher.moveSelf | Watcher.ignored
      let token = try Watcher.shared.watch(directory) { [weak self] event in
        guard let self else { return }
        if event.name == plistName { self.scheduleExportCheck() }
        if event.name == journalName { self.scheduleJournalCheck() }
        // The header's file or the directory went: DefaultsStore+RemovedFiles.swift.
        if (event.name == lockName && event.mask & gone != 0) || (event.name.isEmpty && event.mask & watchGone != 0) {
          self.scheduleMoveCheck()
        }
      }
      registrations.withLock { $0.watch = token }
    } catch {
      Self.logger.warning("suite '\(suite)': cannot watch '\(directory)' (\(error)); changes are seen on access only")
    }
  }

  /// Commits by any process (written through the mapping, so inotify never sees them) arrive through the
  /// suite's change signal; listened to only while this process has observers. The listener thread catches up
  /// itself: one thread hop from the writer's commit to the delivery queue.
  func listenForWrites(_ on: Bool) {
    // Read-only: listening counts this process in the header, which it may not write (and nothing changes there).
    guard !readOnly else { return }
    let old = listener.withLock { current -> ChangeSignal.Listener? in
      defer {
        current =
          on
          ? signal.listen(name: "GroupContainer.SharedDefaults.\(suite)", coalesce: Self.observerCoalescing) {
            [weak self] in
            guard let self else { return }
            self.state.withLock { self.catchUpForObservers(&$0) }
          } : nil
      }
      return current
    }
    old?.cancel()
  }

  /// How long an observing process lets commits gather when they come faster than it catches up: a flood of
  /// commits then wakes it about 2,000 times a second, not once per commit, and costs the writers no system call.
  static let observerCoalescing: UInt64 = 500_000

  /// A wake-up of the listener: when every observer names its keys, the new records' keys are scanned in the
  /// mapping (no value decoded, nothing applied) and the state catches up only if one of those keys changed —
  /// otherwise it stays behind until something reads it. A process that observes one key of a busy suite then
  /// costs the writers almost nothing (4 such processes took 42 % of their throughput on two cores, applying
  /// every record). Anything unusual (a new generation, damage, a record that does not scan) catches up fully.
  func catchUpForObservers(_ s: inout State) {
    var observed: [[UInt8]] = []
    var observedKeys = Set<String>()
    for observer in s.observers.values {
      guard let keys = observer.keys else { return _ = refreshWithoutWaiting(&s) }
      observedKeys.formUnion(keys)
    }
    for key in observedKeys { observed.append(Array(key.normalizedKey.utf8)) }  // the journal holds NFC
    let generation = header.load(Slot.generation)
    let committed = header.length(Slot.committed)
    // A rewind is moving the journal: its process posts again when done (catching up now would wait for its lock).
    guard header.load(Slot.rewindTo) == 0 else { return }
    if generation != s.generation, !followMovedTail(&s, generation: generation, committed: committed),
      !followRewindForObservers(&s, observedKeys, generation, committed)
    {
      return _ = refreshWithoutWaiting(&s)
    }
    let offset = s.scanned.generation == s.generation ? max(s.length, s.scanned.to) : s.length
    guard generation == s.generation, s.generation != .max, !headerLost.load(ordering: .relaxed),
      journal.intact, offset <= committed
    else { return _ = refreshWithoutWaiting(&s) }
    var touched = false
    let readable = journal.forEachKey(from: offset, to: committed) {
      _, _, key in
      touched = observed.contains { $0.count == key.count && $0.withUnsafeBytes { $0.elementsEqual(key) } }
      return !touched
    }
    guard readable, !touched else { return _ = refreshWithoutWaiting(&s) }
    // Scanned without the lock: good only if no compaction emptied the journal meanwhile.
    guard header.loadAfterFence(Slot.generation) == generation else { return _ = refreshWithoutWaiting(&s) }
    guard header.load(Slot.rewindTo) == 0 else { return }  // as above: scanned again after the rewind's post
    s.scanned = (generation, committed)
  }

  /// After a rewind (a new generation), for observers that all name their keys: the new snapshot becomes this
  /// process's image and the observed keys' values in it are compared with the old ones; the journal past it is
  /// then scanned like any other. A full catch-up would decode everything appended since the rewind began — every
  /// observing process, at every rewind. False when that cannot be done without the lock (then it catches up).
  func followRewindForObservers(
    _ s: inout State, _ keys: Set<String>, _ generation: UInt64, _ committed: Int
  ) -> Bool {
    guard s.generation != .max, s.values.damage == nil, !headerLost.load(ordering: .relaxed),
      journal.intact, header.load(Slot.rewindTo) == 0,
      let image = try? loadImage(), isRecordedSnapshot(image.status)
    else { return false }
    let values = SuiteValues(image: image)
    var changes: [DefaultsChange] = []
    for key in keys.sorted() {
      let (old, new) = (s.values[key], values[key])
      if old != new { changes.append(DefaultsChange(key: key, oldValue: old, newValue: new, originProcessID: nil)) }
    }
    // Good only if the image read is the generation's (no other rewind meanwhile) and read whole.
    guard values.damage == nil, s.values.damage == nil, header.loadAfterFence(Slot.generation) == generation,
      header.load(Slot.rewindTo) == 0
    else { return false }
    release(s.values)
    s.values = values
    s.ownWritesUnapplied = s.ownWritesUnapplied || !s.pendingOwn.isEmpty
    s.pendingOwn = [:]
    s.generation = generation
    s.length = header.snapshotStart(generation: generation, committed: committed)
    deliver(changes, to: s.observers)
    return true
  }
}
