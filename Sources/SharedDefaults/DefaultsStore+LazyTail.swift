import PropertyList
import Synchronization
import SystemLayer

/// A lazy tail (rule: a new process's first read does not depend on how the last writer left). A writer that exits or
/// is killed before it compacts leaves the journal past the snapshot long: a process that loaded the suite by
/// decoding it all paid 1.2–3.5 s and 190 MB for a first read of one key of a million-key suite (and, with the bar at
/// 1 MiB, 6.5 MB and 550 ms in a debug build for 422 KB left past the snapshot of a 100,000-key suite). So a load
/// that finds `lazyTailBytes` or more past the snapshot maps the snapshot and leaves those records unread: a point read
/// (`value(forKey:)`) scans them for its key alone — record headers and key bytes, no value decoded but the one it
/// finds, the pages given back after — and anything that needs the whole state (a write, any locked operation,
/// the whole dictionary, an observer) applies them first (`applyTail`), once. The scan reads without the lock, as
/// the seqlock reader does: good only if the generation is the same after it.
///
/// Lookups go: changes read or written since the load → the tail (its last record of the key) → the image.
///
/// A process that goes on reading has the tail applied in the background after `lazyTailScans` scans, and scans
/// until then: a point read never replays the tail on its caller's thread (rule: a read does bounded work — at most
/// one scan of the journal past the snapshot).
///
/// A reader that fell behind (descheduled while a writer appended `lazyTailBytes` or more) hands its catch-up over
/// the same way: the records become a tail over what it held (`base`), applied in the background at once; a read
/// following a fast writer had applied 8,000–65,000 records on its caller's thread (40–71 ms). A process already
/// loaded whose reload (another process's rewind) finds that much past the new snapshot leaves it as a tail too.
/// Lookups then go: changes since the hand-over → the tail → `base` (its changes, then its image).
extension DefaultsStore {
  /// Journal bytes past what a process holds (the snapshot, for a first load) from which it leaves them as a tail
  /// instead of applying them on the reading thread: about 2,000 records, a few milliseconds to apply and a table of
  /// them in the process's own memory; one scan of them for a point read costs well under one.
  static let lazyTailBytes = 64 << 10
  /// Catch-ups handed to the background (tests: which path a read took).
  static let catchUpsHandedOver = TestCounter()
  /// Scans a process makes of its tail before it has it applied in the background (a process that reads many keys
  /// pays the whole replay once, off its readers' threads, and every read after is O(1)).
  static let lazyTailScans = 16
  /// Tail scans this process made (tests: which path a read took).
  static let tailScans = TestCounter()

  /// The records `range` of the journal left unread by a load, and what point reads found there.
  final class LazyTail: @unchecked Sendable {  // used under the store's `state` lock only
    let range: Range<Int>
    /// What the process held before the tail's records, when a reader handed its catch-up over; nil: the image
    /// alone (`values.image`). Sealed, so applying the tail over it copies no table.
    let base: SuiteValues?
    /// Key (NFC) → its last record in the tail: the value, nil when it removes the key; absent when not looked up.
    /// A key the tail does not hold maps to `.none` in `absent`.
    var found: [String: PropertyListValue?] = [:]
    var absent: Set<String> = []
    var scans = 0
    /// Being applied in the background (`scheduleTailApplication`).
    var applying = false

    init(range: Range<Int>, base: SuiteValues? = nil) {
      self.range = range
      self.base = base
    }

    /// The same tail in the journal a rewind moved (`followMovedTail`): its records `from` bytes earlier.
    func moved(back from: Int) -> LazyTail {
      let tail = LazyTail(range: (range.lowerBound - from)..<(range.upperBound - from), base: base)
      (tail.found, tail.absent, tail.scans) = (found, absent, scans)
      return tail
    }

    /// The value under the tail (its records do not hold the key): `base`'s, else the image's.
    func older(_ key: String, values: SuiteValues) -> PropertyListValue? {
      base.map { $0[key] } ?? values[key]
    }
  }

  enum TailLookup {
    /// The key's last record in the tail: its value, or nil when it removes the key.
    case found(PropertyListValue?)
    /// No record of the key in the tail.
    case absent
    /// The journal changed under the scan (another generation), or does not read: catch up again.
    case failed
  }

  /// The current value of `key` in `s`, which has a tail: from the changes, the tail or the image. Nil when the
  /// tail could not be read (the caller catches up again).
  func lookUp(_ key: String, in s: inout State) -> PropertyListValue?? {
    guard let tail = s.tail else { return .some(s.values[key]) }
    if let change = s.values.change(forKey: key) { return .some(change) }
    let normalized = key.normalizedKey
    if let value = tail.found[normalized] { return .some(value) }
    if tail.absent.contains(normalized) { return .some(tail.older(key, values: s.values)) }
    if tail.scans >= Self.lazyTailScans { scheduleTailApplication(tail, &s) }
    switch scan(tail, for: normalized, generation: s.generation) {
    case .found(let value):
      tail.found[normalized] = value
      return .some(value)
    case .absent:
      tail.absent.insert(normalized)
      return .some(tail.older(key, values: s.values))
    case .failed:
      return nil
    }
  }

  static let scanReleaseBytes = 2 << 20

