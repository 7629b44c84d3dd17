import Foundation
import PropertyList
import Synchronization
import SystemLayer

/// What one process knows of a suite: the image it read (`<suite>.snapshot`, mapped and looked up lazily) and the
/// changes applied over it since — the journal's records and this process's own writes.
///
/// Nothing here is proportional to the suite: opening a suite of a million keys maps its image and decodes only the
/// journal past it, and a process that reads ten keys holds ten decoded values (`decoded`).
///
/// Changes come in tiers, newest first: `changes`, the one table written to; `sealed`, tables that filled up; and
/// `frozen`, what a compaction running in the background folds into the next image. A lookup asks them in that
/// order, then the image; a removed key is a change to nil, which hides what older tiers and the image hold.
/// `changes` never grows past `capacity` (reserved once): when full it is sealed — moved, not copied, into an
/// immutable `Tier` — and a fresh table is started. A table that grew by doubling rehashed every entry on the
/// thread that applied the record: a reader following a writer that added 900,000 keys stalled 0.9–1.4 s in one
/// read. Sealed tiers are merged into one in the background (`DefaultsStore.mergeTiersIfNeeded`) when there are
/// more than `mergeAbove`, so a lookup asks a bounded number of tables.
struct SuiteValues: @unchecked Sendable {  // `decoded` is a box filled under the store's `state` lock only
  private(set) var image: SuiteImage?
  private(set) var changes: [String: PropertyListValue?] = [:]
  /// Tables that filled up, oldest first. Never mutated: shared by copies and by a merge without copy-on-write.
  private(set) var sealed: [Tier] = []
  /// What a compaction folds into the next image, oldest first: the changes and the sealed tiers at `freeze()`.
  private(set) var frozen: [Tier] = []
  /// Entries `changes` holds before it is sealed.
  let capacity: Int
  /// Values this process read from `image`. A class, so a lookup through a read-only borrow of the state fills it;
  /// shared by copies with the same image (its values are the image's, whoever reads them).
  private var decoded: DecodedValues

  /// A sealed table of changes (nil inside: removed). Immutable, so tiers are shared, never copied.
  final class Tier: Sendable {
    let table: [String: PropertyListValue?]
    init(_ table: [String: PropertyListValue?]) { self.table = table }
  }

  /// Entries of `changes` before it is sealed. Test hook: `GROUPCONTAINER_DEFAULTS_TIER_CAPACITY`.
  static let tierCapacity: Int = {
    #if GROUPCONTAINER_TEST_HOOKS
      if let text = Environment.value("GROUPCONTAINER_DEFAULTS_TIER_CAPACITY"), let n = Int(text), n > 0 {
        return n
      }
    #endif
    return 1 << 16
  }()
  /// A table this full is given its whole capacity at once (one rehash of this many entries): most processes
  /// change a few keys and never pay the 5 MB of a full table.
  static let smallTable = 1024
  /// Sealed tiers past which they are merged in the background.
  static let mergeAbove = 8

  /// The state `image` holds (nil: empty).
  init(image: SuiteImage?, capacity: Int = Self.tierCapacity) {
    self.image = image
    self.capacity = max(capacity, 1)
    decoded = DecodedValues()
  }

  /// A state held in memory only (recovered from an export or this process's last good state).
  init(dictionary: [String: PropertyListValue]) {
    self.init(image: nil)
    changes.reserveCapacity(dictionary.count)
    for (key, value) in dictionary { changes[key.normalizedKey] = .some(value) }
  }

  /// The current value (nil when absent or removed). An image that cannot be read (damaged since it was checked,
  /// or truncated under the mapping) answers nil and records why in `damage`: the store then repairs the suite.
  subscript(key: String) -> PropertyListValue? {
    if let change = change(forKey: key) { return change }
    guard let image else { return nil }
    if let value = decoded.values[key] { return value }
    let faults = image.faultCount
    do {
      let value = try image.value(forKey: key.normalizedKey)  // the image's index compares bytes
      guard image.faultCount == faults else {
        decoded.damage = decoded.damage ?? SuiteImage.Corruption(offset: 0, reason: "the file was truncated")
        return nil
      }
      if let value { decoded.values[key] = value }
      return value
    } catch {
      decoded.damage = decoded.damage ?? error
      return nil
    }
  }

  /// The value `key` was changed to over the image (nil inside: removed); nil when it was not changed. The newest
  /// tier that holds the key answers.
  func change(forKey key: String) -> PropertyListValue?? {
    if let change = changes[key] { return change }
    for tier in sealed.reversed() {
      if let change = tier.table[key] { return change }
    }
    for tier in frozen.reversed() {
      if let change = tier.table[key] { return change }
    }
    return nil
  }

