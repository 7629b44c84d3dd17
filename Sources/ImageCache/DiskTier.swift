import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The disk tier: `Library/Caches/<name>/`, shared by every process of the group. The file system is the only
/// index (no process keeps a list another could go stale against); entries follow `CacheEntryFormat`.
///
/// **Coherence.** `.coordination/caches/<name>.counters` (a `MappedCounters` file, its words: `CacheCounters`)
/// holds one generation per shard (256 shards by the first byte of the entry's hash). Every store and removal
/// changes the entry first (rename, unlink) and then increments its shard's generation; a reader reads the
/// generation *before* it reads the entry and keeps that stamp with what it caches in memory. A memory hit is valid
/// only while the stamp is current — one atomic load, no system call — so once a store or removal returned, no
/// process returns the old image. Removals nobody announced (`rm` of an entry, of the directory) reach each process
/// through inotify and bump a per-process generation of the shard (the whole tier when the directory goes).
///
/// **Trimming.** One process at a time (flock on the counters file, never waited for: a second trimmer skips),
/// while everyone keeps reading — a reader holding an entry open keeps its bytes after the unlink.
final class DiskTier: Sendable {
  static let logger = Logger(label: "GroupContainer.ImageCache")
  static let shardCount = CacheCounters.shardGenerations.count

  let name: String
  /// `Library/Caches/<name>`, relative to the container.
  let relativePath: String
  let container: GroupContainer
  private let root: ContainerDirectory
  private let fileMode: mode_t
  private let directoryMode: mode_t
  /// The cache directory, opened beneath the container; replaced when it was removed (`reopenIfRemoved`).
  private let descriptor: Atomic<Int32>
  /// The descriptors it owns (the directory and the trim lock, current and replaced): another thread may be using
  /// a replaced one, so they close at deinit.
  private let owned = Mutex<[DescriptorBox]>([])
  let counters: MappedCounters
  /// The counters file opened a second time, for the trimmer's flock; also tells (its link count) whether the
  /// counters file was removed with the container. Replaced when it was (`rebindCountersIfRemoved`).
  private let trimLockDescriptor: Atomic<Int32>
  private var trimLock: SystemFD {
    SystemFD.view(trimLockDescriptor.load(ordering: .acquiring), path: countersPath)
  }
  private var countersPath: String { root.path + "/" + Self.privateCaches + "/" + CacheCounters.fileName(of: name) }
  private static let privateCaches = CoordinationPaths.caches
  private let trimming = Mutex(false)
  /// Per-process generations: removals this process learnt of through inotify. Inline (one allocation with the tier);
  /// the count is CacheCounters' shard count, checked in `init`.
  private typealias LocalGenerations = InlineArray<256, Atomic<UInt64>>
  private let localGenerations = LocalGenerations { _ in Atomic(0) }
  private let watch = Mutex<Watcher.Token?>(nil)
  /// Entry files whose image checksum this process verified, by inode, with the change time and size they had:
  /// while the kernel's change time has not moved, the bytes are those verified, and a hit skips the checksum (it
  /// was most of a hit's cost beyond the read: 1.32× the raw read with it every time, 1.16× without). The kernel
  /// gives an inode whose times were queried a distinct time at its next change (multigrain timestamps, Linux 6.13
  /// and later); before that, an edit in the same clock tick as the verification went unseen until the next change.
  /// Bounded.
  private let verified = Mutex<[UInt64: (change: Int64, size: Int64)]>([:])
  private static let verifiedLimit = 4096

  struct Stamp: Equatable, Sendable {
    var epoch: UInt64
    var shared: UInt64
    var local: UInt64
  }

  init(name: String, container: GroupContainer) throws(ImageCacheError) {
    assert(LocalGenerations.count == Self.shardCount, "one local generation per shard")
    self.name = name
    self.container = container
    relativePath = "Library/Caches/" + name
    fileMode = container.sharing.fileMode
    directoryMode = container.sharing.directoryMode
    do { root = try container.directory() } catch { throw .container(error) }
    let root = root
    let fileMode = fileMode
    let directoryMode = directoryMode
    let relativePath = relativePath
    let (directory, counters, lock) = try Self.system { () throws(FileSystemError) in
      let directory = DescriptorBox(try Self.makeAndOpen(relativePath, in: root, mode: directoryMode))
      let files = try Self.openCounters(name, in: root, fileMode: fileMode, directoryMode: directoryMode)
      let lock = DescriptorBox(files.lock)
      return (directory, try MappedCounters(fd: files.mapping), lock)
    }
    descriptor = Atomic(directory.fd.rawValue)
    self.counters = counters
    trimLockDescriptor = Atomic(lock.fd.rawValue)
    owned.withLock { $0 = [directory, lock] }
    startWatching()
  }

