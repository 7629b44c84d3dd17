import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// The presenter registry, laid out by the presented item's path so that an access reads only what concerns its
/// items (issue #33 item 5: with 5,000 files presented by another process, a new process's first write listed and
/// decoded all 5,000 records, and any registration anywhere made every process list them again):
///
///     presenters/<h(P)>/<id>              the record of a presenter of P; h is `ContainerPath.bytesHash` (FNV-1a-64,
///                                          16 hex digits): every record presenting P, and those of paths sharing P's hash
///     presenters/<h(A)>/below/<id>        the same record, for every proper ancestor A of P (the container root too):
///                                          what an access of A must also tell (its descendants' presenters)
///     presenters/by-process/<p>/<id>      the same record again: a dead process's records, found without a walk
///
/// An access of X lists `<h(A)>` for X and each of its ancestors — mostly missing or holding only `below` — and
/// `<h(X)>/below` when that exists: the presenters of X, of its ancestors and of its descendants, nothing else.
/// Listings are cached per bucket with the generation of the bucket's slot in the mapped counters (slots
/// `slotBase ..< slotBase + slotCount`, by hash): a registration bumps the slots of its record's bucket and of its
/// ancestors' (their `below` changed), so it makes others list again only buckets on its own path (and those sharing
/// their slots). Counter 0 is bumped on every change too: with it unchanged since the registry was last seen empty
/// (no bucket directory: `presenters/` has no subdirectory), an access reads no bucket at all.
///
/// Order matters, as before: a writer changes the files *then* bumps the counters; a reader loads a counter *then*
/// lists — so a reader never keeps a listing older than the generation it saw. Records are immutable files (a
/// change is a new id), so a record once decoded is never read again. A listing is also written to the bucket's
/// index, which a process with nothing cached reads instead (PresenterBucketIndex.swift: one file, not one per record).
final class PresenterRegistry: @unchecked Sendable {  // `cache` is a Mutex; the rest is immutable
  /// Its words in the container's counters (declared in `CoordinationCounters`): the registry's generation, and the
  /// bucket generations, counters `slotBase ..< slotBase + slotCount`.
  static let generationCounter = CoordinationCounters.presenterGeneration
  static let slotBase = CoordinationCounters.presenterBuckets.lowerBound
  static let slotCount = CoordinationCounters.presenterBuckets.count
  static let belowDirectory = "below"
  static let byProcessDirectory = "by-process"

  /// `presenters/`, relative to the container.
  private let relative: String
  private let directory: String
  private let root: ContainerDirectory
  private let counters: MappedCounters
  private let fileMode: mode_t
  private let directoryMode: mode_t

  /// One listing of a bucket (or of its `below`), as of `generation`.
  private struct Bucket {
    var generation: UInt64
    var records: [PresenterRecord] = []
    var damaged: [DamagedRecord] = []
    var hasBelow = false
  }
  private struct Cache {
    /// The generation of counter 0 when `presenters/` was last looked at, and whether it had no bucket then.
    var checkedAt: UInt64?
    var wasEmpty = false
    var buckets: [UInt64: Bucket] = [:]
    var below: [UInt64: Bucket] = [:]
    /// Every record decoded, and its file's bytes (what an index holds), by bucket-relative path (records are
    /// immutable).
    var decoded: [String: Decoded] = [:]
  }
  private struct Decoded {
    var record: PresenterRecord
    var bytes: [UInt8]
  }
  private let cache = Mutex(Cache())
  /// Record files read so far (tests check that an access reads what concerns its path only), and listings taken
  /// from an index (PresenterBucketIndex).
  let filesRead = Atomic<Int>(0)
  let indexesRead = Atomic<Int>(0)

  init(directory: String, root: ContainerDirectory, counters: MappedCounters, fileMode: mode_t, directoryMode: mode_t) {
    self.directory = directory
    self.relative = root.relative(directory) ?? CoordinationPaths.presenters
    self.root = root
    self.counters = counters
    self.fileMode = fileMode
    self.directoryMode = directoryMode
  }

  /// The bucket directory name of a path hash.
  static func bucketName(_ hash: UInt64) -> String {
    let hex = String(hash, radix: 16)
    return String(repeating: "0", count: 16 - hex.count) + hex
  }

  /// The bucket directory of `item`'s records (its owner watches it: PresenterHost), absolute.
  func bucketPath(of item: ContainerPath) -> String { directory + "/" + Self.bucketName(item.bytesHash) }

  private static func slot(_ hash: UInt64) -> Int { slotBase + Int(hash % UInt64(slotCount)) }

