// The textbook alternative to MemoryCache's slots-in-an-array list, measured in the same run ("measure" in the
// brief): one class object per entry, linked by references, behind the same kind of Mutex. Benchmark code only.

import Synchronization

/// An LRU of class nodes: `next` strong, `previous` unowned(unsafe) (the list owns its nodes through `next` and
/// the dictionary; no weak-reference cost).
struct NodeLRU<Key: Hashable, Value>: ~Copyable {
  final class Node {
    let key: Key
    var value: Value
    unowned(unsafe) var previous: Node?
    var next: Node?
    init(key: Key, value: Value) {
      self.key = key
      self.value = value
    }
  }

  var map: [Key: Node] = [:]
  var head: Node?
  unowned(unsafe) var tail: Node?
  let countLimit: Int

  init(countLimit: Int) { self.countLimit = countLimit }

  mutating func get(_ key: Key) -> Value? {
    guard let node = map[key] else { return nil }
    if node !== head {
      unlink(node)
      pushFront(node)
    }
    return node.value
  }

  mutating func set(_ value: Value, forKey key: Key) {
    if let node = map[key] {
      node.value = value
      if node !== head {
        unlink(node)
        pushFront(node)
      }
      return
    }
    let node = Node(key: key, value: value)
    map[key] = node
    pushFront(node)
    while map.count > countLimit, let last = tail {
      unlink(last)
      map.removeValue(forKey: last.key)
    }
  }

  private mutating func unlink(_ node: Node) {
    let next = node.next
    if let previous = node.previous { previous.next = next } else { head = next }
    if let next { next.previous = node.previous } else { tail = node.previous }
    node.previous = nil
    node.next = nil
  }

  private mutating func pushFront(_ node: Node) {
    node.next = head
    head?.previous = node
    head = node
    if tail == nil { tail = node }
  }
}
