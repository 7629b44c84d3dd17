import PropertyList
import Synchronization

/// What one process knows of a suite: the image it read (`<suite>.snapshot`, mapped and looked up lazily) and the
/// changes applied over it since — the journal's records and this process's own writes.
///
/// Nothing here is proportional to the suite: opening a suite of a million keys maps its image and decodes only the
/// journal past it, and a process that reads ten keys holds ten decoded values (`decoded`). Changes come in two
/// tiers: `frozen` is what a compaction running in the background folds into the next image (never mutated while
/// it does, so the compaction reads it without a copy and without a lock), `changes` what came after. A lookup asks
/// `changes`, then `frozen`, then the image. A removed key is a change to nil.
struct SuiteValues: @unchecked Sendable {  // `decoded` is a box filled under the store's `state` lock only
  private(set) var image: SuiteImage?
  private(set) var changes: [String: PropertyListValue?] = [:]
  private(set) var frozen: [String: PropertyListValue?] = [:]
  /// Values this process read from `image`. A class, so a lookup through a read-only borrow of the state fills it;
  /// shared by copies with the same image (its values are the image's, whoever reads them).
  private var decoded: DecodedValues

  /// The state `image` holds (nil: empty).
  init(image: SuiteImage?) {
    self.image = image
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
    if let change = changes[key] { return change }
    if !frozen.isEmpty, let change = frozen[key] { return change }
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

  /// The value `key` was changed to over the image (nil inside: removed); nil when it was not changed.
  func change(forKey key: String) -> PropertyListValue?? {
    if let change = changes[key] { return change }
    if !frozen.isEmpty, let change = frozen[key] { return change }
    return nil
  }

  /// Why the image could not be read, if a lookup found it damaged.
  var damage: SuiteImage.Corruption? { decoded.damage }

  /// Sets (or with nil removes) `key`. In NFC: a table keeps the spelling it first held, and the next image is
  /// written from these keys' bytes.
  mutating func set(_ value: PropertyListValue?, forKey key: String) {
    changes.updateValue(value, forKey: key.normalizedKey)
  }

  /// How many changes are held over the image (what a compaction folds).
  var changeCount: Int { changes.count + frozen.count }

  /// About how many bytes the changes and the decoded values take (a memory warning's accounting).
  var approximateBytes: Int {
    func size(_ table: [String: PropertyListValue?]) -> Int {
      table.reduce(0) { $0 + $1.key.utf8.count + ($1.value.map(Self.approximateSize) ?? 16) }
    }
    return size(changes) + size(frozen)
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
          guard changes[key] == nil && frozen[key] == nil else { return }
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
    for (key, change) in frozen where changes[key] == nil { all[key] = change }
    for (key, change) in changes { all[key] = change }
    return all
  }

  /// What an image holding this state is made of: the image's entries, copied as they are, with the changes
  /// encoded over them (`SuiteImage.merge`).
  var imageParts: (base: SuiteImage?, changes: [String: PropertyListValue?]) {
    (image, frozen.isEmpty ? changes : frozen.merging(changes) { $1 })
  }

  /// The state as `replacement` (an image holding exactly this state) — the changes and decoded values are no
  /// longer needed. Returns what is dropped, so the caller can release it outside its locks (freeing a large
  /// table takes milliseconds).
  mutating func rebase(onto replacement: SuiteImage?) -> SuiteValues {
    let old = self
    self = SuiteValues(image: replacement)
    return old
  }

  // MARK: A compaction in the background

  /// Identifies the frozen tier (0: none), so a compaction that finishes installs its image only over the state it
  /// was built from.
  private(set) var frozenToken: UInt64 = 0
  private static let tokens = Atomic<UInt64>(0)

  /// Moves the changes to the frozen tier for a compaction to fold into the next image (`image` + `frozen`); later
  /// changes go to a new table, sized for as many. Returns the token, or nil when a compaction already holds it.
  mutating func freeze() -> UInt64? {
    guard frozen.isEmpty, frozenToken == 0 else { return nil }
    // Room for twice as many as the last round: a table that grows during a set stalls it (rehashing all).
    let capacity = 2 * changes.count
    frozen = changes
    changes = [:]
    changes.reserveCapacity(capacity)
    frozenToken = Self.tokens.add(1, ordering: .relaxed).newValue
    return frozenToken
  }

  /// The compaction of `token` wrote `replacement`, which holds `image` + `frozen`: it becomes the image, the
  /// frozen tier and the decoded values go (returned, for the caller to release outside its locks). The changes
  /// made since the freeze stay over it. False when the state is no longer the one the compaction started from.
  mutating func install(_ replacement: SuiteImage, token: UInt64) -> SuiteValues? {
    guard frozenToken == token else { return nil }
    var dropped = SuiteValues(image: nil)
    dropped.frozen = frozen
    dropped.decoded = decoded
    image = replacement
    frozen = [:]
    frozenToken = 0
    decoded = DecodedValues()
    return dropped
  }

  /// The compaction of `token` did not install its image: its frozen changes go back under the newer ones.
  mutating func thaw(token: UInt64) {
    guard frozenToken == token else { return }
    for (key, change) in frozen where changes[key] == nil { changes.updateValue(change, forKey: key) }
    frozen = [:]
    frozenToken = 0
  }
}

/// The values a process decoded from an image, and the damage a lookup found.
final class DecodedValues: @unchecked Sendable {  // used under the store's `state` lock only
  var values: [String: PropertyListValue] = [:]
  var damage: SuiteImage.Corruption?
}