  /// The record's files: its bucket's, one in `below` of each proper ancestor's bucket, and its process's.
  private func files(of record: PresenterRecord) -> [(directory: String, file: String)] {
    let hashes = record.path.prefixHashes
    var files = [(relative + "/" + Self.bucketName(hashes[hashes.count - 1]), record.id)]
    for hash in hashes.dropLast() {
      files.append((relative + "/" + Self.bucketName(hash) + "/" + Self.belowDirectory, record.id))
    }
    files.append((relative + "/" + Self.byProcessDirectory + "/\(record.process)", record.id))
    return files
  }

  private func bump(_ record: PresenterRecord) {
    for hash in Set(record.path.prefixHashes.map(Self.slot)) { counters.increment(hash) }
    counters.increment(Self.generationCounter)
  }

  func register(_ record: PresenterRecord) throws(FileSystemError) {
    let bytes = record.encoded()
    for (directory, file) in files(of: record) {
      // A bucket emptied and removed by another process meanwhile: make it again, once.
      var attempt = 0
      while true {
        do {
          try makeDirectories(directory)
          try root.replaceFile(directory + "/" + file, with: bytes, mode: fileMode)
          break
        } catch  where error.errno == .noSuchFileOrDirectory && attempt < 3 {
          attempt += 1
        }
      }
    }
    bump(record)
  }

  /// `mkdir -p` of `relative` below `presenters/` (which exists).
  private func makeDirectories(_ path: String) throws(FileSystemError) {
    var made = relative
    for component in path.dropFirst(relative.count + 1).split(separator: "/") {
      made += "/" + component
      try root.makeDirectory(made, mode: directoryMode)
    }
  }

  func unregister(_ record: PresenterRecord) {
    for (directory, file) in files(of: record) {
      try? root.removeFile(directory + "/" + file)
      removeIfEmpty(directory)
    }
    bump(record)
  }

  /// Removes `directory` and then its parents up to `presenters/` while they are empty (rmdir fails on any that is
  /// not: a registration under way keeps it, or makes it again), and the index of each bucket removed: left, it
  /// would stay until the bucket is used again (a listing of a missing bucket writes none). A lister may write one
  /// meanwhile: stale, never wrong, and removed at the bucket's next emptying.
  private func removeIfEmpty(_ directory: String) {
    var path = directory
    while path.count > relative.count {
      let (parent, name) = ContainerDirectory.split(path)
      guard let fd = try? root.openDirectory(parent) else { return }
      guard (try? fd.removeDirectory(name)) != nil else { return }
      let listing = String(path.dropFirst(relative.count + 1))
      if !listing.hasPrefix(Self.byProcessDirectory) { try? root.removeFile(PresenterBucketIndex.path(of: listing)) }
      path = parent
    }
  }

  /// A dead process's records (and the files naming them): found through `by-process/<p>/`.
  func removeAll(of process: ProcessName) {
    let mine = relative + "/" + Self.byProcessDirectory + "/\(process)"
    guard let names = try? root.entries(of: mine) else { return }
    var removed = false
    for (name, _) in names {
      if let bytes = try? root.readFile(mine + "/" + name, limit: PresenterRecord.maxBytes).bytes,
        let record = try? PresenterRecord.decode(bytes, fileName: name), record.process == process
      {
        for (directory, file) in files(of: record) where directory != mine {
          try? root.removeFile(directory + "/" + file)
          removeIfEmpty(directory)
        }
        for hash in Set(record.path.prefixHashes.map(Self.slot)) { counters.increment(hash) }
      }
      try? root.removeFile(mine + "/" + name)
      removed = true
    }
    removeIfEmpty(mine)
    if removed { counters.increment(Self.generationCounter) }
  }

  /// Whether the file of `record` holds exactly `record` (its owner checks after an inotify event on it).
  func isIntact(_ record: PresenterRecord) -> Bool {
    let path = relative + "/" + Self.bucketName(record.path.bytesHash) + "/" + record.id
    guard let bytes = try? root.readFile(path, limit: PresenterRecord.maxBytes).bytes,
      let stored = try? PresenterRecord.decode(bytes, fileName: record.id)
    else { return false }
    return stored == record
  }

  // MARK: Reading

