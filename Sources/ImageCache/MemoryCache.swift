import Synchronization

/// PLACEHOLDER until the memory-tier work lands (h-imageparts): a minimal LRU with NSCache's names.
public final class MemoryCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  private struct Item {
    var value: Value
    var cost: Int
    var tick: UInt64
  }
  private struct State {
    var items: [Key: Item] = [:]
    var tick: UInt64 = 0
    var totalCost = 0
    var totalCostLimit: Int
    var countLimit: Int
  }
  private let state: Mutex<State>

  public init(totalCostLimit: Int = 0, countLimit: Int = 0) {
    state = Mutex(State(totalCostLimit: totalCostLimit, countLimit: countLimit))
  }

  public func object(forKey key: Key) -> Value? {
    state.withLock { s in
      guard var item = s.items[key] else { return nil }
      s.tick += 1
      item.tick = s.tick
      s.items[key] = item
      return item.value
    }
  }

  public func setObject(_ value: Value, forKey key: Key, cost: Int = 0) {
    state.withLock { s in
      if let old = s.items[key] { s.totalCost -= old.cost }
      s.tick += 1
      s.items[key] = Item(value: value, cost: cost, tick: s.tick)
      s.totalCost += cost
      Self.evict(&s, toCost: s.totalCostLimit, count: s.countLimit)
    }
  }

  public func removeObject(forKey key: Key) {
    state.withLock { s in
      if let old = s.items.removeValue(forKey: key) { s.totalCost -= old.cost }
    }
  }

  public func removeAllObjects() {
    state.withLock { s in
      s.items.removeAll()
      s.totalCost = 0
    }
  }

  @discardableResult
  public func trim(toCost limit: Int) -> Int {
    state.withLock { s in
      let before = s.totalCost
      Self.evict(&s, toCost: max(limit, 0), count: 0, force: true)
      return before - s.totalCost
    }
  }

  public var totalCost: Int { state.withLock { $0.totalCost } }
  public var count: Int { state.withLock { $0.items.count } }
  public var totalCostLimit: Int {
    get { state.withLock { $0.totalCostLimit } }
    set { state.withLock { $0.totalCostLimit = newValue; Self.evict(&$0, toCost: newValue, count: $0.countLimit) } }
  }

  private static func evict(_ s: inout State, toCost limit: Int, count: Int, force: Bool = false) {
    while (limit > 0 || force) && s.totalCost > limit || count > 0 && s.items.count > count {
      guard let oldest = s.items.min(by: { $0.value.tick < $1.value.tick }) else { return }
      s.items[oldest.key] = nil
      s.totalCost -= oldest.value.cost
    }
  }
}
