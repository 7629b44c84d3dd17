import Dispatch
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import MemoryWarnings
import Synchronization
import SystemLayer

/// Images shared by every process of a group: a memory tier in each process over one disk tier in
/// `Library/Caches/<name>/` — what an app and its widget need to show the same pictures without downloading them
/// twice.
///
/// ```swift
/// let cache = try SharedImageCache(name: "thumbnails", container: container)
/// try cache.store(data, forKey: url.absoluteString, expiresAfter: .seconds(86_400))
/// if let image = try cache.image(forKey: url.absoluteString) { show(image.data) }
/// ```
///
/// Once `store` or `removeImage` returned in one process, no process returns the old image for that key — from disk
/// or from its memory tier (a memory hit checks a mapped generation: no system call). See `DiskTier` for the
/// protocol and the ImageCache article for the limits.
public final class SharedImageCache: Sendable {
  /// Limits of both tiers.
  public struct Limits: Sendable, Hashable {
    /// Bytes on disk (entries' files) above which a trim runs.
    public var diskBytes: Int
    /// The fraction of `diskBytes` a trim goes down to (least recently used out first).
    public var lowWatermark: Double
    /// Entries not used for this long are removed by the next trim (nil: no age limit).
    public var maximumAge: Duration?
    /// Total cost (bytes held) of this process's memory tier; nil derives it from the process's memory limit.
    public var memoryCost: Int?
    /// Entries in this process's memory tier (0: no count limit).
    public var memoryCount: Int
    /// The largest image accepted.
    public var maximumImageBytes: Int
    /// How coarsely an entry's last use is recorded on disk: at most one `utimensat` per entry and process per
    /// granularity, so a hit does not cost a write.
    public var recencyGranularity: Duration

    /// Limits; the defaults: 256 MiB on disk trimmed to 80 %, entries kept 7 days, the memory tier at
    /// ``SharedImageCache/defaultMemoryCost``, images up to 64 MiB.
    public init(
      diskBytes: Int = 256 << 20, lowWatermark: Double = 0.8, maximumAge: Duration? = .seconds(7 * 86_400),
      memoryCost: Int? = nil, memoryCount: Int = 0, maximumImageBytes: Int = 64 << 20,
      recencyGranularity: Duration = .seconds(60)
    ) {
      self.diskBytes = diskBytes
      self.lowWatermark = lowWatermark
      self.maximumAge = maximumAge
      self.memoryCost = memoryCost
      self.memoryCount = memoryCount
      self.maximumImageBytes = maximumImageBytes
      self.recencyGranularity = recencyGranularity
    }
  }

  /// One entry as `entries()` lists it.
  public struct Entry: Sendable, Hashable {
    /// The key the image was stored under.
    public var key: String
    /// What the image's headers say.
    public var info: ImageInfo
    /// Bytes of the image (the entry's file also holds the key and a 56-byte header).
    public var bytes: Int
    /// When it was stored.
    public var storedAt: Date
    /// The last use, as coarsely as `Limits.recencyGranularity`.
    public var lastUsed: Date
    /// When it expires; nil: never (until trimmed).
    public var expiresAt: Date?
  }

  /// What a trim did.
  public struct TrimReport: Sendable, Hashable {
    /// Entries removed.
    public var removedEntries: Int
    /// Bytes removed.
    public var removedBytes: Int
    /// Entries left.
    public var remainingEntries: Int
    /// Bytes left.
    public var remainingBytes: Int
  }

  /// The cache's size now, and this process's lookups.
  public struct Statistics: Sendable, Hashable {
    /// Entries on disk (the whole group's).
    public var diskEntries: Int
    /// Bytes on disk.
    public var diskBytes: Int
    /// Images in this process's memory tier.
    public var memoryEntries: Int
    /// Their cost, in bytes.
    public var memoryCost: Int
    /// This process's lookups since the cache was made.
    public var memoryHits: Int
    /// Lookups answered from disk.
    public var diskHits: Int
    /// Lookups that found nothing.
    public var misses: Int
  }