  /// What concerns an access of `items`: the records in the buckets of the items and their ancestors, and in the
  /// items' `below` — a superset of the related records (paths sharing a hash; the caller relates each) — and the
  /// damaged files found there, each a presenter that cannot be asked (never "no presenter"). `items` is made only
  /// past the fast path (nobody presents anything): made by the caller, it was an array per access.
  func lookup(
    _ items: @autoclosure () -> [ContainerPath]
  ) -> (records: [PresenterRecord], damaged: [DamagedRecord]) {
    if emptyGeneration() != nil { return ([], []) }  // the fast path: nobody in the container presents anything
    let epoch = counters.epoch
    var records: [PresenterRecord] = []
    var damaged: [DamagedRecord] = []
    for item in items() {
      let hashes = item.prefixHashes
      for (depth, hash) in hashes.enumerated() {
        let bucket = listing(hash, below: false, epoch: epoch)
        records += bucket.records
        damaged += bucket.damaged
        if depth == hashes.count - 1, bucket.hasBelow {
          let below = listing(hash, below: true, epoch: epoch)
          records += below.records
          damaged += below.damaged
        }
      }
    }
    guard records.count > 1 || damaged.count > 1 else { return (records, damaged) }
    var seen = Set<String>()
    let unique = records.filter { seen.insert($0.id).inserted }.sorted { $0.id < $1.id }  // as the index gave them
    return (unique, Array(Set(damaged)).sorted { $0.name < $1.name })
  }

  /// The registry's generation, when nobody in the container presents anything at it; nil when someone does (or
  /// it cannot be told). Every registration and removal moves the generation on, so while it stays the same the
  /// answer holds (`isUnchanged(since:)`).
  func emptyGeneration() -> UInt64? {
    let overall = generation()
    let known = cache.withLock { $0.checkedAt == overall ? $0.wasEmpty : nil }
    if known == true { return overall }
    guard known == nil else { return nil }
    let empty = isEmpty()
    cache.withLock {
      $0.checkedAt = overall
      $0.wasEmpty = empty
    }
    return empty ? overall : nil
  }

  /// Whether no presenter was registered or removed since `generation()` (or `emptyGeneration()`) answered
  /// `generation`: then a lookup made at that generation still holds. Two loads of the mapped counters, no lock.
  func isUnchanged(since generation: UInt64) -> Bool { self.generation() == generation }

  /// Counter 0 plus the counters file's epoch (a restored counters file starts a new epoch): every registration and
  /// removal moves it on.
  func generation() -> UInt64 { counters.load(Self.generationCounter) &+ counters.epoch }

  /// Whether no presenter is registered: `presenters/` holds no directory (its link count is 2), or is missing.
  /// A failed look (EIO, EMFILE) is not "empty": the lookup lists the buckets instead — taken as empty, the
  /// coordinated access went on without asking the item's presenters, and the answer was cached until the next
  /// registration (found by the I/O-error loops).
  private func isEmpty() -> Bool {
    do {
      guard let status = try root.status(relative) else { return true }
      return status.linkCount == 2
    } catch {
      return false
    }
  }

  /// The listing of bucket `hash` (or of its `below`), from the cache while its slot's generation holds, else from
  /// its index while that holds (PresenterBucketIndex), else from the directory — and then the index is written.
  private func listing(_ hash: UInt64, below: Bool, epoch: UInt64) -> Bucket {
    let generation = counters.load(Self.slot(hash)) &+ epoch  // before the index or the directory is read
    let cached = cache.withLock { below ? $0.below[hash] : $0.buckets[hash] }
    if let cached, cached.generation == generation { return cached }
    let path = Self.bucketName(hash) + (below ? "/" + Self.belowDirectory : "")
    let known = cache.withLock { $0.decoded }
    var decoded: [String: Decoded] = [:]
    var bucket = Bucket(generation: generation)
    if let indexed = indexed(path, generation: generation, known: known, into: &decoded) {
      bucket = indexed
    } else if let fd = try? root.openDirectory(relative + "/" + path) {
      let names = (try? fd.entries()) ?? []
      fd.close()
      var files: [(name: String, bytes: [UInt8])] = []
      for (name, isDirectory) in names where !name.hasPrefix(".") {
        if isDirectory && name == Self.belowDirectory && !below {
          bucket.hasBelow = true
          continue
        }
        let key = path + "/" + name
        if let record = known[key] {
          bucket.records.append(record.record)
          files.append((name, record.bytes))
          continue
        }
        switch read(relative + "/" + path, name) {
        case .record(let record, let bytes):
          bucket.records.append(record)
          decoded[key] = Decoded(record: record, bytes: bytes)
          files.append((name, bytes))
        case .damaged(let damage): bucket.damaged.append(damage)
        case .gone: break
        }
      }
      if bucket.damaged.isEmpty { writeIndex(path, generation: generation, hasBelow: bucket.hasBelow, files) }
    }
    let made = bucket
    cache.withLock {
      $0.decoded.merge(decoded) { old, _ in old }
      if below { $0.below[hash] = made } else { $0.buckets[hash] = made }
    }
    return bucket
  }