  /// Why the image could not be read, if a lookup found it damaged.
  var damage: SuiteImage.Corruption? { decoded.damage }

  /// Sets (or with nil removes) `key`. In NFC: a table keeps the spelling it first held, and the next image is
  /// written from these keys' bytes. A full table is sealed first (O(1)); it never grows past its capacity.
  mutating func set(_ value: PropertyListValue?, forKey key: String) {
    let key = key.normalizedKey
    if changes.count >= capacity {
      if changes.index(forKey: key) == nil { seal() }
    } else if changes.count == Self.smallTable, capacity > Self.smallTable {
      changes.reserveCapacity(capacity)
    }
    changes.updateValue(value, forKey: key)
  }

  /// Moves `changes` (not a copy: the table is handed over) to the newest sealed tier; a fresh table follows.
  mutating func seal() {
    guard !changes.isEmpty else { return }
    sealed.append(Tier(changes))
    changes = [:]
  }

  /// How many changes are held over the image (what a compaction folds): a key changed in two tiers counts twice.
  var changeCount: Int {
    changes.count + sealed.reduce(0) { $0 + $1.table.count } + frozen.reduce(0) { $0 + $1.table.count }
  }

  /// About how many bytes the changes and the decoded values take (a memory warning's accounting).
  var approximateBytes: Int {
    func size(_ table: [String: PropertyListValue?]) -> Int {
      table.reduce(0) { $0 + $1.key.utf8.count + ($1.value.map(Self.approximateSize) ?? 16) }
    }
    return size(changes) + (sealed + frozen).reduce(0) { $0 + size($1.table) }
      + decoded.values.reduce(0) { $0 + $1.key.utf8.count + Self.approximateSize(of: $1.value) }
  }

  private static func approximateSize(of value: PropertyListValue) -> Int {
    switch value {
    case .string(let string): return 16 + string.utf8.count
    case .data(let bytes): return 16 + bytes.count
    case .array(let items): return 16 + items.reduce(0) { $0 + approximateSize(of: $1) }
    case .dictionary(let items): return 16 + items.reduce(0) { $0 + $1.key.utf8.count + approximateSize(of: $1.value) }
    default: return 16
    }
  }

  /// Every key and value: O(suite), for the calls that return the whole suite (`dictionaryRepresentation`, an
  /// export, an outside edit's difference).
  /// Values this large have their image pages given back once decoded.
  static let releasedValueBytes = 1 << 20

  func dictionary() throws(SuiteImage.Corruption) -> [String: PropertyListValue] {
    var all: [String: PropertyListValue] = [:]
    if let image {
      all.reserveCapacity(image.count + changes.count)
      let faults = image.faultCount
      do {
        try image.forEachEntry { entry, key in
          guard change(forKey: key) == nil else { return }
          all[key] = try image.value(of: entry)
          // A large value is now in memory: its pages of the mapping are given back (they would count twice).
          if entry.valueLength >= Self.releasedValueBytes {
            image.releaseResidentPages(in: entry.valueOffset..<(entry.valueOffset + entry.valueLength))
          }
        }
      } catch let error as SuiteImage.Corruption {
        throw error
      } catch {
        throw SuiteImage.Corruption(offset: 0, reason: "\(error)")
      }
      guard image.faultCount == faults else {
        throw SuiteImage.Corruption(offset: 0, reason: "the file was truncated while it was read")
      }
    }
    // Oldest to newest: a newer tier's change (a nil removes) replaces an older one's.
    for tier in frozen + sealed {
      for (key, change) in tier.table { all[key] = change }
    }
    for (key, change) in changes { all[key] = change }
    return all
  }

  /// Calls `body` with every change, tier by tier, oldest first (a key changed in several tiers comes once per
  /// tier, the newest last): applying them in order gives this state's changes.
  func forEachChange(_ body: (String, PropertyListValue?) -> Void) {
    for tier in frozen + sealed {
      for (key, change) in tier.table { body(key, change) }
    }
    for (key, change) in changes { body(key, change) }
  }

  /// What an image holding this state is made of: the image's entries, copied as they are, with the changes
  /// encoded over them (`SuiteImage.merge`).
  var imageParts: (base: SuiteImage?, changes: [String: PropertyListValue?]) {
    let tiers = frozen + sealed
    guard !tiers.isEmpty else { return (image, changes) }
    var all = Self.mergedTable(tiers)
    for (key, change) in changes { all.updateValue(change, forKey: key) }
    return (image, all)
  }