  /// A key compared and hashed by its UTF-8 bytes: Swift's `String` equality calls "café" in NFC and NFD equal,
  /// yet they are two keys with two entries on disk (TRAPS: key tables by bytes).
  struct ByteKey: Hashable, Sendable {
    let string: String
    init(_ string: String) { self.string = string }

    /// Compared in place (`memcmp`): `utf8.elementsEqual` walked the view's indices and was half of a memory hit
    /// (copies of the strings for `withUTF8` cost a retain and release each).
    static func == (lhs: Self, rhs: Self) -> Bool {
      let equal = lhs.string.utf8.withContiguousStorageIfAvailable { l in
        rhs.string.utf8.withContiguousStorageIfAvailable { r in
          l.count == r.count && RawMemory.equal(l.baseAddress, r.baseAddress, count: l.count)
        }
      }
      return equal.flatMap { $0 } ?? lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    func hash(into hasher: inout Hasher) {
      let hashed: Void? = string.utf8.withContiguousStorageIfAvailable {
        hasher.combine(bytes: UnsafeRawBufferPointer($0))
      }
      if hashed == nil {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
      }
    }
  }

  /// An image in the memory tier, with the stamp that says whether it is still current.
  final class MemoryEntry: Sendable {
    let image: CachedImage
    let name: String
    let shard: Int
    let stamp: DiskTier.Stamp
    let expiresAt: Int64
    /// When this process last recorded the entry's use on disk.
    let recorded: Atomic<Int64>
    /// What an `ImageDecoder` made of the image, and its cost (counted with the bytes).
    let decoded: (any Sendable)?
    let decodedCost: Int

    init(
      image: CachedImage, name: String, shard: Int, stamp: DiskTier.Stamp, expiresAt: Int64, recorded: Int64,
      decoded: (any Sendable)? = nil, decodedCost: Int = 0
    ) {
      self.image = image
      self.name = name
      self.shard = shard
      self.stamp = stamp
      self.expiresAt = expiresAt
      self.recorded = Atomic(recorded)
      self.decoded = decoded
      self.decodedCost = decodedCost
    }

    var cost: Int { image.data.count + decodedCost }

    func with<D: Sendable>(decoded: D, cost: Int) -> MemoryEntry {
      MemoryEntry(
        image: image, name: name, shard: shard, stamp: stamp, expiresAt: expiresAt,
        recorded: recorded.load(ordering: .relaxed), decoded: decoded, decodedCost: cost)
    }
  }

  static let logger = Logger(label: "GroupContainer.ImageCache")

  /// The memory tier's cost limit when `Limits.memoryCost` is nil: an eighth of what the process may use
  /// (`MemoryPressure.memoryLimit` = min(budget, cgroup limit, RAM) — never the host's RAM alone), at most
  /// 256 MiB. A widget with a 32 MB budget keeps 4 MB of images in memory.
  public static var defaultMemoryCost: Int { min(256 << 20, max(1 << 20, MemoryPressure.shared.memoryLimit / 8)) }

  /// The cache's name: its directory is `Library/Caches/<name>/`.
  public let name: String
  /// The container the cache lives in.
  public let container: GroupContainer
  /// The limits it was made with.
  public let limits: Limits
  let disk: DiskTier
  let memory: MemoryCache<ByteKey, MemoryEntry>
  private let work: DispatchQueue
  private let trimScheduled = Atomic(false)
  private let memoryHits = Atomic(0)
  private let diskHits = Atomic(0)
  private let misses = Atomic(0)
  /// `limits.recencyGranularity` in nanoseconds, worked out once: a memory hit compares with it.
  private let granularity: Int64
  /// The low-memory policy's hold on this cache: memory warnings trim the memory tier, low disk space the disk.
  private let registrations: [MemoryWarningRegistration]