  /// The listing `path` from its index, when the index holds at `generation` and every record in it decodes; nil
  /// otherwise (the caller lists the directory).
  private func indexed(
    _ path: String, generation: UInt64, known: [String: Decoded], into decoded: inout [String: Decoded]
  ) -> Bucket? {
    guard
      let bytes = try? root.readFile(PresenterBucketIndex.path(of: path), limit: PresenterBucketIndex.maxBytes).bytes,
      let contents = PresenterBucketIndex.decode(bytes, listing: path, generation: generation)
    else { return nil }
    var bucket = Bucket(generation: generation, hasBelow: contents.hasBelow)
    var found: [String: Decoded] = [:]
    for (name, recordBytes) in contents.records {
      let key = path + "/" + name
      if let record = known[key] {  // records are immutable: a name once decoded is that record
        bucket.records.append(record.record)
        continue
      }
      let bytes = Array(recordBytes)
      guard let record = try? PresenterRecord.decode(bytes, fileName: name) else { return nil }
      bucket.records.append(record)
      found[key] = Decoded(record: record, bytes: bytes)
    }
    decoded.merge(found) { old, _ in old }
    indexesRead.add(1, ordering: .relaxed)
    return bucket
  }

  /// Writes the index of listing `path` as of `generation` (the generation loaded before the directory was listed).
  /// A failure leaves the readers listing, as without an index.
  private func writeIndex(
    _ path: String, generation: UInt64, hasBelow: Bool, _ files: [(name: String, bytes: [UInt8])]
  ) {
    let bytes = PresenterBucketIndex.encode(listing: path, generation: generation, hasBelow: hasBelow, records: files)
    guard bytes.count <= PresenterBucketIndex.maxBytes else { return }
    let file = PresenterBucketIndex.path(of: path)
    do {
      try root.replaceFile(file, with: bytes, mode: fileMode)
    } catch  where error.errno == .noSuchFileOrDirectory {
      // The first index of the container (or it was removed): make the directory, once.
      try? root.makeDirectory(PresenterBucketIndex.directory, mode: directoryMode)
      _ = try? root.replaceFile(file, with: bytes, mode: fileMode)
    } catch {
      CoordinationSpace.logger.debug("presenter index '\(file)' not written: \(error)")
    }
  }

  private enum Read {
    case record(PresenterRecord, bytes: [UInt8])
    case damaged(DamagedRecord)
    case gone
  }

  /// Reads one record file. A damaged one is logged as an error each time its bucket is listed again (a listing is
  /// cached until a registration on its path).
  private func read(_ path: String, _ name: String) -> Read {
    filesRead.add(1, ordering: .relaxed)
    do {
      let bytes = try root.readFile(path + "/" + name, limit: PresenterRecord.maxBytes).bytes
      return .record(try PresenterRecord.decode(bytes, fileName: name), bytes: bytes)
    } catch let error as FileSystemError where error.errno == .noSuchFileOrDirectory {
      return .gone
    } catch {
      let bad = DamagedRecord(name: name, reason: "\(error)")
      CoordinationSpace.logger.error(
        """
        presenter record '\(directory)/\(path.dropFirst(relative.count + 1))/\(name)' is damaged (\(error)): its \
        presenter\(bad.process.map { " in process \($0.pid)" } ?? "") cannot be asked, so accesses of its item go on \
        without it, or fail under presenterTimeoutPolicy .fail; its process writes it again when it notices \
        (groupctl doctor names it)
        """)
      return .damaged(bad)
    }
  }

  /// Every valid record and every damaged file of the buckets (for `status`: a walk of every bucket, not for the
  /// hot path).
  func index() -> PresenterIndex {
    var records: [String: PresenterRecord] = [:]
    var damaged: [DamagedRecord] = []
    guard let names = try? root.entries(of: relative) else { return .empty }
    for (name, isDirectory) in names where isDirectory && name.utf8.count == 16 && UInt64(name, radix: 16) != nil {
      let bucket = relative + "/" + name
      guard let files = try? root.entries(of: bucket) else { continue }
      for (file, isDirectory) in files where !isDirectory && !file.hasPrefix(".") {
        switch read(bucket, file) {
        case .record(let record, _): records[record.id] = record
        case .damaged(let damage): damaged.append(damage)
        case .gone: break
        }
      }
    }
    return PresenterIndex(records: records.values.sorted { $0.id < $1.id }, damaged: damaged)
  }

  /// Every valid record (for `status`).
  func records() -> [PresenterRecord] { index().records }
}
