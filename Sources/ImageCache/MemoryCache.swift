import Synchronization

/// A thread-safe in-memory cache bounded by total cost and by count that evicts the least recently used object
/// first — `NSCache`'s names, with an eviction order you can rely on (Foundation's `NSCache` on Linux evicts the
/// cheapest objects first, not the oldest).
///
/// ## Behavior
/// - **Recency**: `object(forKey:)` (a hit) and `setObject(_:forKey:cost:)` make an object the most recently used.
///   When a limit is exceeded, objects leave from the least recently used end until both limits hold again.
/// - **Limits**: `totalCostLimit` bounds the sum of the costs, `countLimit` the number of objects; 0 means no
///   limit. Lowering a limit evicts at once. An object whose cost alone exceeds `totalCostLimit` is not kept (and an
///   older object for its key is removed, so the cache never answers with a value older than the last set).
/// - **Cost** is whatever the caller says the object holds (bytes for encoded images, decoded bytes for bitmaps);
///   it must not be negative. Replacing an object replaces its cost.
/// - **Cost of an operation**: O(1) — a hash lookup and a few index writes in an intrusive doubly-linked list kept
///   in an array (no allocation per hit). One `Mutex` guards everything; uncontended, it is an atomic
///   compare-and-swap, so a hit makes no system call.
/// - **Eviction handler**: called for objects evicted by a limit or by `trim(toCost:)` — not for those removed or
///   replaced by the caller — after the lock is released, on the thread that caused the eviction, in eviction order.
///   It may call back into the cache.
/// - **Statistics**: hits and misses of `object(forKey:)`, and evictions, counted under the same lock.
public final class MemoryCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  /// Called with each object evicted by a limit or by `trim(toCost:)`.
  public typealias EvictionHandler = @Sendable (_ key: Key, _ value: Value) -> Void

  /// Counters of hits, misses and evictions.
  public typealias Statistics = MemoryCacheStatistics

  @usableFromInline let state: Mutex<LRUState<Key, Value>>

  /// - Parameters:
  ///   - totalCostLimit: the largest sum of costs kept; 0 = no limit.
  ///   - countLimit: the largest number of objects kept; 0 = no limit.
  ///   - evictionHandler: called (outside the lock) with each object a limit or a trim evicts.
  @inlinable
  public init(totalCostLimit: Int = 0, countLimit: Int = 0, evictionHandler: EvictionHandler? = nil) {
    precondition(totalCostLimit >= 0 && countLimit >= 0, "MemoryCache limits must not be negative (0 = no limit)")
    state = Mutex(LRUState(totalCostLimit: totalCostLimit, countLimit: countLimit, evictionHandler: evictionHandler))
  }

  /// The object for `key`, now the most recently used; nil on a miss.
  @inlinable
  public func object(forKey key: Key) -> Value? {
    state.withLock { $0.lookup(key) }
  }

  /// Keeps `object` for `key` as the most recently used, replacing any older object and its cost; then evicts the
  /// least recently used objects until the limits hold. An object costlier than `totalCostLimit` is not kept.
  @inlinable
  public func setObject(_ object: Value, forKey key: Key, cost: Int = 0) {
    precondition(cost >= 0, "MemoryCache cost must not be negative (got \(cost) for key \(key))")
    let (replaced, evicted) = state.withLock { state in
      let replaced = state.insert(key, object, cost: cost)
      return (replaced, state.evictToLimits())
    }
    _ = replaced  // released here, after the lock
    deliver(evicted)
  }

  /// Removes the object for `key`, if any (the eviction handler is not called).
  @inlinable
  public func removeObject(forKey key: Key) {
    // The value is released after the lock: its deinit may be slow (a large bitmap).
    let removed = state.withLock { $0.remove(key) }
    _ = removed
  }

  /// Removes every object (the eviction handler is not called). The statistics stay.
  @inlinable
  public func removeAllObjects() {
    let old = state.withLock { state in state.removeAll() }
    _ = old
  }

  /// Evicts least recently used objects until `totalCost <= cost`; returns the cost released. The memory-pressure
  /// policy calls it (a fraction of the limit on a warning, 0 on critical).
  @discardableResult
  @inlinable
  public func trim(toCost cost: Int) -> Int {
    let (released, evicted) = state.withLock { state in
      let before = state.totalCost
      let evicted = state.evict(untilCost: max(0, cost), count: Int.max)
      return (before - state.totalCost, evicted)
    }
    deliver(evicted)
    return released
  }

  /// The largest sum of costs kept; 0 = no limit. Lowering it evicts at once.
  @inlinable
  public var totalCostLimit: Int {
    get { state.withLock { $0.totalCostLimit } }
    set {
      precondition(newValue >= 0, "MemoryCache.totalCostLimit must not be negative (0 = no limit)")
      deliver(
        state.withLock { state in
          state.totalCostLimit = newValue
          return state.evictToLimits()
        })
    }
  }

  /// The largest number of objects kept; 0 = no limit. Lowering it evicts at once.
  @inlinable
  public var countLimit: Int {
    get { state.withLock { $0.countLimit } }
    set {
      precondition(newValue >= 0, "MemoryCache.countLimit must not be negative (0 = no limit)")
      deliver(
        state.withLock { state in
          state.countLimit = newValue
          return state.evictToLimits()
        })
    }
  }

  /// The sum of the costs of the objects kept.
  @inlinable
  public var totalCost: Int { state.withLock { $0.totalCost } }
  /// The number of objects kept.
  @inlinable
  public var count: Int { state.withLock { $0.index.count } }
  /// Hits, misses and evictions since creation or the last ``resetStatistics()``.
  @inlinable
  public var statistics: Statistics { state.withLock { $0.statistics } }
  /// Sets the counters back to zero.
  @inlinable
  public func resetStatistics() { state.withLock { $0.statistics = Statistics() } }

  /// The keys from most to least recently used (for tests and diagnostics; O(n)).
  package func keysByRecency() -> [Key] { state.withLock { $0.keysByRecency() } }
  /// A description of the first broken internal invariant, or nil (for tests; O(n)).
  package func brokenInvariant() -> String? { state.withLock { $0.brokenInvariant() } }

  @inlinable func deliver(_ evicted: Evicted<Key, Value>) {
    guard let handler = evicted.handler else { return }
    for (key, value) in evicted.entries { handler(key, value) }
  }
}