  /// Opens (creating when needed) the cache `name` of `container`.
  /// - Throws: ``ImageCacheError/invalidName(_:rule:)`` for a name that is not one directory name.
  public init(name: String = "images", container: GroupContainer, limits: Limits = Limits()) throws(ImageCacheError) {
    try Self.validate(name: name)
    self.name = name
    self.container = container
    self.limits = limits
    granularity = Self.nanoseconds(limits.recencyGranularity)
    disk = try DiskTier(name: name, container: container)
    let memory = MemoryCache<ByteKey, MemoryEntry>(
      totalCostLimit: limits.memoryCost ?? Self.defaultMemoryCost, countLimit: limits.memoryCount)
    self.memory = memory
    work = DispatchQueue(label: "GroupContainer.ImageCache.\(name)")
    // The policy (MemoryWarnings): on warning the tier keeps `warningTrimFraction` of its limit, on critical
    // nothing; levels sent to the group (`groupctl cache pressure`) count too. The handlers hold the tiers, not
    // the cache: a cache that is gone takes its registrations with it (deinit).
    let disk = disk
    let diskLimits = limits
    registrations = [
      MemoryPressure.shared.onMemoryWarning(name: "image cache '\(name)'", container: container) { level in
        Self.trim(memory, toFraction: level == .critical ? 0 : MemoryPressure.warningTrimFraction)
      },
      MemoryPressure.shared.onLowDiskSpace(name: "image cache '\(name)'", directory: container.cachesURL) { _ in
        let report = try? disk.trim(
          limit: 0, target: Int(Double(diskLimits.diskBytes) * diskLimits.lowWatermark), maximumAge: nil,
          now: Self.now(), force: true, shrinkTo: diskLimits.lowWatermark)
        return report?.removedBytes ?? 0
      },
    ]
  }

  deinit {
    for registration in registrations { registration.cancel() }
  }

  /// The name rule: one directory name of 1–100 bytes, not starting with `.`, without `/` or NUL.
  public static func validate(name: String) throws(ImageCacheError) {
    let bytes = Array(name.utf8)
    guard !bytes.isEmpty, bytes.count <= 100 else { throw .invalidName(name, rule: "1 to 100 bytes") }
    guard bytes.first != UInt8(ascii: "."), !bytes.contains(UInt8(ascii: "/")), !bytes.contains(0) else {
      throw .invalidName(name, rule: "one directory name: no '/', no NUL, not starting with '.'")
    }
  }

  /// Wall-clock nanoseconds from the coarse clock (up to one kernel tick, 1–10 ms, behind): expiry and recency are
  /// kept at a granularity of seconds, and the precise clock (through `Date`) cost several times as much per hit.
  static func now() -> Int64 { RealtimeClock.coarseNanoseconds() }

  // MARK: Storing

  /// Stores `data` — a PNG, JPEG, GIF or WebP, checked by its headers — as the image of `key`, replacing any.
  /// Published atomically: other processes see the old image or this one, never a part, also if this process is
  /// killed. Returns the image as the cache holds it.
  @discardableResult
  public func store(_ data: Data, forKey key: String, expiresAfter: Duration? = nil) throws(ImageCacheError)
    -> CachedImage
  {
    let image = try CachedImage(data: data)
    try store(image, forKey: key, expiresAfter: expiresAfter)
    return image
  }

  /// Stores an image already checked.
  public func store(_ image: CachedImage, forKey key: String, expiresAfter: Duration? = nil) throws(ImageCacheError) {
    guard image.data.count <= limits.maximumImageBytes else {
      throw .tooLarge(bytes: image.data.count, limit: limits.maximumImageBytes)
    }
    guard key.utf8.count <= CacheEntryFormat.maximumKeyBytes else {
      throw .invalidKey(bytes: key.utf8.count, limit: CacheEntryFormat.maximumKeyBytes)
    }
    let name = CacheEntryFormat.fileName(forKey: key)
    let shard = CacheEntryFormat.shard(ofName: name)
    let now = Self.now()
    let expiresAt = expiresAfter.map { now + Self.nanoseconds($0) } ?? 0
    let written: (before: DiskTier.Stamp, after: UInt64)
    do {
      written = try disk.write(key: key, name: name, image: image, storedAt: now, expiresAt: expiresAt)
    } catch {
      // A full disk or quota (EDQUOT failed the store outright: found by the I/O-error loops): make room as iOS
      // purges Caches, then try once more.
      guard let errno = error.fileSystemError?.errno, errno == .noSpace || errno == .diskQuotaExceeded else {
        throw error
      }
      Self.logger.warning("no space left for the image cache '\(self.name)': trimming to its low watermark")
      _ = try? disk.trim(
        limit: 0, target: lowWatermarkBytes, maximumAge: maximumAge, now: now, force: true,
        shrinkTo: limits.lowWatermark)
      written = try disk.write(key: key, name: name, image: image, storedAt: now, expiresAt: expiresAt)
    }
    // Kept in memory only if no other store or removal of the shard came between: otherwise the disk may hold
    // another process's image for this key, and the next lookup reads it.
    if written.after == written.before.shared &+ 1 {
      var stamp = written.before
      stamp.shared = written.after
      let entry = MemoryEntry(image: image, name: name, shard: shard, stamp: stamp, expiresAt: expiresAt, recorded: now)
      memory.setObject(entry, forKey: ByteKey(key), cost: image.data.count)
    } else {
      memory.removeObject(forKey: ByteKey(key))
    }
    trimIfOverLimit()
  }

