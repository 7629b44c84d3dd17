import Foundation
import ImageCache
import Synchronization
import SystemLayer  // SplitMix64: a failing random run replays from its seed
import TestSupport
import Testing

/// The simplest LRU that can be right: an array, most recently used first, every operation O(n).
struct ReferenceLRU {
  var entries: [(key: Int, value: Int, cost: Int)] = []
  var costLimit: Int
  var countLimit: Int
  var evicted: [Int] = []
  var hits = 0
  var misses = 0
  var totalCost: Int { entries.reduce(0) { $0 + $1.cost } }

  mutating func get(_ key: Int) -> Int? {
    guard let i = entries.firstIndex(where: { $0.key == key }) else {
      misses += 1
      return nil
    }
    hits += 1
    let entry = entries.remove(at: i)
    entries.insert(entry, at: 0)
    return entry.value
  }
  mutating func set(_ key: Int, _ value: Int, cost: Int) {
    entries.removeAll { $0.key == key }
    guard costLimit == 0 || cost <= costLimit else { return }
    entries.insert((key, value, cost), at: 0)
    evictToLimits()
  }
  mutating func remove(_ key: Int) { entries.removeAll { $0.key == key } }
  mutating func evictToLimits() {
    while !entries.isEmpty
      && ((costLimit > 0 && totalCost > costLimit) || (countLimit > 0 && entries.count > countLimit))
    {
      evicted.append(entries.removeLast().key)
    }
  }
  mutating func trim(to cost: Int) -> Int {
    let before = totalCost
    while !entries.isEmpty && totalCost > max(0, cost) { evicted.append(entries.removeLast().key) }
    return before - totalCost
  }
}