/// Counters of a ``MemoryCache`` since creation (or the last `resetStatistics()`).
public struct MemoryCacheStatistics: Sendable, Hashable {
  /// Lookups that found their object.
  public var hits = 0
  /// Lookups that found nothing.
  public var misses = 0
  /// Objects evicted by a limit or by `trim(toCost:)`.
  public var evictions = 0
  /// Hits per lookup (0 before any lookup).
  public var hitRatio: Double { hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses) }
  /// All counters at zero.
  public init() {}
}

/// What one locked operation evicted, handed out of the lock (values released there, handler called there).
@usableFromInline struct Evicted<Key: Sendable, Value: Sendable>: Sendable {
  @usableFromInline var handler: (@Sendable (Key, Value) -> Void)?
  @usableFromInline var entries: [(Key, Value)] = []
  @inlinable init(handler: (@Sendable (Key, Value) -> Void)?) { self.handler = handler }
}

/// The "no slot" index: the end of a list.
@inlinable var noSlot: Int { -1 }

/// The LRU list: slots in one array, linked by index (no object per entry, no ARC traffic on a hit). `head` is the
/// most recently used, `tail` the least; `free` chains the unused slots through `next`.
@usableFromInline struct LRUState<Key: Hashable & Sendable, Value: Sendable>: ~Copyable {
  @usableFromInline struct Slot: Sendable {
    @usableFromInline var key: Key?
    @usableFromInline var value: Value?
    @usableFromInline var cost: Int
    @usableFromInline var previous: Int
    @usableFromInline var next: Int
    @inlinable init(key: Key? = nil, value: Value? = nil, cost: Int = 0, next: Int = noSlot) {
      self.key = key
      self.value = value
      self.cost = cost
      self.previous = noSlot
      self.next = next
    }
  }

  @usableFromInline var index: [Key: Int] = [:]
  @usableFromInline var slots: [Slot] = []
  @usableFromInline var head = noSlot
  @usableFromInline var tail = noSlot
  @usableFromInline var free = noSlot
  @usableFromInline var totalCost = 0
  @usableFromInline var totalCostLimit: Int
  @usableFromInline var countLimit: Int
  @usableFromInline var statistics = MemoryCacheStatistics()
  @usableFromInline let evictionHandler: (@Sendable (Key, Value) -> Void)?

  @inlinable init(totalCostLimit: Int, countLimit: Int, evictionHandler: (@Sendable (Key, Value) -> Void)?) {
    self.totalCostLimit = totalCostLimit
    self.countLimit = countLimit
    self.evictionHandler = evictionHandler
  }

  @inlinable mutating func lookup(_ key: Key) -> Value? {
    guard let slot = index[key] else {
      statistics.misses += 1
      return nil
    }
    statistics.hits += 1
    moveToFront(slot)
    return slots[slot].value
  }