  /// A store that leaves the disk over its limit trims before it returns, so the cache is within its limit before
  /// the process can exit: a short-lived process (`groupctl cache store`) exited with its trim still queued, and
  /// 95 such stores of 3 MB left 305 MB in a 256 MiB cache. The trim goes down to the low watermark, so the stores
  /// after it do not pay again soon. When another trim holds the cache (this process's or another's), that one does
  /// the work and this process looks again later (`scheduleTrimIfNeeded`), as it does when stores raced past it.
  private func trimIfOverLimit() {
    guard disk.approximateUsage.bytes > limits.diskBytes else { return }
    let report: TrimReport?
    do { report = try trim() } catch {
      Self.logger.error("trimming the image cache '\(name)' failed: \(error)")
      return
    }
    if report.map({ $0.remainingBytes > limits.diskBytes }) ?? true { scheduleTrimIfNeeded() }
  }

  // MARK: Reading

  /// The image of `key`: from this process's memory when it is still current, else from disk; nil on a miss
  /// (never stored, removed, expired, or its entry was damaged — which is logged and removed).
  public func image(forKey key: String) throws(ImageCacheError) -> CachedImage? {
    if let image = memoryImage(forKey: key) { return image }
    return try diskImage(forKey: key)
  }

  /// The image of `key` decoded by `decoder`, kept decoded in this process's memory tier at the cost the decoder
  /// reports (plus the bytes): a later call returns the same decoded value without decoding again, while the
  /// image is current. nil on a miss; the decoder's errors are thrown as they are.
  public func decodedImage<D: ImageDecoder>(forKey key: String, using decoder: D) throws -> D.Decoded? {
    if memoryEntry(forKey: key) == nil { _ = try diskImage(forKey: key) }
    guard let entry = memoryEntry(forKey: key) else {
      // Not kept in memory (larger than the tier): decode what the disk gives, every time.
      return try diskImage(forKey: key).map { try decoder.decode($0) }
    }
    if let decoded = entry.decoded as? D.Decoded { return decoded }
    let decoded = try decoder.decode(entry.image)
    let cost = max(0, decoder.cost(of: decoded))
    let replacement = entry.with(decoded: decoded, cost: cost)
    memory.setObject(replacement, forKey: ByteKey(key), cost: replacement.cost)
    return decoded
  }

  /// The memory tier alone: no system call on a hit (one per entry and `recencyGranularity` to record its use).
  func memoryImage(forKey key: String) -> CachedImage? {
    memoryEntry(forKey: key)?.image
  }

  private func memoryEntry(forKey key: String) -> MemoryEntry? {
    guard let entry = memory.object(forKey: ByteKey(key)) else { return nil }
    guard disk.isCurrent(entry.stamp, shard: entry.shard) else {
      memory.removeObject(forKey: ByteKey(key))
      return nil
    }
    let now = Self.now()
    if entry.expiresAt != 0 && entry.expiresAt <= now {
      memory.removeObject(forKey: ByteKey(key))
      return nil
    }
    let recorded = entry.recorded.load(ordering: .relaxed)
    if now - recorded > granularity,
      entry.recorded.compareExchange(expected: recorded, desired: now, ordering: .relaxed).exchanged
    {
      disk.touch(name: entry.name)
    }
    memoryHits.wrappingAdd(1, ordering: .relaxed)
    return entry
  }

