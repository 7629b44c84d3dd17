import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The records of one registry generation, indexed by item path, so an access looks up only the presenters of its
/// items, of their ancestors and of their descendants — its cost does not grow with presenters of other items.
struct PresenterIndex: Sendable {
  /// Every record, by id.
  let records: [PresenterRecord]
  /// Files that should be records and are not: presenters that cannot be asked (never "no presenter").
  let damaged: [DamagedRecord]
  private let byPath: [ContainerPath: [Int]]
  /// Indexes into `records`, sorted by path component by component: the records inside a directory are a
  /// contiguous run right after the directory's own path.
  private let byComponents: [Int]

  static let empty = PresenterIndex(records: [])

  init(records: [PresenterRecord], damaged: [DamagedRecord] = []) {
    self.records = records
    self.damaged = damaged
    var byPath: [ContainerPath: [Int]] = [:]
    for (index, record) in records.enumerated() { byPath[record.path, default: []].append(index) }
    self.byPath = byPath
    byComponents = records.indices.sorted {
      records[$0].path.components.lexicographicallyPrecedes(records[$1].path.components)
    }
  }

  var isEmpty: Bool { records.isEmpty && damaged.isEmpty }

  /// The records presenting one of `items`, an ancestor of one (the container root included) or something inside
  /// one; each once, in id order.
  func related(to items: [ContainerPath]) -> [PresenterRecord] {
    guard !records.isEmpty else { return [] }
    var found = Set<Int>()
    for item in items {
      found.formUnion(byPath[.root] ?? [])
      for depth in 1...max(item.depth, 1) where depth <= item.depth {
        found.formUnion(byPath[ContainerPath(unchecked: Array(item.components.prefix(depth)))] ?? [])
      }
      // The descendants: binary search for the first path not before `item`, then the run that starts with it.
      var low = 0, high = byComponents.count
      while low < high {
        let middle = (low + high) / 2
        if records[byComponents[middle]].path.components.lexicographicallyPrecedes(item.components) {
          low = middle + 1
        } else {
          high = middle
        }
      }
      while low < byComponents.count {
        let path = records[byComponents[low]].path
        guard path.depth >= item.depth, path.components.starts(with: item.components) else { break }
        found.insert(byComponents[low])
        low += 1
      }
    }
    return found.sorted().map { records[$0] }
  }
}