/// MemoryCache: strict LRU, cost and count limits, trims, statistics, thread safety, and a model-based random test
/// against ReferenceLRU.
///
/// Mutants this suite catches (each tried once, then restored):
/// - A hit does not move the object to the front (FIFO instead of LRU): `lruOrder`, `modelBased`.
/// - Replacing an object keeps its old cost: `replaceUpdatesCost`, `modelBased`.
/// - An object costlier than the limit replaces the old one and is then evicted, or the old one stays:
///   `objectLargerThanTheLimitIsNotKept`.
/// - `unlink` not updating `tail` when the last slot leaves: the corrupt-list precondition traps in
///   `replaceUpdatesCost` (before that precondition existed, the eviction loop spun forever).
/// - The eviction handler called inside the lock: `evictionHandlerRunsOutsideTheLock` ("Recursive call to lock
///   Mutex" trap).
/// - Lowering `countLimit` without evicting: `loweringLimitsEvicts`.
/// - `trim(toCost:)` evicting the most recently used end: `trimReleasesLeastRecentlyUsedFirst`.
@Suite(.runSlot(.minutes(10))) struct MemoryCacheTests {
  @Test func lruOrder() {
    let cache = MemoryCache<String, Int>(countLimit: 3)
    cache.setObject(1, forKey: "a")
    cache.setObject(2, forKey: "b")
    cache.setObject(3, forKey: "c")
    #expect(cache.object(forKey: "a") == 1)  // a is now the most recent; b the least
    cache.setObject(4, forKey: "d")
    #expect(cache.keysByRecency() == ["d", "a", "c"])
    #expect(cache.object(forKey: "b") == nil)
    cache.setObject(5, forKey: "c")  // a set also refreshes
    cache.setObject(6, forKey: "e")
    #expect(cache.keysByRecency() == ["e", "c", "d"])
    #expect(cache.count == 3)
    #expect(cache.brokenInvariant() == nil)
  }

  @Test func costLimit() {
    let cache = MemoryCache<Int, String>(totalCostLimit: 100)
    for key in 0..<10 { cache.setObject("v\(key)", forKey: key, cost: 30) }
    #expect(cache.totalCost == 90)
    #expect(cache.keysByRecency() == [9, 8, 7])
    cache.setObject("big", forKey: 100, cost: 100)
    #expect(cache.keysByRecency() == [100])
    #expect(cache.totalCost == 100)
    #expect(cache.statistics.evictions == 10)
  }

  @Test func replaceUpdatesCost() {
    let cache = MemoryCache<Int, Int>(totalCostLimit: 100)
    cache.setObject(1, forKey: 1, cost: 40)
    cache.setObject(2, forKey: 2, cost: 40)
    cache.setObject(11, forKey: 1, cost: 10)
    #expect(cache.totalCost == 50)
    #expect(cache.object(forKey: 1) == 11)
    cache.setObject(22, forKey: 2, cost: 90)  // 90 + 10 = 100: both stay
    #expect(cache.keysByRecency() == [2, 1])
    #expect(cache.totalCost == 100)
    cache.setObject(23, forKey: 2, cost: 95)  // 95 + 10 > 100: key 1 (now the least recent) goes
    #expect(cache.keysByRecency() == [2])
    #expect(cache.totalCost == 95)
    #expect(cache.count == 1)
  }

  @Test func objectLargerThanTheLimitIsNotKept() {
    let cache = MemoryCache<String, Int>(totalCostLimit: 50)
    cache.setObject(1, forKey: "small", cost: 10)
    cache.setObject(2, forKey: "k", cost: 20)
    cache.setObject(3, forKey: "k", cost: 51)  // not kept, and the older "k" must not answer either
    #expect(cache.object(forKey: "k") == nil)
    #expect(cache.object(forKey: "small") == 1)
    #expect(cache.totalCost == 10)
    #expect(cache.statistics.evictions == 0)
  }

  @Test func countLimitAndZeroMeansNoLimit() {
    let unlimited = MemoryCache<Int, Int>()
    for key in 0..<5_000 { unlimited.setObject(key, forKey: key, cost: 1_000_000) }
    #expect(unlimited.count == 5_000)
    #expect(unlimited.totalCost == 5_000_000_000)
    let counted = MemoryCache<Int, Int>(countLimit: 10)
    for key in 0..<5_000 { counted.setObject(key, forKey: key) }
    #expect(counted.count == 10)
    #expect(counted.keysByRecency() == Array((4_990..<5_000).reversed()))
  }

  @Test func loweringLimitsEvicts() {
    let cache = MemoryCache<Int, Int>()
    for key in 0..<10 { cache.setObject(key, forKey: key, cost: 10) }
    cache.countLimit = 6
    #expect(cache.countLimit == 6)
    #expect(cache.keysByRecency() == [9, 8, 7, 6, 5, 4])
    cache.totalCostLimit = 35
    #expect(cache.totalCostLimit == 35)
    #expect(cache.keysByRecency() == [9, 8, 7])
    cache.countLimit = 0
    cache.totalCostLimit = 0
    for key in 10..<20 { cache.setObject(key, forKey: key, cost: 10) }
    #expect(cache.count == 13)
  }

  @Test func trimReleasesLeastRecentlyUsedFirst() {
    let cache = MemoryCache<Int, Int>()
    for key in 0..<10 { cache.setObject(key, forKey: key, cost: key + 1) }  // total 55
    _ = cache.object(forKey: 0)
    #expect(cache.trim(toCost: 40) == 2 + 3 + 4 + 5 + 6)  // keys 1...5 leave (55 → 35); 0 was just used
    #expect(cache.keysByRecency() == [0, 9, 8, 7, 6])
    #expect(cache.trim(toCost: 100) == 0)
    #expect(cache.trim(toCost: 0) == 35)
    #expect(cache.count == 0)
    #expect(cache.brokenInvariant() == nil)
  }

  @Test func removeAndRemoveAll() {
    let cache = MemoryCache<String, Int>(totalCostLimit: 1_000)
    cache.setObject(1, forKey: "a", cost: 5)
    cache.setObject(2, forKey: "b", cost: 6)
    cache.removeObject(forKey: "a")
    cache.removeObject(forKey: "missing")
    #expect(cache.totalCost == 6)
    #expect(cache.object(forKey: "a") == nil)
    cache.removeAllObjects()
    #expect(cache.count == 0 && cache.totalCost == 0)
    cache.setObject(3, forKey: "c", cost: 7)  // usable after removeAll
    #expect(cache.object(forKey: "c") == 3)
    #expect(cache.statistics.hits == 1 && cache.statistics.misses == 1)
    cache.resetStatistics()
    #expect(cache.statistics == MemoryCacheStatistics())
    #expect(cache.brokenInvariant() == nil)
  }

  /// The handler sees every eviction (by limit and by trim), not removals, and may call back into the cache: it
  /// runs after the lock is released (inside it, this test would deadlock and fail at its time limit).
  @Test(.runSlot(.minutes(3)))
  func evictionHandlerRunsOutsideTheLock() {
    let seen = Mutex<[Int]>([])
    let box = Mutex<MemoryCache<Int, Int>?>(nil)
    let cache = MemoryCache<Int, Int>(countLimit: 2) { key, value in
      seen.withLock { $0.append(key) }
      #expect(key == value)
      _ = box.withLock { $0 }?.count  // re-entering the cache
    }
    box.withLock { $0 = cache }
    for key in 0..<5 { cache.setObject(key, forKey: key) }
    cache.removeObject(forKey: 4)
    cache.trim(toCost: 0)  // costs are 0: nothing to release
    cache.totalCostLimit = 1
    cache.setObject(9, forKey: 9, cost: 1)
    cache.setObject(10, forKey: 10, cost: 1)
    #expect(seen.withLock { $0 } == [0, 1, 2, 3, 9])
    box.withLock { $0 = nil }
  }

  /// Many tasks setting, reading, removing and trimming the same keys: every internal invariant holds after, the
  /// limits hold, and the statistics count every lookup exactly once.
  @Test(.runSlot(.minutes(3)))
  func concurrentHammering() async {
    let cache = MemoryCache<Int, [Int]>(totalCostLimit: 5_000, countLimit: 150)
    let tasks = 16
    let operations = 5_000
    let lookups = await withTaskGroup(of: Int.self) { group in
      for task in 0..<tasks {
        group.addTask {
          var generator = SplitMix64(seed: UInt64(task))
          var lookups = 0
          for _ in 0..<operations {
            let key = Int.random(in: 0..<300, using: &generator)
            switch Int.random(in: 0..<100, using: &generator) {
            case 0..<50:
              lookups += 1
              if let value = cache.object(forKey: key) { #expect(value == [key, key]) }
            case 50..<90: cache.setObject([key, key], forKey: key, cost: Int.random(in: 0..<100, using: &generator))
            case 90..<98: cache.removeObject(forKey: key)
            default: cache.trim(toCost: 2_500)
            }
          }
          return lookups
        }
      }
      return await group.reduce(0, +)
    }
    #expect(cache.brokenInvariant() == nil)
    #expect(cache.count <= 150)
    #expect(cache.totalCost <= 5_000)
    #expect(cache.keysByRecency().count == cache.count)
    let statistics = cache.statistics
    #expect(statistics.hits + statistics.misses == lookups)
    #expect(statistics.hits > 0)
  }

  /// Random operations (get, set with random costs, remove, trim, limit changes) on MemoryCache and on
  /// ReferenceLRU: the same answers, the same recency order, the same costs and the same evictions at every step.
  @Test(arguments: [1, 2, 3, 4] as [UInt64])
  func modelBased(seed: UInt64) {
    var generator = SplitMix64(seed: seed)
    let evicted = Mutex<[Int]>([])
    let cache = MemoryCache<Int, Int>(totalCostLimit: 200, countLimit: 12) { key, _ in
      evicted.withLock { $0.append(key) }
    }
    var model = ReferenceLRU(costLimit: 200, countLimit: 12)
    for step in 0..<6_000 {
      let key = Int.random(in: 0..<30, using: &generator)
      switch Int.random(in: 0..<100, using: &generator) {
      case 0..<45:
        let got = cache.object(forKey: key)
        let expected = model.get(key)
        if got != expected {
          Issue.record(
            "seed \(seed) step \(step): get \(key) gave \(String(describing: got)), expected \(String(describing: expected))"
          )
          return
        }
      case 45..<85:
        let cost = Int.random(in: 0..<60, using: &generator) == 0 ? 250 : Int.random(in: 0..<40, using: &generator)
        cache.setObject(step, forKey: key, cost: cost)
        model.set(key, step, cost: cost)
      case 85..<93:
        cache.removeObject(forKey: key)
        model.remove(key)
      case 93..<96:
        let target = Int.random(in: 0..<200, using: &generator)
        let released = cache.trim(toCost: target)
        if released != model.trim(to: target) {
          Issue.record("seed \(seed) step \(step): trim released \(released)")
          return
        }
      case 96..<98:
        let limit = [0, 50, 120, 200, 400].randomElement(using: &generator)!
        cache.totalCostLimit = limit
        model.costLimit = limit
        model.evictToLimits()
      default:
        let limit = [0, 3, 8, 12, 25].randomElement(using: &generator)!
        cache.countLimit = limit
        model.countLimit = limit
        model.evictToLimits()
      }
      let keys = cache.keysByRecency()
      if keys != model.entries.map(\.key) || cache.totalCost != model.totalCost || cache.count != keys.count
        || evicted.withLock({ $0 }) != model.evicted
      {
        Issue.record(
          "seed \(seed) step \(step): cache \(keys) cost \(cache.totalCost), model \(model.entries.map(\.key)) cost \(model.totalCost)"
        )
        return
      }
      if step % 1_000 == 0, let broken = cache.brokenInvariant() {
        Issue.record("seed \(seed) step \(step): \(broken)")
        return
      }
    }
    #expect(cache.statistics.hits == model.hits)
    #expect(cache.statistics.misses == model.misses)
    #expect(cache.statistics.evictions == model.evicted.count)
    #expect(cache.brokenInvariant() == nil)
  }
}