  func diskImage(forKey key: String) throws(ImageCacheError) -> CachedImage? {
    let name = CacheEntryFormat.fileName(forKey: key)
    let shard = CacheEntryFormat.shard(ofName: name)
    // The stamp is taken before the read: a store that lands after it makes the next memory hit read again.
    let stamp = disk.stamp(shard: shard)
    let now = Self.now()
    switch try disk.read(key: key, name: name, now: now, maximumBytes: limits.maximumImageBytes) {
    case .missing:
      memory.removeObject(forKey: ByteKey(key))
      misses.wrappingAdd(1, ordering: .relaxed)
      return nil
    case .found(let found):
      if now - found.modified > granularity { disk.touch(name: name) }
      let entry = MemoryEntry(
        image: found.image, name: name, shard: shard, stamp: stamp, expiresAt: found.header.expiresAt, recorded: now)
      memory.setObject(entry, forKey: ByteKey(key), cost: found.image.data.count)
      diskHits.wrappingAdd(1, ordering: .relaxed)
      return found.image
    }
  }

  /// Whether an image of `key` is cached (in memory, or on disk and not expired).
  public func contains(_ key: String) -> Bool {
    if memoryImage(forKey: key) != nil { return true }
    return (try? diskImage(forKey: key)) != nil
  }

  // MARK: Removing

  /// Removes the image of `key` from disk and from every process's memory tier.
  public func removeImage(forKey key: String) throws(ImageCacheError) {
    try disk.remove(name: CacheEntryFormat.fileName(forKey: key))
    memory.removeObject(forKey: ByteKey(key))
  }

  /// Removes every image, on disk and in every process's memory tier.
  public func removeAll() throws(ImageCacheError) {
    _ = try disk.removeAll()
    memory.removeAllObjects()
  }

  /// Removes expired entries and those unused for longer than `Limits.maximumAge`; returns how many (0 when
  /// another process is trimming right now: it removes them).
  @discardableResult
  public func removeExpired() throws(ImageCacheError) -> Int {
    let report = try disk.trim(limit: .max, target: .max, maximumAge: maximumAge, now: Self.now(), force: false)
    return report?.removedEntries ?? 0
  }

  /// Trims the disk tier: expired and too-old entries, then — when over `Limits.diskBytes`, or always when
  /// `toLowWatermark` — least recently used ones down to the low watermark. Returns nil when another trim is under
  /// way, here or in another process (with `toLowWatermark`, after waiting up to 5 s for it to end).
  @discardableResult
  public func trim(toLowWatermark: Bool = false) throws(ImageCacheError) -> TrimReport? {
    try disk.trim(
      limit: limits.diskBytes, target: lowWatermarkBytes, maximumAge: maximumAge, now: Self.now(),
      force: toLowWatermark
    ).map {
      TrimReport(
        removedEntries: $0.removedEntries, removedBytes: $0.removedBytes, remainingEntries: $0.remainingEntries,
        remainingBytes: $0.remainingBytes)
    }
  }

  /// Empties this process's memory tier down to `fraction` of its cost limit (0 empties it); returns the bytes
  /// released.
  @discardableResult
  public func trimMemory(toFraction fraction: Double) -> Int { Self.trim(memory, toFraction: fraction) }

  private static func trim(_ memory: MemoryCache<ByteKey, MemoryEntry>, toFraction fraction: Double) -> Int {
    let limit = memory.totalCostLimit
    let target = Int(Double(limit > 0 ? limit : memory.totalCost) * max(0, min(1, fraction)))
    if target == 0 {
      let released = memory.totalCost
      memory.removeAllObjects()
      return released
    }
    return memory.trim(toCost: target)
  }

  // MARK: Looking

