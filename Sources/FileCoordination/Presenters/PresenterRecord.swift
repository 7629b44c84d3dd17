import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// One registered presenter, as a small JSON file `presenters/<bucket>/<id>` that every process can read (the layout:
/// `PresenterRegistry`).
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
    if let canonical = bytes.withUnsafeBufferPointer(Self.canonical) {
      record = canonical
    } else {
      do { record = try UntrustedJSON.decode(PresenterRecord.self, from: bytes) } catch {
        throw .corruptFile(fileName, reason: "presenter record is not valid JSON of the expected shape")
      }
    }
    guard record.version == formatVersion else {
      throw .corruptFile(fileName, reason: "presenter record version \(record.version) is not \(formatVersion)")
    }
    guard record.id == fileName, Self.isID(record.id.utf8, of: record.process) else {
      throw .corruptFile(fileName, reason: "presenter record id '\(record.id)' does not match its file and process")
    }
    if record.item != "" { _ = try ContainerPath(record.item) }
    return record
  }

  /// Whether `id` is `<process>.<n>`, `n` a number of at most 20 digits that fits in 64 bits. On its bytes: two
  /// splits of each record's id were a tenth of reading 64 records.
  private static func isID(_ id: String.UTF8View, of process: ProcessName) -> Bool {
    let prefix = process.description.utf8
    guard id.count > prefix.count + 1, id.starts(with: prefix) else { return false }
    let rest = id.dropFirst(prefix.count)
    let number = rest.dropFirst()
    return rest.first == UInt8(ascii: ".") && number.count <= 20
      && number.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }) && UInt64(Substring(number)) != nil
  }

  /// The record in the one form `encoded()` writes, read by hand; nil for anything else, which JSONDecoder then
  /// decides — so both routes take the same files. A new process's first access of an item 64 processes present
  /// decoded 64 records with JSONDecoder: a sixth of that coordinated write, most of it the decoder's first-use cost.
  /// Taken: the keys in `encoded()`'s order, no whitespace, no escape but `\/`, valid UTF-8, a plain version number.
  /// The reading is `JSONScanner`'s (only its cursor-exact parts: no white space skipped), with the `\/` escape.
  static func canonical(_ bytes: UnsafeBufferPointer<UInt8>) -> PresenterRecord? {
    var scanner = JSONScanner(bytes)
    func string() -> String? {
      scanner.next == UInt8(ascii: "\"") ? scanner.string(escapes: .solidus) : nil
    }
    func bool() -> Bool? { scanner.word("true") ? true : scanner.word("false") ? false : nil }
    // A plain version of at most 9 digits (no sign, no leading zero).
    func version() -> Int? {
      let start = scanner.at
      let count = scanner.digits()
      guard (1...9).contains(count), count == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
      return bytes[start..<scanner.at].reduce(0) { $0 * 10 + Int($1 &- UInt8(ascii: "0")) }
    }
    guard scanner.word("{\"id\":"), let id = string(), scanner.word(",\"isDirectory\":"), let isDirectory = bool(),
      scanner.word(",\"item\":"), let item = string(), scanner.word(",\"process\":"), let processText = string(),
      let process = ProcessName(processText), scanner.word(",\"version\":"), let version = version(),
      scanner.word("}"), scanner.next == nil
    else { return nil }
    var record = PresenterRecord(id: id, process: process, item: item, isDirectory: isDirectory)
    record.version = version
    return record
  }

  func encoded() -> [UInt8] {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return Array((try? encoder.encode(self)) ?? Data())
  }
}
