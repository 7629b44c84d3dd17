import Foundation
import GroupContainerCore

/// A JSON value of any shape: an activity's attributes and content state as the record keeps them, readable by
/// any process (and by `groupctl activities list`) without knowing their Swift types.
package enum JSONValue: Codable, Hashable, Sendable {
  case null
  case bool(Bool)
  case integer(Int64)
  case double(Double)
  case string(String)
  case array([JSONValue])
  case object([String: JSONValue])

  /// Decodes any JSON value (integers before doubles, so whole numbers stay exact).
  package init(from decoder: any Decoder) throws {
    let c = try decoder.singleValueContainer()
    if c.decodeNil() {
      self = .null
    } else if let b = try? c.decode(Bool.self) {
      self = .bool(b)
    } else if let i = try? c.decode(Int64.self) {
      self = .integer(i)
    } else if let d = try? c.decode(Double.self) {
      self = .double(d)
    } else if let s = try? c.decode(String.self) {
      self = .string(s)
    } else if let a = try? c.decode([JSONValue].self) {
      self = .array(a)
    } else {
      self = .object(try c.decode([String: JSONValue].self))
    }
  }

  /// Encodes the value as the JSON it came from.
  package func encode(to encoder: any Encoder) throws {
    var c = encoder.singleValueContainer()
    switch self {
    case .null: try c.encodeNil()
    case .bool(let b): try c.encode(b)
    case .integer(let i): try c.encode(i)
    case .double(let d): try c.encode(d)
    case .string(let s): try c.encode(s)
    case .array(let a): try c.encode(a)
    case .object(let o): try c.encode(o)
    }
  }
}

/// The stored lifecycle of a record; the state a reader sees also depends on the time (``ActivityRules``).
package enum StoredLifecycle: String, Codable, Hashable, Sendable {
  case active, ended, dismissed
}

/// One activity as its file in the container holds it, untyped. Dates are seconds since 1970.
package struct ActivityRecord: Codable, Hashable, Sendable {
  /// The record format's version (``ActivityRecordFormat/version``).
  package var format: Int = ActivityRecordFormat.version
  /// The activity's id (an upper-case UUID), also its file name.
  package var id: String
  /// ``ActivityAttributes/activityTypeName`` of the app's type.
  package var attributesType: String
  /// The encoded attributes.
  package var attributes: JSONText
  /// The encoded content state (at most 4,096 bytes of JSON as the app encoded it).
  package var contentState: JSONText
  /// When the content goes stale; nil: never.
  package var staleDate: Double?
  /// The content's relevance score.
  package var relevanceScore: Double
  /// Active, ended or dismissed as written; the time rules may say more (``ActivityRules``).
  package var lifecycle: StoredLifecycle
  /// When it was requested.
  package var startDate: Double
  /// When it ended (nil while active).
  package var endDate: Double?
  /// When it is (or was) dismissed (nil while active).
  package var dismissalDate: Double?
  /// `token`, `channel:<id>`, or nil.
  package var pushType: String?
  /// Bumped by every write of the record.
  package var revision: UInt64
  /// Bumped by every write that changes the content (what `contentUpdates` follows).
  package var contentRevision: UInt64
  /// The process that wrote this revision.
  package var writerPID: Int32

  /// A new, active record at revision 1.
  package init(
    id: String, attributesType: String, attributes: JSONText, contentState: JSONText, staleDate: Double?,
    relevanceScore: Double, startDate: Double, pushType: String?, writerPID: Int32
  ) {
    self.id = id
    self.attributesType = attributesType
    self.attributes = attributes
    self.contentState = contentState
    self.staleDate = staleDate
    self.relevanceScore = relevanceScore
    self.lifecycle = .active
    self.startDate = startDate
    self.pushType = pushType
    self.revision = 1
    self.contentRevision = 1
    self.writerPID = writerPID
  }
}

