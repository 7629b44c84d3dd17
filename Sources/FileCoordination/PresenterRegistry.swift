import Foundation
import Synchronization
import SystemLayer

/// One registered presenter, as a small JSON file `presenters/<id>` that every process can read.
struct PresenterRecord: Codable, Sendable, Hashable {
  static let formatVersion = 1
  static let maxBytes = 16 * 1024

  var version: Int = PresenterRecord.formatVersion
  /// `<pid>.<start>.<n>`: the owning process's name plus a per-process counter.
  var id: String
  var process: ProcessName
  /// Container-relative path of the presented item.
  var item: String { didSet { path = Self.parse(item) } }
  var isDirectory: Bool
  /// `item`, parsed once: every coordinated access compares it (records are immutable files, so a cached
  /// record never needs parsing again).
  private(set) var path: ContainerPath

  private enum CodingKeys: String, CodingKey { case version, id, process, item, isDirectory }

  init(id: String, process: ProcessName, item: String, isDirectory: Bool) {
    self.id = id
    self.process = process
    self.item = item
    self.isDirectory = isDirectory
    path = Self.parse(item)
  }

  init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    version = try values.decode(Int.self, forKey: .version)
    id = try values.decode(String.self, forKey: .id)
    process = try values.decode(ProcessName.self, forKey: .process)
    item = try values.decode(String.self, forKey: .item)
    isDirectory = try values.decode(Bool.self, forKey: .isDirectory)
    path = Self.parse(item)
  }

  private static func parse(_ item: String) -> ContainerPath { (try? ContainerPath(item)) ?? .root }

  /// Parses and checks a record file. Every field is untrusted: anything odd is an error naming the file.
  static func decode(_ bytes: [UInt8], fileName: String) throws(GroupContainerError) -> PresenterRecord {
    guard bytes.count <= maxBytes else {
      throw .corruptFile(fileName, reason: "presenter record over \(maxBytes) bytes")
    }
    let record: PresenterRecord
    do { record = try JSONDecoder().decode(PresenterRecord.self, from: Data(bytes)) } catch {
      throw .corruptFile(fileName, reason: "presenter record is not valid JSON of the expected shape")
    }
    guard record.version == formatVersion else {
      throw .corruptFile(fileName, reason: "presenter record version \(record.version) is not \(formatVersion)")
    }
    guard record.id == fileName, record.id.hasPrefix("\(record.process)."),
      let n = record.id.split(separator: ".").last, UInt64(n) != nil,
      record.id.split(separator: ".").count == 3
    else {
      throw .corruptFile(fileName, reason: "presenter record id '\(record.id)' does not match its file and process")
    }
    if record.item != "" { _ = try ContainerPath(record.item) }
    return record
  }

  func encoded() -> [UInt8] {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return Array((try? encoder.encode(self)) ?? Data())
  }
}

/// The presenter record rule for tools that only look (`groupctl doctor`): where records are and whether a file
/// is one.
package enum PresenterRecordCheck {
  /// The records' directory, relative to the container.
  package static let directory = ContainerPath.privateDirectory + "/presenters"
  /// The largest record.
  package static let maximumBytes = PresenterRecord.maxBytes

  /// Why `bytes`, read from the record file `fileName`, are not a valid presenter record; nil when they are.
  package static func problem(_ bytes: [UInt8], fileName: String) -> String? {
    do { _ = try PresenterRecord.decode(bytes, fileName: fileName) } catch { return "\(error)" }
    return nil
  }
}

/// A file in `presenters/` that is not a valid record (truncated, edited, not a regular file). Its presenter, if its
/// process lives, is a presenter nobody can ask: its item is unknown, so it concerns every access (issue #33 item 4).
struct DamagedRecord: Sendable, Hashable {
  /// The file's name.
  var name: String
  /// The owning process, from the name when it has the shape of a record id (`<pid>.<start>.<n>`).
  var process: ProcessName?
  var reason: String

  init(name: String, reason: String) {
    self.name = name
    self.reason = reason
    let parts = name.split(separator: ".", omittingEmptySubsequences: false)
    process = parts.count == 3 && UInt64(parts[2]) != nil ? ProcessName(parts[0] + "." + parts[1]) : nil
  }
}

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

