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
  var item: String
  var isDirectory: Bool

  var path: ContainerPath { (try? ContainerPath(item)) ?? .root }

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

/// The presenter registry: `presenters/` holds one record per presenter of every process; counter 0 of the
/// mapped `counters` file is its generation, bumped after every change.
///
/// A coordinated access needs the list on every call. Reading the mapped generation costs no system call, so
/// the directory is listed again only when some process registered or removed a presenter.
/// Order matters: a writer changes the directory *then* bumps the generation; a reader loads the generation
/// *then* lists — so a reader never keeps a list older than the generation it saw.
final class PresenterRegistry: @unchecked Sendable {  // `cache` is a Mutex; the rest is immutable
  static let generationCounter = 0

  private let directory: String
  private let counters: MappedCounters
  private let fileMode: mode_t
  private struct Cache {
    var generation: UInt64 = .max
    var records: [PresenterRecord] = []
    var byFile: [String: PresenterRecord] = [:]
  }
  private let cache = Mutex(Cache())

  init(directory: String, counters: MappedCounters, fileMode: mode_t) {
    self.directory = directory
    self.counters = counters
    self.fileMode = fileMode
  }

  func register(_ record: PresenterRecord) throws(FileSystemError) {
    try AtomicReplace.write(record.encoded(), to: directory + "/" + record.id, mode: fileMode)
    counters.increment(Self.generationCounter)
  }

  func unregister(id: String) {
    try? FileSystem.removeFile(directory + "/" + id)
    counters.increment(Self.generationCounter)
  }

  func removeAll(of process: ProcessName) {
    let prefix = "\(process)."
    var removed = false
    for name in (try? FileSystem.listDirectory(directory)) ?? [] where name.hasPrefix(prefix) {
      try? FileSystem.removeFile(directory + "/" + name)
      removed = true
    }
    if removed { counters.increment(Self.generationCounter) }
  }

  /// Every valid record. Bad files are skipped with a logged error, never trusted and never deleted
  /// (they may belong to a newer version of the framework).
  func records() -> [PresenterRecord] {
    let generation = counters.load(Self.generationCounter) &+ counters.epoch  // a restored file starts a new epoch
    if let hit = cache.withLock({ $0.generation == generation ? $0.records : nil }) { return hit }
    let old = cache.withLock { $0.byFile }
    var byFile: [String: PresenterRecord] = [:]
    for name in (try? FileSystem.listDirectory(directory)) ?? [] where !name.hasPrefix(".") {
      if let known = old[name] {
        byFile[name] = known  // records are immutable: a change is a new file
        continue
      }
      do {
        let bytes = try FileSystem.readFile(directory + "/" + name, limit: PresenterRecord.maxBytes)
        byFile[name] = try PresenterRecord.decode(bytes, fileName: name)
      } catch let error as FileSystemError where error.errno == .noSuchFileOrDirectory {
        continue
      } catch {
        CoordinationSpace.logger.error("skipping presenter record '\(directory)/\(name)': \(error)")
      }
    }
    let records = byFile.values.sorted { $0.id < $1.id }
    cache.withLock { $0 = Cache(generation: generation, records: records, byFile: byFile) }
    return records
  }
}