  deinit {
    if let token = watch.withLock({ $0 }) { Watcher.shared.cancel(token) }
    // The descriptors (`owned`) close after this, with the tier.
  }

  /// The counters file opened twice (`openCounters`).
  private struct CounterFiles: ~Copyable {
    let mapping: SystemFD
    let lock: SystemFD
  }

  /// `.coordination/caches/<name>.counters`, opened twice: for the mapping and for the trimmer's flock.
  private static func openCounters(_ name: String, in root: ContainerDirectory, fileMode: mode_t, directoryMode: mode_t)
    throws(FileSystemError) -> CounterFiles
  {
    try root.makeDirectory(privateCaches, mode: directoryMode)
    let files = try root.openDirectory(privateCaches)
    let fd = try files.openOrCreate(
      CacheCounters.fileName(of: name), mode: fileMode, size: Int64(MappedCounters.fileSize))
    return CounterFiles(mapping: fd, lock: try files.open(CacheCounters.fileName(of: name), .readWrite))
  }

  private static func makeAndOpen(_ relative: String, in root: ContainerDirectory, mode: mode_t) throws(FileSystemError)
    -> SystemFD
  {
    try root.makeDirectory("Library", mode: mode)
    try root.makeDirectory("Library/Caches", mode: mode)
    try root.makeDirectory(relative, mode: mode)
    return try root.openDirectory(relative)
  }