  /// Every entry on disk (one read of each entry's header).
  public func entries() throws(ImageCacheError) -> [Entry] {
    try disk.scan(headers: true).compactMap { scanned in
      guard let header = scanned.header, let key = scanned.key else { return nil }
      return Entry(
        key: key, info: header.info, bytes: header.imageLength,
        storedAt: Date(timeIntervalSince1970: Double(header.storedAt) / 1e9),
        lastUsed: Date(timeIntervalSince1970: Double(scanned.modified) / 1e9),
        expiresAt: header.expiresAt == 0 ? nil : Date(timeIntervalSince1970: Double(header.expiresAt) / 1e9))
    }
  }

  /// Counts of both tiers (the disk counted exactly, by a scan) and this process's hits and misses.
  public func statistics() throws(ImageCacheError) -> Statistics {
    let scanned = try disk.scan(headers: false)
    return Statistics(
      diskEntries: scanned.count, diskBytes: scanned.reduce(0) { $0 + $1.size }, memoryEntries: memory.count,
      memoryCost: memory.totalCost, memoryHits: memoryHits.load(ordering: .relaxed),
      diskHits: diskHits.load(ordering: .relaxed), misses: misses.load(ordering: .relaxed))
  }

  // MARK: Trimming in the background

  private var lowWatermarkBytes: Int { Int(Double(limits.diskBytes) * max(0, min(1, limits.lowWatermark))) }
  private var maximumAge: Int64? { limits.maximumAge.map(Self.nanoseconds) }

  static func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds.multipliedReportingOverflow(by: 1_000_000_000).overflow
      ? .max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
  }

  /// After a store that took the disk over its limit: one trim on this cache's queue (the storing call does not wait).
  /// A store that crosses the limit while that trim runs finds it scheduled and leaves it; so once the trim is done,
  /// the usage is checked again, and a trim that got under the limit is followed by another when stores raced past
  /// it meanwhile (seen under load: the stores ended above the limit and no trim came). One that could not get under
  /// the limit is not repeated.
  private func scheduleTrimIfNeeded() {
    guard disk.approximateUsage.bytes > limits.diskBytes,
      trimScheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    else { return }
    work.async { [self] in
      var report: TrimReport?
      var failed = false
      do { report = try trim() } catch {
        failed = true
        Self.logger.error("trimming the image cache '\(name)' failed: \(error)")
      }
      trimScheduled.store(false, ordering: .releasing)
      if let report {
        // Stores that raced past this trim's scan: their own check found it scheduled.
        if report.remainingBytes <= limits.diskBytes { scheduleTrimIfNeeded() }
      } else if !failed {
        // Another trim (this process's or another's) held the cache: look again once it is likely done, or
        // stores made while it ran would wait for the next store.
        work.asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in scheduleTrimIfNeeded() }
      }
    }
  }

  // MARK: Async forms

  /// `store(_:forKey:expiresAfter:)` without blocking a Swift-concurrency thread on the disk.
  @discardableResult
  public func store(_ data: Data, forKey key: String, expiresAfter: Duration? = nil) async throws(ImageCacheError)
    -> CachedImage
  {
    try await offload { [self] () throws(ImageCacheError) in try store(data, forKey: key, expiresAfter: expiresAfter) }
  }

  /// `image(forKey:)` without blocking a Swift-concurrency thread on the disk (a memory hit answers at once).
  public func image(forKey key: String) async throws(ImageCacheError) -> CachedImage? {
    if let image = memoryImage(forKey: key) { return image }
    return try await offload { [self] () throws(ImageCacheError) in try diskImage(forKey: key) }
  }

  /// `removeImage(forKey:)` without blocking a Swift-concurrency thread on the disk.
  public func removeImage(forKey key: String) async throws(ImageCacheError) {
    try await offload { [self] () throws(ImageCacheError) in try removeImage(forKey: key) }
  }

  /// `removeAll()` without blocking a Swift-concurrency thread on the disk.
  public func removeAll() async throws(ImageCacheError) {
    try await offload { [self] () throws(ImageCacheError) in try removeAll() }
  }

  /// `removeExpired()` without blocking a Swift-concurrency thread on the disk; returns the entries removed.
  @discardableResult
  public func removeExpired() async throws(ImageCacheError) -> Int {
    try await offload { [self] () throws(ImageCacheError) in try removeExpired() }
  }
}