/// The activity record file: `<id>.activity`, one JSON object (``ActivityRecord``), at most ``maxRecordBytes``.
/// The decoder checks everything a reader relies on; whatever it accepts encodes back to the same record.
package enum ActivityRecordFormat {
  /// The format this code writes and the only one it reads.
  package static let version = 1
  /// A record is at most this large: attributes and state are each limited to 4 KB of JSON.
  package static let maxRecordBytes = 16 * 1024
  /// Record files are named `<id>.activity`.
  package static let fileSuffix = ".activity"
  /// The longest attributes type name, in bytes.
  static let maxTypeNameBytes = 256

  /// Why bytes are not a valid record.
  package struct Invalid: Error, CustomStringConvertible, Sendable {
    /// What is wrong, in words.
    package let reason: String
    /// The failure `reason`.
    package init(_ reason: String) { self.reason = reason }
    /// The reason.
    package var description: String { reason }
  }

  /// Compact JSON, keys sorted, slashes unescaped: the bytes every limit is measured on.
  package static var encoder: JSONEncoder {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return encoder
  }

  /// Whether `id` is an activity id: an upper-case UUID string, as `UUID().uuidString` makes.
  package static func isActivityID(_ id: some StringProtocol) -> Bool {
    // What `UUID(uuidString:)?.uuidString == id` accepts, checked on the bytes (parsing and printing a UUID was a
    // tenth of an observer's look at a change): 36 bytes, hyphens at 8, 13, 18 and 23, upper-case hex elsewhere.
    guard id.utf8.count == 36 else { return false }
    for (index, byte) in id.utf8.enumerated() {
      switch index {
      case 8, 13, 18, 23: guard byte == UInt8(ascii: "-") else { return false }
      case _ where (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte): continue
      default: guard (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte) else { return false }
      }
    }
    return true
  }

  /// The id in a record file's name, or nil when the name is not one (temp files, the lock, the switch).
  package static func id(fromFileName name: String) -> String? {
    guard name.hasSuffix(fileSuffix) else { return nil }
    let id = name.dropLast(fileSuffix.count)
    return isActivityID(id) ? String(id) : nil
  }

  /// The record's file contents (JSON and a newline); refused over ``maxRecordBytes``. Written by hand
  /// (ActivityJSON): the bytes JSONEncoder wrote (``encodeWithFoundation(_:)``), in a hundredth of its time.
  package static func encode(_ record: ActivityRecord) throws(Invalid) -> [UInt8] {
    var w = ActivityJSON.Writer(capacity: 512)
    var complete = true
    // Keys in the order of their bytes, as `.sortedKeys` puts them; nil optionals left out, as JSONEncoder does.
    w.raw("{\"attributes\":")
    w.json(record.attributes.bytes)
    w.raw(",\"attributesType\":")
    w.string(record.attributesType)
    w.raw(",\"contentRevision\":")
    w.integer(record.contentRevision)
    w.raw(",\"contentState\":")
    w.json(record.contentState.bytes)
    if let date = record.dismissalDate {
      w.raw(",\"dismissalDate\":")
      complete = complete && w.double(date)
    }
    if let date = record.endDate {
      w.raw(",\"endDate\":")
      complete = complete && w.double(date)
    }
    w.raw(",\"format\":")
    w.integer(Int64(record.format))
    w.raw(",\"id\":")
    w.string(record.id)
    w.raw(",\"lifecycle\":")
    w.string(record.lifecycle.rawValue)
    if let pushType = record.pushType {
      w.raw(",\"pushType\":")
      w.string(pushType)
    }
    w.raw(",\"relevanceScore\":")
    complete = complete && w.double(record.relevanceScore)
    w.raw(",\"revision\":")
    w.integer(record.revision)
    if let date = record.staleDate {
      w.raw(",\"staleDate\":")
      complete = complete && w.double(date)
    }
    w.raw(",\"startDate\":")
    complete = complete && w.double(record.startDate)
    w.raw(",\"writerPID\":")
    w.integer(Int64(record.writerPID))
    w.raw("}")
    guard complete else { throw Invalid("cannot encode: a number is not finite") }
    guard w.bytes.count <= maxRecordBytes else {
      throw Invalid("the record would be \(w.bytes.count) bytes, over the limit of \(maxRecordBytes)")
    }
    w.bytes.append(0x0A)
    return w.bytes
  }

  /// The record's file contents as JSONEncoder writes them: the reference ``encode(_:)`` must equal (tests, fuzz).
  package static func encodeWithFoundation(_ record: ActivityRecord) throws(Invalid) -> [UInt8] {
    let bytes: Data
    do { bytes = try encoder.encode(record) } catch { throw Invalid("cannot encode: \(error)") }
    guard bytes.count <= maxRecordBytes else {
      throw Invalid("the record would be \(bytes.count) bytes, over the limit of \(maxRecordBytes)")
    }
    return Array(bytes) + [0x0A]
  }

  /// Reads and checks a record file's contents: read by hand (ActivityJSON), and by JSONDecoder whenever the hand
  /// route gives up (a key it does not know, a number or string it leaves to JSONDecoder), so what is accepted is
  /// what JSONDecoder accepts; then ``validate(_:)``.
  package static func decode(_ bytes: [UInt8]) throws(Invalid) -> ActivityRecord {
    guard bytes.count <= maxRecordBytes else {
      throw Invalid("\(bytes.count) bytes, over the limit of \(maxRecordBytes)")
    }
    guard !bytes.isEmpty else { throw Invalid("empty (truncated)") }
    let record: ActivityRecord
    if let hand = decodeByHand(bytes) { record = hand } else { record = try decodeWithFoundation(bytes) }
    try validate(record)
    return record
  }

  /// The record as JSONDecoder reads it (unchecked): the reference the hand route must agree with.
  package static func decodeWithFoundation(_ bytes: [UInt8]) throws(Invalid) -> ActivityRecord {
    do { return try UntrustedJSON.decode(ActivityRecord.self, from: bytes) } catch {
      throw Invalid("not a record: \(String(describing: error).prefix(200))")
    }
  }

  /// The record's fields read straight from the bytes (unchecked), or nil when this route gives up.
  package static func decodeByHand(_ bytes: [UInt8]) -> ActivityRecord? {
    bytes.withUnsafeBufferPointer { buffer -> ActivityRecord? in
      var reader = ActivityJSON.Reader(buffer)
      var format: Int?, id: String?, attributesType: String?, attributes: JSONText?, contentState: JSONText?
      var staleDate: Double?, relevanceScore: Double?, lifecycle: StoredLifecycle?, startDate: Double?
      var endDate: Double?, dismissalDate: Double?, pushType: String?, revision: UInt64?, contentRevision: UInt64?
      var writerPID: Int32?
      var seen: UInt16 = 0
      func optionalDouble(_ reader: inout ActivityJSON.Reader) -> Double?? {
        if reader.null() { return .some(nil) }
        return reader.double().map { .some($0) }
      }
      // A key seen twice sends the record to JSONDecoder.
      func mark(_ bit: UInt16) -> Bool {
        defer { seen |= bit }
        return seen & bit == 0
      }
      let complete = reader.members { key, reader -> Bool in
        let bit: UInt16
        switch key {
        case "format":
          bit = 1 << 0
          format = reader.integer(Int.self)
          return format != nil && mark(bit)
        case "id":
          bit = 1 << 1
          id = reader.string()
          return id != nil && mark(bit)
        case "attributesType":
          bit = 1 << 2
          attributesType = reader.string()
          return attributesType != nil && mark(bit)
        case "attributes":
          bit = 1 << 3
          attributes = reader.value().flatMap(JSONText.init)
          return attributes != nil && mark(bit)
        case "contentState":
          bit = 1 << 4
          contentState = reader.value().flatMap(JSONText.init)
          return contentState != nil && mark(bit)
        case "staleDate":
          bit = 1 << 5
          guard let value = optionalDouble(&reader) else { return false }
          staleDate = value
          return mark(bit)
        case "relevanceScore":
          bit = 1 << 6
          relevanceScore = reader.double()
          return relevanceScore != nil && mark(bit)
        case "lifecycle":
          bit = 1 << 7
          lifecycle = reader.string().flatMap(StoredLifecycle.init(rawValue:))
          return lifecycle != nil && mark(bit)
        case "startDate":
          bit = 1 << 8
          startDate = reader.double()
          return startDate != nil && mark(bit)
        case "endDate":
          bit = 1 << 9
          guard let value = optionalDouble(&reader) else { return false }
          endDate = value
          return mark(bit)
        case "dismissalDate":
          bit = 1 << 10
          guard let value = optionalDouble(&reader) else { return false }
          dismissalDate = value
          return mark(bit)
        case "pushType":
          bit = 1 << 11
          if reader.null() {
            pushType = nil
          } else {
            guard let value = reader.string() else { return false }
            pushType = value
          }
          return mark(bit)
        case "revision":
          bit = 1 << 12
          revision = reader.integer(UInt64.self)
          return revision != nil && mark(bit)
        case "contentRevision":
          bit = 1 << 13
          contentRevision = reader.integer(UInt64.self)
          return contentRevision != nil && mark(bit)
        case "writerPID":
          bit = 1 << 14
          writerPID = reader.integer(Int32.self)
          return writerPID != nil && mark(bit)
        default:
          return false  // a key of another version: JSONDecoder decides
        }
      }
      guard complete, reader.atEnd(), let format, let id, let attributesType, let attributes, let contentState,
        let relevanceScore, let lifecycle, let startDate, let revision, let contentRevision, let writerPID
      else { return nil }
      var record = ActivityRecord(
        id: id, attributesType: attributesType, attributes: attributes, contentState: contentState,
        staleDate: staleDate, relevanceScore: relevanceScore, startDate: startDate, pushType: pushType,
        writerPID: writerPID)
      record.format = format
      record.lifecycle = lifecycle
      record.endDate = endDate
      record.dismissalDate = dismissalDate
      record.revision = revision
      record.contentRevision = contentRevision
      return record
    }
  }

  /// The rules every record follows.
  package static func validate(_ r: ActivityRecord) throws(Invalid) {
    guard r.format == version else { throw Invalid("format \(r.format), expected \(version)") }
    guard isActivityID(r.id) else { throw Invalid("'\(r.id.prefix(64))' is not an activity id") }
    guard !r.attributesType.isEmpty, r.attributesType.utf8.count <= maxTypeNameBytes else {
      throw Invalid("the attributes type name is empty or over \(maxTypeNameBytes) bytes")
    }
    for (name, date) in [
      ("start", r.startDate), ("stale", r.staleDate), ("end", r.endDate), ("dismissal", r.dismissalDate),
    ] {
      if let date, !date.isFinite { throw Invalid("the \(name) date is not a number") }
    }
    guard r.relevanceScore.isFinite else { throw Invalid("the relevance score is not a number") }
    guard r.revision >= 1, r.contentRevision >= 1, r.contentRevision <= r.revision else {
      throw Invalid("revision \(r.revision) / content revision \(r.contentRevision) are inconsistent")
    }
    switch r.lifecycle {
    case .active:
      guard r.endDate == nil, r.dismissalDate == nil else { throw Invalid("an active record has an end") }
    case .ended, .dismissed:
      guard let end = r.endDate, let dismissal = r.dismissalDate, end >= r.startDate, dismissal >= end else {
        throw Invalid("an ended record needs an end after its start and a dismissal after its end")
      }
    }
  }
}