  static func system<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(ImageCacheError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  var directory: SystemFD {
    SystemFD.view(descriptor.load(ordering: .acquiring), path: root.path + "/" + relativePath)
  }

  /// After `rm -rf` of the cache (or of `Library/Caches`): makes the directory again and resolves beneath the new
  /// one. Returns whether it did (the old descriptor named a removed directory).
  @discardableResult
  func reopenIfRemoved() -> Bool {
    guard let st = try? directory.status(), st.linkCount == 0 else { return false }
    do {
      let fresh = DescriptorBox(try Self.makeAndOpen(relativePath, in: root, mode: directoryMode))
      descriptor.store(fresh.fd.rawValue, ordering: .releasing)
      owned.withLock { $0.append(fresh) }
      Self.logger.info("the image cache '\(name)' was removed: made '\(relativePath)' again")
      rebindCountersIfRemoved()
      invalidateLocally()
      startWatching()
      return true
    } catch {
      Self.logger.error("the image cache '\(name)' was removed and cannot be made again: \(error)")
      return false
    }
  }

  /// After `rm -rf` of the whole container the counters file is gone too: other processes count in a new one, so
  /// this process maps the new one in place of the old (a new epoch: every stamp taken before is stale).
  private func rebindCountersIfRemoved() {
    guard let st = try? trimLock.status(), st.linkCount == 0 else { return }
    do throws(FileSystemError) {
      let files = try Self.openCounters(name, in: root, fileMode: fileMode, directoryMode: directoryMode)
      let lock = DescriptorBox(files.lock)
      try counters.rebind(to: files.mapping)
      trimLockDescriptor.store(lock.fd.rawValue, ordering: .releasing)
      owned.withLock { $0.append(lock) }
      Self.logger.info("the image cache '\(name)' maps its new counters file (the container was removed)")
    } catch {
      Self.logger.error("the image cache '\(name)' cannot map its new counters file: \(error)")
    }
  }

  // MARK: Generations

  func stamp(shard: Int) -> Stamp {
    Stamp(
      epoch: counters.epoch, shared: counters.load(CacheCounters.generation(ofShard: shard)),
      local: localGenerations[shard].load(ordering: .acquiring))
  }

  /// Whether a stamp taken earlier is still current: a few atomic loads, no system call.
  @inline(__always)
  func isCurrent(_ stamp: Stamp, shard: Int) -> Bool {
    counters.load(CacheCounters.generation(ofShard: shard)) == stamp.shared
      && localGenerations[shard].load(ordering: .acquiring) == stamp.local
      && counters.epoch == stamp.epoch
  }

  private func announce(shards: some Sequence<Int>) {
    for shard in Set(shards) { counters.increment(CacheCounters.generation(ofShard: shard)) }
  }

  func invalidateLocally(shard: Int? = nil) {
    if let shard {
      localGenerations[shard].wrappingAdd(1, ordering: .releasing)
    } else {
      for shard in localGenerations.indices { localGenerations[shard].wrappingAdd(1, ordering: .releasing) }
    }
  }

  private func adjust(bytes: Int, count: Int) {
    counters.atomic(CacheCounters.bytes).wrappingIncrement(by: UInt64(bitPattern: Int64(bytes)), ordering: .relaxed)
    counters.atomic(CacheCounters.count).wrappingIncrement(by: UInt64(bitPattern: Int64(count)), ordering: .relaxed)
  }

  /// Bytes and entries on disk as last counted (exact after a trim, adjusted by every store and removal since).
  var approximateUsage: (bytes: Int, count: Int) {
    let bytes = Int64(bitPattern: counters.load(CacheCounters.bytes))
    let count = Int64(bitPattern: counters.load(CacheCounters.count))
    return (Int(max(0, bytes)), Int(max(0, count)))
  }

  // MARK: Outside removals

  /// Watches the directory for removals nobody announced. Without inotify (see `Watcher.unavailableReason`) such
  /// removals are noticed only by the next read from disk.
  private func startWatching() {
    let path = root.path + "/" + relativePath
    let mask = Watcher.delete | Watcher.movedFrom | Watcher.deleteSelf | Watcher.moveSelf
    do {
      let token = try Watcher.shared.watch(path, mask: mask) { [weak self] event in self?.removed(event) }
      let old = watch.withLock { slot in
        defer { slot = token }
        return slot
      }
      if let old { Watcher.shared.cancel(old) }
    } catch {
      Self.logger.debug("not watching '\(path)' for outside removals: \(error)")
    }
  }

  private func removed(_ event: Watcher.Event) {
    if event.mask & (Watcher.deleteSelf | Watcher.moveSelf | Watcher.overflow | Watcher.ignored) != 0
      || event.name.isEmpty
    {
      invalidateLocally()
    } else if CacheEntryFormat.isEntryName(event.name) {
      invalidateLocally(shard: CacheEntryFormat.shard(ofName: event.name))
    }
  }

  // MARK: Entries

  struct Found {
    var image: CachedImage
    var header: CacheEntryFormat.Header
    var modified: Int64
  }

  enum Lookup {
    case found(Found)
    case missing
  }

  /// Reads the entry for `key`. A missing, expired, foreign (a collision) or corrupt entry is a miss; corrupt and
  /// expired ones are removed (logged). Errors other than "not there" are thrown.
  func read(key: String, name: String, now: Int64, maximumBytes: Int) throws(ImageCacheError) -> Lookup {
    var failure: FileSystemError?
    let opened: SystemFD?
    do { opened = try directory.open(name, .readOnly) } catch {
      failure = error
      opened = nil
    }
    guard let fd = opened else {
      let error = failure!
      switch error.errno {
      case .noSuchFileOrDirectory:
        if reopenIfRemoved() { return try read(key: key, name: name, now: now, maximumBytes: maximumBytes) }
        return .missing
      case .tooManySymbolicLinkLevels, .noSuchAddressOrDevice:
        discard(name, because: "it is not a regular file (\(error.errno))")
        return .missing
      default:
        throw .system(error)
      }
    }
    let st: FileStatus
    do { st = try fd.status() } catch { throw .system(error) }
    guard st.kind == .regular else {
      discard(name, because: "it is not a regular file")
      return .missing
    }
    let limit = CacheEntryFormat.headerSize + CacheEntryFormat.maximumKeyBytes + maximumBytes
    guard st.size >= Int64(CacheEntryFormat.headerSize), st.size <= Int64(limit) else {
      discard(name, because: "its size \(st.size) is not that of an entry")
      return .missing
    }
    let size = Int(st.size)
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
    var handedOver = false
    defer { if !handedOver { buffer.deallocate() } }
    let got: Int
    do { got = try fd.read(into: buffer, at: 0) } catch { throw .system(error) }
    let bytes = UnsafeRawBufferPointer(buffer)
    guard got == size else {
      discard(name, because: "it changed size while read")
      return .missing
    }
    let header: CacheEntryFormat.Header
    switch CacheEntryFormat.decodeHeader(bytes) {
    case .success(let decoded): header = decoded
    case .failure(let corruption):
      discard(name, because: corruption.isPreviousFormat ? nil : corruption.description)
      return .missing
    }
    guard header.fileSize == size, CacheEntryFormat.checksumMatches(bytes, keyLength: header.keyLength) else {
      discard(name, because: "its header does not match its size or its checksum")
      return .missing
    }
    // Another key with the same hash: its entry, not ours.
    guard CacheEntryFormat.storedKey(bytes, keyLength: header.keyLength, equals: key) else { return .missing }
    if header.isExpired(now: now) {
      discard(name, because: nil)
      return .missing
    }
    let start = CacheEntryFormat.headerSize + header.keyLength
    // The entry's image header is parsed again: a file edited in place by someone else is caught here.
    let image = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + header.imageLength)])
    // Every byte of the image: an edit the header parse cannot see (a PNG's text chunk) is a miss too — checked
    // unless this inode was verified with this change time, and it still has it after the read (an edit during
    // the read moves it).
    let known = verified.withLock { $0[st.inode].map { $0.change == st.changeNanoseconds && $0.size == st.size } }
    let unchanged = known == true && (try? fd.status())?.changeNanoseconds == st.changeNanoseconds
    if !unchanged {
      guard CacheEntryFormat.imageMatches(image, header) else {
        discard(name, because: "its image does not match its checksum (edited in place?)")
        return .missing
      }
      verified.withLock {
        if $0.count >= Self.verifiedLimit { $0.removeAll(keepingCapacity: true) }
        $0[st.inode] = (st.changeNanoseconds, st.size)
      }
    }
    guard let info = try? ImageHeaders.parse(bytes: image), info == header.info else {
      discard(name, because: "its image does not match its header")
      return .missing
    }
    handedOver = true
    let data = Data(
      bytesNoCopy: buffer.baseAddress! + start, count: header.imageLength,
      deallocator: .custom { _, _ in buffer.deallocate() })
    return .found(
      Found(image: CachedImage(data: data, info: info), header: header, modified: st.modificationNanoseconds))
  }

  /// Removes a corrupt or expired entry (it is ours: the name is an entry's).
  private func discard(_ name: String, because reason: String?) {
    if let reason {
      Self.logger.error("removing the image cache entry '\(directory.path)/\(name)': \(reason)")
    }
    _ = try? remove(name: name)
  }

  /// Publishes `image` as the entry of `key`. Returns the shard generation before and after: equal + 1 means no
  /// other store or removal of the shard came between, so the caller may keep the image in memory under `after`.
  func write(key: String, name: String, image: CachedImage, storedAt: Int64, expiresAt: Int64)
    throws(ImageCacheError) -> (before: Stamp, after: UInt64)
  {
    let shard = CacheEntryFormat.shard(ofName: name)
    let imageChecksum = image.data.withUnsafeBytes { StableHash.checksum64($0) }
    let header = CacheEntryFormat.encodeHeader(
      key: key, info: image.info, imageLength: image.data.count, storedAt: storedAt, expiresAt: expiresAt,
      imageChecksum: imageChecksum)
    var attempt = 0
    while true {
      let before = stamp(shard: shard)
      let directory = directory
      do throws(FileSystemError) {
        let old = try directory.status(of: name)
        // The temp file is made in the container's staging directory (next to the entry when there is none):
        // the store is then one event (IN_MOVED_TO) for whoever watches the cache directory — every process of
        // the cache does — instead of four. The container's sweep removes staged temp files of dead writers.
        try AtomicReplace.write(
          parts: 2, in: directory, name: name, mode: fileMode, staging: root.stagingDirectory()
        ) {
          (fd, part) throws(FileSystemError) in
          if part == 0 {
            try Self.write(header, to: fd)
          } else {
            try Self.write(image.data, to: fd)
          }
        }
        let after = counters.increment(CacheCounters.generation(ofShard: shard))
        let oldSize = old.map { Int($0.size) } ?? 0
        adjust(bytes: header.count + image.data.count - oldSize, count: old == nil ? 1 : 0)
        return (before, after)
      } catch {
        attempt += 1
        if error.errno == .noSuchFileOrDirectory, attempt == 1, reopenIfRemoved() { continue }
        throw .system(error)
      }
    }
  }

  /// Writes from the caller's buffer (`Data` and `Array` take untyped-throwing closures, hence the detour).
  private static func write(_ data: some ContiguousBytes, to fd: borrowing SystemFD) throws(FileSystemError) {
    var failure: FileSystemError?
    data.withUnsafeBytes { raw in
      do throws(FileSystemError) { try fd.writeAll(raw) } catch { failure = error }
    }
    if let failure { throw failure }
  }

  /// Removes the entry `name`; returns whether one was there.
  @discardableResult
  func remove(name: String) throws(ImageCacheError) -> Bool {
    let directory = directory
    do throws(FileSystemError) {
      guard let old = try directory.status(of: name) else { return false }
      try directory.removeFile(name)
      counters.increment(CacheCounters.generation(ofShard: CacheEntryFormat.shard(ofName: name)))
      adjust(bytes: -Int(old.size), count: -1)
      return true
    } catch {
      throw .system(error)
    }
  }

  /// Sets the entry's last use to now (the coarse recency trimming orders by).
  func touch(name: String) {
    do { try directory.touchModificationTime(name) } catch {
      Self.logger.debug("cannot record the use of '\(name)': \(error)")
    }
  }

  // MARK: Scanning and trimming

  struct Scanned {
    var name: String
    var size: Int
    var modified: Int64
    var inode: UInt64
    /// nil when the entry's header could not be read or is corrupt.
    var header: CacheEntryFormat.Header?
    var key: String?
  }

  /// Every entry on disk, with its header and key when `headers` (one open and read each).
  func scan(headers: Bool) throws(ImageCacheError) -> [Scanned] {
    reopenIfRemoved()
    let directory = directory
    let names: [(name: String, isDirectory: Bool)]
    do { names = try directory.entries() } catch { throw .system(error) }
    var result: [Scanned] = []
    result.reserveCapacity(names.count)
    for (name, isDirectory) in names where !isDirectory && CacheEntryFormat.isEntryName(name) {
      guard let st = try? directory.status(of: name) else { continue }
      var entry = Scanned(
        name: name, size: Int(st.size), modified: st.modificationNanoseconds, inode: st.inode, header: nil, key: nil)
      if headers, st.kind == .regular { (entry.header, entry.key) = readHeader(name, in: directory) }
      result.append(entry)
    }
    return result
  }

  /// One `pread` covers the header and keys up to 456 bytes (URLs mostly are); a longer key takes a second.
  private func readHeader(_ name: String, in directory: borrowing SystemFD) -> (CacheEntryFormat.Header?, String?) {
    guard let fd = try? directory.open(name, .readOnly) else { return (nil, nil) }
    guard var bytes = try? fd.read(at: 0, count: CacheEntryFormat.headerSize + 456),
      case .success(let header) = bytes.withUnsafeBytes({ CacheEntryFormat.decodeHeader($0) })
    else { return (nil, nil) }
    let keyEnd = CacheEntryFormat.headerSize + header.keyLength
    if bytes.count < keyEnd {
      guard let whole = try? fd.read(at: 0, count: keyEnd) else { return (nil, nil) }
      bytes = whole
    }
    guard bytes.withUnsafeBytes({ CacheEntryFormat.checksumMatches($0, keyLength: header.keyLength) }) else {
      return (nil, nil)
    }
    return (header, String(decoding: bytes[CacheEntryFormat.headerSize..<keyEnd], as: UTF8.self))
  }

  struct TrimReport: Sendable, Equatable {
    var removedEntries = 0
    var removedBytes = 0
    var remainingEntries = 0
    var remainingBytes = 0
  }

  /// Removes expired, corrupt and too-old entries, then least recently used ones until at most `target` bytes
  /// remain — when `force` or when more than `limit` bytes are there. Returns nil when another process (or thread)
  /// is trimming: it does the work, nobody waits for it.
  /// How long a forced trim waits for one under way (never for a stopped process holding the trim lock).
  static let forcedTrimWait: UInt64 = 5_000_000_000

  func trim(limit: Int, target: Int, maximumAge: Int64?, now: Int64, force: Bool, shrinkTo fraction: Double? = nil)
    throws(ImageCacheError) -> TrimReport?
  {
    // A trim under way (here: a memory warning's, a store's; or in another process) makes this one unneeded —
    // unless it is `force`d (a full disk: the store that asks writes again after it), which waits for it a while.
    // A full disk during a make test under memory pressure failed its store: its trim found the warning's running.
    let deadline = MonotonicClock.nanoseconds() &+ (force ? Self.forcedTrimWait : 0)
    func retry() -> Bool {
      guard MonotonicClock.nanoseconds() < deadline else { return false }
      MonotonicClock.sleep(nanoseconds: 1_000_000)
      return true
    }
    while !trimming.withLock({ busy in
      defer { busy = true }
      return !busy
    }) {
      guard retry() else { return nil }
    }
    defer { trimming.withLock { $0 = false } }
    while true {
      let locked: Bool
      do { locked = try trimLock.lock(.exclusive, nonBlocking: true) } catch { throw .system(error) }
      if locked { break }
      guard retry() else { return nil }
    }
    defer { trimLock.unlock() }

    sweepTemporaries()
    // The usage counters are corrected by difference, not overwritten: stores that land during the scan keep
    // their share (at worst counted twice: a later trim sets it right).
    let countedBefore = (bytes: counters.load(CacheCounters.bytes), count: counters.load(CacheCounters.count))
    var entries = try scan(headers: true)
    FaultPoint.pause("imagecache.trim.scanned")  // a test stores more here (stores it will not see)
    var report = TrimReport()
    var touched: [Int] = []
    let directory = directory
    /// Whether the entry is gone. One not removed (replaced since the scan, or the removal failed) still counts:
    /// the usage counters are set from what remains, and counting it gone would leave them short of the disk
    /// (then no later store would find the cache over its limit).
    func drop(_ entry: Scanned) -> Bool {
      // Only the file scanned: a store that replaced it since is newer than this trim's view.
      guard let st = try? directory.status(of: entry.name), st.inode == entry.inode else { return false }
      guard (try? directory.removeFile(entry.name)) != nil else { return false }
      report.removedEntries += 1
      report.removedBytes += entry.size
      touched.append(CacheEntryFormat.shard(ofName: entry.name))
      return true
    }
    entries.removeAll { entry in
      let stale =
        entry.header == nil || entry.header!.isExpired(now: now)
        || maximumAge.map { now - entry.modified > $0 } ?? false
      return stale && drop(entry)
    }
    var total = entries.reduce(0) { $0 + $1.size }
    // A full disk: the limit was never reached, yet room is needed — shrink relative to what is there.
    let target = fraction.map { min(target, Int(Double(total) * $0)) } ?? target
    if force || total > limit {
      entries.sort { $0.modified < $1.modified }
      var kept: [Scanned] = []
      for entry in entries {
        if total > target, drop(entry) { total -= entry.size } else { kept.append(entry) }
      }
      entries = kept
    }
    announce(shards: touched)
    report.remainingEntries = entries.count
    report.remainingBytes = total
    counters.atomic(CacheCounters.bytes).wrappingIncrement(by: UInt64(total) &- countedBefore.bytes, ordering: .relaxed)
    counters.atomic(CacheCounters.count).wrappingIncrement(
      by: UInt64(entries.count) &- countedBefore.count, ordering: .relaxed)
    counters.increment(CacheCounters.trims)
    if report.removedEntries > 0 {
      Self.logger.info(
        "trimmed the image cache '\(name)': removed \(report.removedEntries) entries (\(report.removedBytes) bytes), \(report.remainingEntries) remain (\(report.remainingBytes) bytes)"
      )
    }
    return report
  }

  /// Temp files of stores whose process died before the rename: in the staging directory, where stores make them,
  /// and next to the entries (a store without a staging directory). The staging directory is the whole
  /// container's; the verdict is the container sweep's, so what is removed there would never be renamed.
  private func sweepTemporaries() {
    func sweep(_ place: borrowing SystemFD) {
      for (name, isDirectory) in (try? place.entries()) ?? [] where !isDirectory {
        if let writer = AtomicReplace.writer(ofTemporary: name), container.temporaryWriterIsDead(writer) {
          try? place.removeFile(name)
        }
      }
    }
    sweep(directory)
    if let staging = root.stagingDirectory() { sweep(staging) }
  }

  /// Removes every entry. Returns how many were removed.
  func removeAll() throws(ImageCacheError) -> Int {
    let entries = try scan(headers: false)
    let directory = directory
    var removed = 0
    for entry in entries where (try? directory.removeFile(entry.name)) != nil { removed += 1 }
    announce(shards: 0..<Self.shardCount)
    counters.store(CacheCounters.bytes, 0)
    counters.store(CacheCounters.count, 0)
    return removed
  }
}