  /// The last record of `key` (NFC) in the tail's journal range, read without the lock.
  private func scan(_ tail: LazyTail, for key: String, generation: UInt64) -> TailLookup {
    tail.scans += 1
    Self.tailScans.add()
    let range = tail.range
    guard !journal.isMoving else { return .failed }
    FaultPoint.pause("defaults.read.tailScan")
    let wanted = Array(key.utf8)
    var last: (offset: Int, length: Int)?
    // The scanned pages are given back as the scan goes (the page cache keeps them): a tail of tens of megabytes
    // costs this process a few megabytes at its peak, not the whole tail.
    var released = range.lowerBound
    let readable = journal.forEachKey(from: range.lowerBound, to: range.upperBound) {
      offset, length, key in
      if key.count == wanted.count, key.elementsEqual(wanted) { last = (offset, length) }
      if offset - released >= Self.scanReleaseBytes {
        journal.releaseResidentPages(in: released..<offset)
        released = offset
      }
      return true
    }
    guard readable else { return .failed }
    var result = TailLookup.absent
    if let last {
      let (bytes, _) = journal.read(from: last.offset, to: last.offset + JournalFormat.headerBytes + last.length)
      var records: [JournalFormat.Record] = []
      guard (try? JournalFormat.decode(bytes, base: last.offset, into: &records)) != nil, let record = records.first
      else { return .failed }
      switch record.operation {
      case .set(let value): result = .found(value)
      case .remove: result = .found(nil)
      }
    }
    // Read as a seqlock reader: good only if nothing emptied the journal (a new generation) or truncated it.
    guard journal.intact,
      header.loadAfterFence(Slot.generation) == generation, header.load(Slot.rewindTo) == 0
    else { return .failed }
    journal.releaseResidentPages(in: range)  // the page cache keeps them; this process's memory does not
    return result
  }

  /// Applies the tail's records under the changes read or written since the load: `s` then holds the whole state.
  /// Read without the lock (a seqlock read); if the journal changed meanwhile or does not read, `s` is left to be
  /// loaded again (generation `.max`), whole. For what needs the whole state at once (a write, the dictionary).
  func applyTail(_ s: inout State) {
    guard let tail = s.tail else { return }
    s.tail = nil
    guard let values = tailApplied(tail, to: s.values.image, generation: s.generation) else {
      s.generation = .max
      s.length = 0
      return
    }
    install(values, over: &s)
  }

  /// The tail's base (or `image`) with its records applied (read without the lock); nil when the journal changed
  /// meanwhile.
  private func tailApplied(_ tail: LazyTail, to image: SuiteImage?, generation: UInt64) -> SuiteValues? {
    guard
      let records = journal.recordsWithoutLock(
        from: tail.range.lowerBound, to: tail.range.upperBound, generation: generation)
    else { return nil }
    var values = tail.base ?? SuiteValues(image: image)
    for record in records { apply(record, to: &values) }
    return values
  }

  /// `values` (the base and the tail) under what `s` read or wrote since, as `s`'s whole state.
  private func install(_ values: SuiteValues, over s: inout State) {
    var values = values
    s.values.forEachChange { key, change in values.set(change, forKey: key) }
    release(s.values)
    s.values = values
    s.tail = nil
    mergeTiersIfNeeded(s)
  }

  /// With `state` held: the tail is applied on the background queue, without `state` (reads go on scanning
  /// meanwhile), and installed if `s` still has it in that generation (else dropped: a reload replaced it).
  /// `waitForBackgroundWork` waits for it.
  func scheduleTailApplication(_ tail: LazyTail, _ s: inout State) {
    guard !tail.applying else { return }
    tail.applying = true
    let (image, generation) = (s.values.image, s.generation)
    compactions.enter()
    background.async { [weak self, compactions] in
      defer { compactions.leave() }
      guard let self else { return }
      FaultPoint.pause("defaults.read.tailApplying")  // tests: reads go on meanwhile
      let values = tailApplied(tail, to: image, generation: generation)
      state.withLock { s in
        guard s.tail === tail, s.generation == generation else { return }
        if let values {
          install(values, over: &s)
        } else {
          tail.applying = false  // the journal changed under the read: asked again by the next scan
        }
      }
    }
  }
}

extension DefaultsStore {
  /// With `state` held, in `s`'s generation, before reading the journal from `s.length` to `committed`: when that
  /// is `lazyTailBytes` or more, the records become a tail over what `s` holds, applied in the background from now
  /// on, and the caller reads nothing. False when the catch-up stays on the caller's thread: a short one; observers
  /// (they hear each record); own writes not yet applied; a compaction holding the changes; a tail already there
  /// (its application is under way: what came after it is applied as usual, over it).
  func handOverCatchUp(_ s: inout State, committed: Int) -> Bool {
    guard committed - s.length >= Self.lazyTailBytes, s.tail == nil, s.observers.isEmpty, s.pendingOwn.isEmpty,
      !s.ownWritesUnapplied, s.values.frozenToken == 0, s.values.damage == nil
    else { return false }
    var base = s.values
    base.seal()  // O(1): the table is handed to a tier, so the base's copy never copies it
    let tail = LazyTail(range: s.length..<committed, base: base)
    s.values = SuiteValues(image: base.image, capacity: base.capacity)
    s.tail = tail
    s.length = committed
    Self.catchUpsHandedOver.add()
    scheduleTailApplication(tail, &s)
    return true
  }
}