  /// The state as `replacement` (an image holding exactly this state) — the changes and decoded values are no
  /// longer needed. Returns what is dropped, so the caller can release it outside its locks (freeing a large
  /// table takes milliseconds).
  mutating func rebase(onto replacement: SuiteImage?) -> SuiteValues {
    let old = self
    self = SuiteValues(image: replacement, capacity: capacity)
    return old
  }

  // MARK: Merging sealed tiers in the background

  /// The sealed tiers to merge when there are more than `mergeAbove` (nil: not yet).
  var tiersToMerge: [Tier]? { sealed.count > Self.mergeAbove ? sealed : nil }

  /// `tiers` (oldest first) as one table, the newest change of each key kept — removals too: they hide older
  /// tiers and the image. O(their entries): for the background, or for what is O(suite) already.
  static func mergedTable(_ tiers: [Tier]) -> [String: PropertyListValue?] {
    guard let largest = tiers.indices.max(by: { tiers[$0].table.count < tiers[$1].table.count }) else { return [:] }
    guard tiers.count > 1 else { return tiers[largest].table }
    // The largest (usually the last merge's) is copied once and the others written over it: those newer always,
    // those older only where no newer one has the key (so newest to oldest).
    var table = tiers[largest].table
    table.reserveCapacity(tiers.reduce(0) { $0 + $1.table.count })
    for tier in tiers[..<largest].reversed() {
      for (key, change) in tier.table where table.index(forKey: key) == nil { table.updateValue(change, forKey: key) }
    }
    for tier in tiers[(largest + 1)...] {
      for (key, change) in tier.table { table.updateValue(change, forKey: key) }
    }
    return table
  }

  /// Replaces `tiers` with `merged` (built from them, `mergedTable`) if they are still sealed here, in a row and in
  /// that order — a freeze, a thaw or a rebase since may have moved or dropped them: then false, nothing changed.
  /// Tiers sealed since sit after them and stay newer.
  mutating func installMerged(_ merged: Tier, replacing tiers: [Tier]) -> Bool {
    guard let first = tiers.first, let start = sealed.firstIndex(where: { $0 === first }),
      sealed.count - start >= tiers.count, zip(sealed[start...], tiers).allSatisfy({ $0 === $1 })
    else { return false }
    sealed.replaceSubrange(start..<(start + tiers.count), with: [merged])
    return true
  }

  // MARK: A compaction in the background

  /// Identifies the frozen tier (0: none), so a compaction that finishes installs its image only over the state it
  /// was built from.
  private(set) var frozenToken: UInt64 = 0
  private static let tokens = Atomic<UInt64>(0)

  /// Moves the changes and the sealed tiers to the frozen tiers for a compaction to fold into the next image
  /// (`image` + `frozen`); later changes go to a new table. Returns the token, or nil when a compaction already
  /// holds it. O(1): the tables are handed over, not copied.
  mutating func freeze() -> UInt64? {
    guard frozen.isEmpty, frozenToken == 0 else { return nil }
    seal()
    frozen = sealed
    sealed = []
    frozenToken = Self.tokens.add(1, ordering: .relaxed).newValue
    return frozenToken
  }

  /// The compaction of `token` wrote `replacement`, which holds `image` + `frozen`: it becomes the image, the
  /// frozen tiers and the decoded values go (returned, for the caller to release outside its locks). The changes
  /// and tiers sealed since the freeze stay over it. Nil when the state is no longer the one the compaction
  /// started from.
  mutating func install(_ replacement: SuiteImage, token: UInt64) -> SuiteValues? {
    guard frozenToken == token else { return nil }
    var dropped = SuiteValues(image: nil, capacity: capacity)
    dropped.frozen = frozen
    dropped.decoded = decoded
    image = replacement
    frozen = []
    frozenToken = 0
    decoded = DecodedValues()
    return dropped
  }

  /// The compaction of `token` did not install its image: its frozen tiers go back under the newer ones, as the
  /// oldest sealed tiers (O(1); a merge follows if they are many).
  mutating func thaw(token: UInt64) {
    guard frozenToken == token else { return }
    sealed = frozen + sealed
    frozen = []
    frozenToken = 0
  }
}

/// The values a process decoded from an image, and the damage a lookup found.
final class DecodedValues: @unchecked Sendable {  // used under the store's `state` lock only
  var values: [String: PropertyListValue] = [:]
  var damage: SuiteImage.Corruption?
}
