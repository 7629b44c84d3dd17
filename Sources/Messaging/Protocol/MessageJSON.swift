import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The JSON of the messages every coordinated access sends — prepares, finishes and plain acks — written and read
/// by hand: JSONEncoder and JSONDecoder were a fifth of a presenter process's CPU per message, and the writer
/// encoded one prepare per presenter process before any could answer. The format is the same JSON: anything this
/// route does not take (another field, an escape in a string, a number that is not a plain integer, a repeated
/// key) goes to JSONDecoder, which decides, so both routes accept and refuse the same files (MessageJSONTests). The
/// reading is `JSONScanner`'s, with no escapes; this file maps the fields.
enum MessageJSON {
  /// The message as JSON, or nil when it has a field only JSONEncoder writes (requests, URLs, failures).
  static func encode(_ message: CoordinationMessage) -> [UInt8]? {
    guard message.failures == nil, message.url == nil, message.opened == nil, message.scheme == nil,
      message.request == nil, message.deliveryID == nil, message.requestAnswer == nil
    else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(192 + 96 * message.events.count)
    func raw(_ text: StaticString) { text.withUTF8Buffer { out.append(contentsOf: $0) } }
    func string(_ value: String) {
      out.append(UInt8(ascii: "\""))
      var value = value
      value.withUTF8 { bytes in
        // Nearly every string needs no escape: copied whole (a byte at a time was most of encoding a prepare).
        guard bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
          return out.append(contentsOf: bytes)
        }
        for byte in bytes {
          switch byte {
          case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), byte]
          case 0..<0x20: out += Array("\\u00".utf8) + [hex(byte >> 4), hex(byte & 0xf)]
          default: out.append(byte)
          }
        }
      }
      out.append(UInt8(ascii: "\""))
    }
    func number(_ value: Int) { DecimalDigits.append(Int64(value), to: &out) }
    func number(_ value: UInt64) { DecimalDigits.append(value, to: &out) }
    func bool(_ value: Bool) { value ? raw("true") : raw("false") }
    // An optional field is left out when nil, as JSONEncoder does; `key` is `,"name":`.
    func optional(_ key: StaticString, _ value: String?) {
      guard let value else { return }
      raw(key)
      string(value)
    }
    func optional(_ key: StaticString, _ value: Int?) {
      guard let value else { return }
      raw(key)
      number(value)
    }
    func optional(_ key: StaticString, _ value: UInt64?) {
      guard let value else { return }
      raw(key)
      number(value)
    }
    raw("{\"version\":")
    number(message.version)
    raw(",\"id\":")
    string(message.id)
    raw(",\"kind\":")
    string(message.kind.rawValue)
    raw(",\"sender\":\"")  // `<pid>.<start>`: digits only, written in place (`description` made a string)
    number(Int(message.sender.pid))
    raw(".")
    number(message.sender.startTime)
    raw("\"")
    optional(",\"purpose\":", message.purpose)
    raw(",\"item\":")
    string(message.item)
    raw(",\"needsAck\":")
    bool(message.needsAck)
    raw(",\"isWrite\":")
    bool(message.isWrite)
    raw(",\"events\":[")
    for (index, event) in message.events.enumerated() {
      if index > 0 { raw(",") }
      raw("{\"presenter\":")
      string(event.presenter)
      raw(",\"kind\":")
      string(event.kind.rawValue)
      optional(",\"path\":", event.path)
      optional(",\"newPath\":", event.newPath)
      raw("}")
    }
    raw("]")
    optional(",\"ackSlot\":", message.ackSlot)
    optional(",\"ackToken\":", message.ackToken)
    raw("}")
    return out
  }

  private static func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 48 + nibble : 87 + nibble }

  /// The message, or nil when this route does not take the bytes (JSONDecoder then decides).
  static func decode(_ bytes: UnsafeBufferPointer<UInt8>) -> CoordinationMessage? {
    var scanner = JSONScanner(bytes)
    return message(&scanner)
  }

  static func decode(_ bytes: [UInt8]) -> CoordinationMessage? { bytes.withUnsafeBufferPointer { decode($0) } }

  /// A field name of a message or an event, matched on its bytes (`enumeration`).
  private enum Key: String, CaseIterable {
    case version, id, kind, sender, item, needsAck, isWrite, events, purpose, ackSlot, ackToken
    case presenter, path, newPath
  }

  /// The message's fields read straight into their places (a dictionary of fields was most of the decoding); a key
  /// this route does not know, or one seen twice, sends the message to JSONDecoder.
  private static func message(_ scanner: inout JSONScanner) -> CoordinationMessage? {
    var version: Int?, id: String?, kind: CoordinationMessage.Kind?, sender: ProcessName?, item: String?
    var needsAck: Bool?, isWrite: Bool?, events: [PresenterEvent]?
    var purpose: String?, ackSlot: Int?, ackToken: UInt64?
    var seen: UInt16 = 0
    // The name tables read once per message (each read of a static is a `swift_once` call: once per field before).
    let tables = Self.tables
    let parsed = fields(&scanner, tables.keys) { key, scanner -> Bool in
      let bit: UInt16
      switch key {
      case .version:
        bit = 1 << 0
        guard let value = scanner.integer(Int.self) else { return false }
        version = value
      case .id:
        bit = 1 << 1
        guard let value = scanner.string(escapes: .none) else { return false }
        id = value
      case .kind:
        bit = 1 << 2
        guard let value = enumeration(&scanner, tables.messageKinds) else { return false }
        kind = value
      case .sender:
        bit = 1 << 3
        guard let text = scanner.string(escapes: .none), let value = ProcessName(text) else { return false }
        sender = value
      case .item:
        bit = 1 << 4
        guard let value = scanner.string(escapes: .none) else { return false }
        item = value
      case .needsAck:
        bit = 1 << 5
        guard let value = scanner.bool() else { return false }
        needsAck = value
      case .isWrite:
        bit = 1 << 6
        guard let value = scanner.bool() else { return false }
        isWrite = value
      case .events:
        bit = 1 << 7
        guard let value = eventList(&scanner, tables) else { return false }
        events = value
      case .purpose:
        bit = 1 << 8
        guard let value = optionalString(&scanner) else { return false }
        purpose = value
      case .ackSlot:
        bit = 1 << 9
        guard let value = optionalInteger(&scanner, as: Int.self) else { return false }
        ackSlot = value
      case .ackToken:
        bit = 1 << 10
        guard let value = optionalInteger(&scanner, as: UInt64.self) else { return false }
        ackToken = value
      default:
        return false
      }
      guard seen & bit == 0 else { return false }  // a repeated key
      seen |= bit
      return true
    }
    guard parsed, scanner.atEnd(), let version, let id, let kind, let sender, let item, let needsAck, let isWrite,
      let events
    else { return nil }
    var message = CoordinationMessage(
      id: id, kind: kind, sender: sender, item: item, needsAck: needsAck, isWrite: isWrite, events: events)
    message.version = version
    message.purpose = purpose
    message.ackSlot = ackSlot
    message.ackToken = ackToken
    return message
  }

  /// An object of known keys: `field` reads the value of each (false: this route does not take the object).
  private static func fields(
    _ scanner: inout JSONScanner, _ keys: [([UInt8], Key)], _ field: (Key, inout JSONScanner) -> Bool
  ) -> Bool {
    scanner.object { scanner in
      guard let key = enumeration(&scanner, keys), scanner.take(UInt8(ascii: ":")) else { return false }
      scanner.skipSpace()
      return field(key, &scanner)
    }
  }

  /// An optional string: `.some(nil)` for null, nil when the value is anything but null or a string without escapes.
  private static func optionalString(_ scanner: inout JSONScanner) -> String?? {
    if scanner.null() { return .some(nil) }
    return scanner.string(escapes: .none).map { .some($0) }
  }

  /// An optional integer: `.some(nil)` for null, nil when the value is anything but null or an integer of its type.
  /// One per type: the scanner's non-generic readers (JSONScanner.integer).
  private static func optionalInteger(_ scanner: inout JSONScanner, as type: Int.Type) -> Int?? {
    if scanner.null() { return .some(nil) }
    return scanner.integer(Int.self).map { .some($0) }
  }

  private static func optionalInteger(_ scanner: inout JSONScanner, as type: UInt64.Type) -> UInt64?? {
    if scanner.null() { return .some(nil) }
    return scanner.integer(UInt64.self).map { .some($0) }
  }

  private static func eventList(_ scanner: inout JSONScanner, _ tables: Tables) -> [PresenterEvent]? {
    var list: [PresenterEvent] = []
    let parsed = scanner.elements { scanner in
      var presenter: String?, kind: PresenterEvent.Kind?, path: String?, newPath: String?
      var seen: UInt8 = 0
      let parsed = fields(&scanner, tables.keys) { key, scanner -> Bool in
        let bit: UInt8
        switch key {
        case .presenter:
          bit = 1
          guard let value = scanner.string(escapes: .none) else { return false }
          presenter = value
        case .kind:
          bit = 2
          guard let value = enumeration(&scanner, tables.eventKinds) else { return false }
          kind = value
        case .path, .newPath:
          bit = key == .path ? 4 : 8
          guard let text = optionalString(&scanner) else { return false }
          if key == .path { path = text } else { newPath = text }
        default:
          return false
        }
        guard seen & bit == 0 else { return false }
        seen |= bit
        return true
      }
      guard parsed, let presenter, let kind else { return false }
      list.append(PresenterEvent(presenter: presenter, kind: kind, path: path, newPath: newPath))
      return true
    }
    return parsed ? list : nil
  }

  /// Each case of `T` by the bytes of its raw value (made once per type: `allCases` is an array made anew).
  private static func names<T: CaseIterable & RawRepresentable>(_ type: T.Type) -> [([UInt8], T)]
  where T.RawValue == String {
    T.allCases.map { (Array($0.rawValue.utf8), $0) }
  }
  private struct Tables {
    let messageKinds = MessageJSON.names(CoordinationMessage.Kind.self)
    let eventKinds = MessageJSON.names(PresenterEvent.Kind.self)
    let keys = MessageJSON.names(Key.self)
  }
  private static let tables = Tables()

  /// A string naming a case in `names`, matched on its bytes (no `String` made); nil for any other value. By length
  /// first, then the bytes (`RawMemory.equal`): `elementsEqual` over each name was a sixth of decoding a prepare.
  @inline(__always)  // specialised for each table: no run-time type metadata per name matched
  private static func enumeration<T>(_ scanner: inout JSONScanner, _ names: [([UInt8], T)]) -> T? {
    guard let text = scanner.stringBytes(), let start = text.baseAddress else { return nil }
    for (name, value) in names where name.count == text.count {
      if name.withUnsafeBytes({ RawMemory.equal($0.baseAddress, start, count: text.count) }) { return value }
    }
    return nil
  }
}