/// The presenter registry: `presenters/` holds one record per presenter of every process; counter 0 of the
/// mapped `counters` file is its generation, bumped after every change.
///
/// A coordinated access needs the list on every call. Reading the mapped generation costs no system call, so
/// the directory is listed again only when some process registered or removed a presenter, and then only new
/// files are read and parsed (records are immutable: a change is a new file). The list is indexed by item path
/// (`PresenterIndex`), so an access pays for the presenters that concern it, not for all of them.
/// Order matters: a writer changes the directory *then* bumps the generation; a reader loads the generation
/// *then* lists — so a reader never keeps a list older than the generation it saw.
final class PresenterRegistry: @unchecked Sendable {  // `cache` is a Mutex; the rest is immutable
  static let generationCounter = 0

  private let directory: String
  private let root: ContainerDirectory
  private let counters: MappedCounters
  private let fileMode: mode_t
  private struct Cache {
    var generation: UInt64 = .max
    var index = PresenterIndex.empty
    var byFile: [String: PresenterRecord] = [:]
  }
  private let cache = Mutex(Cache())

  /// The directory of the records (its owner watches its own records there: PresenterHost).
  var path: String { directory }

  init(directory: String, root: ContainerDirectory, counters: MappedCounters, fileMode: mode_t) {
    self.directory = directory
    self.root = root
    self.counters = counters
    self.fileMode = fileMode
  }

  func register(_ record: PresenterRecord) throws(FileSystemError) {
    try root.replaceFile(atPath: directory + "/" + record.id, with: record.encoded(), mode: fileMode)
    counters.increment(Self.generationCounter)
  }

  func unregister(id: String) {
    try? root.removeFile(atPath: directory + "/" + id)
    counters.increment(Self.generationCounter)
  }

  func removeAll(of process: ProcessName) {
    let prefix = "\(process)."
    var removed = false
    for name in (try? FileSystem.listDirectory(directory)) ?? [] where name.hasPrefix(prefix) {
      try? root.removeFile(atPath: directory + "/" + name)
      removed = true
    }
    if removed { counters.increment(Self.generationCounter) }
  }

  /// Every valid record. Bad files are skipped with a logged error, never trusted and never deleted
  /// (they may belong to a newer version of the framework); `index().damaged` lists them.
  func records() -> [PresenterRecord] { index().records }

  /// Whether the file of `record` holds exactly `record` (its owner checks after an inotify event on it).
  func isIntact(_ record: PresenterRecord) -> Bool {
    guard let bytes = try? root.readFile(atPath: directory + "/" + record.id, limit: PresenterRecord.maxBytes),
      let stored = try? PresenterRecord.decode(bytes, fileName: record.id)
    else { return false }
    return stored == record
  }

  /// The records that concern an access of `items` (see `PresenterIndex.related(to:)`).
  func records(relatedTo items: [ContainerPath]) -> [PresenterRecord] { index().related(to: items) }

  /// The index of the current generation, rebuilt only when the generation changed.
  func index() -> PresenterIndex {
    let generation = counters.load(Self.generationCounter) &+ counters.epoch  // a restored file starts a new epoch
    if let hit = cache.withLock({ $0.generation == generation ? $0.index : nil }) { return hit }
    let old = cache.withLock { $0.byFile }
    var byFile: [String: PresenterRecord] = [:]
    var damaged: [DamagedRecord] = []
    for name in (try? FileSystem.listDirectory(directory)) ?? [] where !name.hasPrefix(".") {
      if let known = old[name] {
        byFile[name] = known  // records are immutable: a change is a new file
        continue
      }
      do {
        let bytes = try root.readFile(atPath: directory + "/" + name, limit: PresenterRecord.maxBytes)
        byFile[name] = try PresenterRecord.decode(bytes, fileName: name)
      } catch let error as FileSystemError where error.errno == .noSuchFileOrDirectory {
        continue
      } catch {
        // Logged once per generation (an index is rebuilt only when the generation changes).
        let bad = DamagedRecord(name: name, reason: "\(error)")
        damaged.append(bad)
        CoordinationSpace.logger.error(
          """
          presenter record '\(directory)/\(name)' is damaged (\(error)): its presenter\(bad.process.map { " in process \($0.pid)" } ?? "") \
          cannot be asked, so accesses go on without it, or fail under presenterTimeoutPolicy .fail; its process \
          writes it again when it notices (groupctl doctor names it)
          """)
      }
    }
    let index = PresenterIndex(records: byFile.values.sorted { $0.id < $1.id }, damaged: damaged)
    cache.withLock { $0 = Cache(generation: generation, index: index, byFile: byFile) }
    return index
  }
}