  /// Inserts or replaces; returns the replaced value so it is released outside the lock.
  @discardableResult
  @inlinable mutating func insert(_ key: Key, _ value: Value, cost: Int) -> Value? {
    if totalCostLimit > 0 && cost > totalCostLimit {
      return remove(key)
    }
    if let slot = index[key] {
      let old = slots[slot].value
      slots[slot].value = value
      totalCost += cost - slots[slot].cost
      slots[slot].cost = cost
      moveToFront(slot)
      return old
    }
    let slot: Int
    if free != noSlot {
      slot = free
      free = slots[slot].next
      slots[slot] = Slot(key: key, value: value, cost: cost)
    } else {
      slot = slots.count
      slots.append(Slot(key: key, value: value, cost: cost))
    }
    index[key] = slot
    totalCost += cost
    linkAtFront(slot)
    return nil
  }

  @discardableResult
  @inlinable mutating func remove(_ key: Key) -> Value? {
    guard let slot = index.removeValue(forKey: key) else { return nil }
    return release(slot).1
  }

  /// Empties the cache; returns the old storage so it is released outside the lock.
  @inlinable mutating func removeAll() -> ([Key: Int], [Slot]) {
    let old = (index, slots)
    index = [:]
    slots = []
    head = noSlot
    tail = noSlot
    free = noSlot
    totalCost = 0
    return old
  }

  @inlinable mutating func evictToLimits() -> Evicted<Key, Value> {
    evict(
      untilCost: totalCostLimit > 0 ? totalCostLimit : Int.max,
      count: countLimit > 0 ? countLimit : Int.max)
  }

  /// Evicts from the tail until `totalCost <= cost` and `count <= count`.
  @inlinable mutating func evict(untilCost cost: Int, count: Int) -> Evicted<Key, Value> {
    var evicted = Evicted<Key, Value>(handler: evictionHandler)
    while tail != noSlot && (totalCost > cost || index.count > count) {
      let slot = tail
      // A free slot at the tail would loop here forever: fail loudly instead (a bug in this file, never input).
      guard let key = slots[slot].key else {
        preconditionFailure("MemoryCache: the LRU list is corrupt at slot \(slot)")
      }
      index.removeValue(forKey: key)
      // Kept until after the lock, handler or not: a large value's deinit should not run inside it.
      if let value = release(slot).1 { evicted.entries.append((key, value)) }
      statistics.evictions += 1
    }
    return evicted
  }

  /// Unlinks a slot whose key is already out of `index`, puts it on the free list, returns its contents.
  @inlinable mutating func release(_ slot: Int) -> (Key?, Value?) {
    unlink(slot)
    let contents = (slots[slot].key, slots[slot].value)
    totalCost -= slots[slot].cost
    slots[slot] = Slot(next: free)
    free = slot
    return contents
  }

  @inlinable mutating func moveToFront(_ slot: Int) {
    guard slot != head else { return }
    unlink(slot)
    linkAtFront(slot)
  }

  @inlinable mutating func unlink(_ slot: Int) {
    let previous = slots[slot].previous
    let next = slots[slot].next
    if previous != noSlot { slots[previous].next = next } else { head = next }
    if next != noSlot { slots[next].previous = previous } else { tail = previous }
    slots[slot].previous = noSlot
    slots[slot].next = noSlot
  }

  @inlinable mutating func linkAtFront(_ slot: Int) {
    slots[slot].previous = noSlot
    slots[slot].next = head
    if head != noSlot { slots[head].previous = slot } else { tail = slot }
    head = slot
  }

  func keysByRecency() -> [Key] {
    var keys: [Key] = []
    var slot = head
    while slot != noSlot, keys.count <= slots.count {
      if let key = slots[slot].key { keys.append(key) }
      slot = slots[slot].next
    }
    return keys
  }

  func brokenInvariant() -> String? {
    var seen = 0
    var cost = 0
    var previous = noSlot
    var slot = head
    while slot != noSlot {
      seen += 1
      guard seen <= slots.count else { return "the list has a cycle" }
      guard slots[slot].previous == previous else { return "slot \(slot): previous link broken" }
      guard let key = slots[slot].key, index[key] == slot else { return "slot \(slot): not indexed under its key" }
      cost += slots[slot].cost
      previous = slot
      slot = slots[slot].next
    }
    guard previous == tail else { return "tail is \(tail), the list ends at \(previous)" }
    guard seen == index.count else { return "list has \(seen) entries, index \(index.count)" }
    guard cost == totalCost else { return "costs add up to \(cost), totalCost says \(totalCost)" }
    var freeCount = 0
    slot = free
    while slot != noSlot {
      freeCount += 1
      guard freeCount <= slots.count, slots[slot].key == nil else { return "free list broken at slot \(slot)" }
      slot = slots[slot].next
    }
    guard seen + freeCount == slots.count else { return "\(slots.count - seen - freeCount) slots leaked" }
    return nil
  }
}
