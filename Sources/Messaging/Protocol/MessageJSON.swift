import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The JSON of the messages every coordinated access sends — prepares, finishes and plain acks — written and read
/// by hand: JSONEncoder and JSONDecoder were a fifth of a presenter process's CPU per message, and the writer
/// encoded one prepare per presenter process before any could answer. The format is the same JSON: anything this
/// route does not take (another field, an escape in a string, a number that is not a plain integer, a repeated
/// key) goes to JSONDecoder, which decides, so both routes accept and refuse the same files (MessageJSONTests).
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
      for byte in value.utf8 {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), byte]
        case 0..<0x20: out += Array("\\u00".utf8) + [hex(byte >> 4), hex(byte & 0xf)]
        default: out.append(byte)
        }
      }
      out.append(UInt8(ascii: "\""))
    }
    func number(_ value: some BinaryInteger) { out += Array(String(value).utf8) }
    func bool(_ value: Bool) { value ? raw("true") : raw("false") }
    // An optional field is left out when nil, as JSONEncoder does; `key` is `,"name":`.
    func optional(_ key: StaticString, _ value: String?) {
      guard let value else { return }
      raw(key)
      string(value)
    }
    func optional(_ key: StaticString, _ value: (some BinaryInteger)?) {
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
    raw(",\"sender\":")
    string(message.sender.description)
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
    var reader = Reader(bytes: bytes)
    return reader.message()
  }

  static func decode(_ bytes: [UInt8]) -> CoordinationMessage? { bytes.withUnsafeBufferPointer { decode($0) } }

  private enum Value {
    case string(String), integer(Integer), bool(Bool), null
  }

  /// An integer as JSON wrote it, read without making a string of it.
  private struct Integer {
    var negative: Bool
    var magnitude: UInt64

    /// The value as `T`, or nil when it does not fit (as `T(text)` of its text).
    func `as`<T: FixedWidthInteger>(_ type: T.Type) -> T? {
      guard negative && magnitude != 0 else { return T(exactly: magnitude) }
      guard T.isSigned, magnitude - 1 <= UInt64(T.max) else { return nil }
      return T(truncatingIfNeeded: 0 &- magnitude)
    }
  }

  /// A field name of a message or an event, matched on its bytes (`Reader.enumeration`).
  private enum Key: String, CaseIterable {
    case version, id, kind, sender, item, needsAck, isWrite, events, purpose, ackSlot, ackToken
    case presenter, path, newPath
  }

  private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    var at = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The message's fields read straight into their places (a dictionary of fields was most of the decoding); a
    /// key this route does not know, or one seen twice, sends the message to JSONDecoder.
    mutating func message() -> CoordinationMessage? {
      var version: Int?, id: String?, kind: CoordinationMessage.Kind?, sender: ProcessName?, item: String?
      var needsAck: Bool?, isWrite: Bool?, events: [PresenterEvent]?
      var purpose: String?, ackSlot: Int?, ackToken: UInt64?
      var seen: UInt16 = 0
      let parsed = fields { key, reader -> Bool in
        let bit: UInt16
        switch key {
        case .version:
          bit = 1 << 0
          guard case .integer(let number)? = reader.scalar(), let value = number.as(Int.self) else { return false }
          version = value
        case .id:
          bit = 1 << 1
          guard case .string(let value)? = reader.scalar() else { return false }
          id = value
        case .kind:
          bit = 1 << 2
          guard let value = reader.enumeration(Self.messageKinds) else { return false }
          kind = value
        case .sender:
          bit = 1 << 3
          guard case .string(let text)? = reader.scalar(), let value = ProcessName(text) else { return false }
          sender = value
        case .item:
          bit = 1 << 4
          guard case .string(let value)? = reader.scalar() else { return false }
          item = value
        case .needsAck:
          bit = 1 << 5
          guard case .bool(let value)? = reader.scalar() else { return false }
          needsAck = value
        case .isWrite:
          bit = 1 << 6
          guard case .bool(let value)? = reader.scalar() else { return false }
          isWrite = value
        case .events:
          bit = 1 << 7
          guard let value = reader.eventList() else { return false }
          events = value
        case .purpose:
          bit = 1 << 8
          switch reader.scalar() {
          case .null?: purpose = nil
          case .string(let value)?: purpose = value
          default: return false
          }
        case .ackSlot:
          bit = 1 << 9
          guard let value = reader.optionalInteger(as: Int.self) else { return false }
          ackSlot = value
        case .ackToken:
          bit = 1 << 10
          guard let value = reader.optionalInteger(as: UInt64.self) else { return false }
          ackToken = value
        default:
          return false
        }
        guard seen & bit == 0 else { return false }  // a repeated key
        seen |= bit
        return true
      }
      skipSpace()
      guard parsed, at == bytes.count, let version, let id, let kind, let sender, let item, let needsAck, let isWrite,
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

    /// An object: `field` reads the value of each key (false: this route does not take the object).
    mutating func fields(_ field: (Key, inout Reader) -> Bool) -> Bool {
      skipSpace()
      guard take(UInt8(ascii: "{")) else { return false }
      skipSpace()
      if take(UInt8(ascii: "}")) { return true }
      while true {
        skipSpace()
        guard let key = enumeration(Self.keys) else { return false }
        skipSpace()
        guard take(UInt8(ascii: ":")) else { return false }
        skipSpace()
        guard field(key, &self) else { return false }
        skipSpace()
        if take(UInt8(ascii: ",")) { continue }
        return take(UInt8(ascii: "}"))
      }
    }

    /// An optional integer: `.some(nil)` for null, nil when the value is anything but null or an integer of `T`.
    mutating func optionalInteger<T: FixedWidthInteger>(as type: T.Type) -> T?? {
      switch scalar() {
      case .null?: return .some(nil)
      case .integer(let number)?: return number.as(T.self).map { .some($0) }
      default: return nil
      }
    }

    mutating func eventList() -> [PresenterEvent]? {
      guard take(UInt8(ascii: "[")) else { return nil }
      var list: [PresenterEvent] = []
      skipSpace()
      if take(UInt8(ascii: "]")) { return list }
      while true {
        var presenter: String?, kind: PresenterEvent.Kind?, path: String?, newPath: String?
        var seen: UInt8 = 0
        let parsed = fields { key, reader -> Bool in
          let bit: UInt8
          switch key {
          case .presenter:
            bit = 1
            guard case .string(let value)? = reader.scalar() else { return false }
            presenter = value
          case .kind:
            bit = 2
            guard let value = reader.enumeration(Self.eventKinds) else { return false }
            kind = value
          case .path, .newPath:
            bit = key == .path ? 4 : 8
            let text: String?
            switch reader.scalar() {
            case .null?: text = nil
            case .string(let value)?: text = value
            default: return false
            }
            if key == .path { path = text } else { newPath = text }
          default:
            return false
          }
          guard seen & bit == 0 else { return false }
          seen |= bit
          return true
        }
        guard parsed, let presenter, let kind else { return nil }
        list.append(PresenterEvent(presenter: presenter, kind: kind, path: path, newPath: newPath))
        skipSpace()
        if take(UInt8(ascii: ",")) {
          skipSpace()
          continue
        }
        guard take(UInt8(ascii: "]")) else { return nil }
        return list
      }
    }

    mutating func scalar() -> Value? {
      guard at < bytes.count else { return nil }
      switch bytes[at] {
      case UInt8(ascii: "\""): return string().map { .string($0) }
      case UInt8(ascii: "t"): return word("true") ? .bool(true) : nil
      case UInt8(ascii: "f"): return word("false") ? .bool(false) : nil
      case UInt8(ascii: "n"): return word("null") ? .null : nil
      default: return integer().map { .integer($0) }
      }
    }

    /// Each case of `T` by the bytes of its raw value (made once per type: `allCases` is an array made anew).
    static func names<T: CaseIterable & RawRepresentable>(_ type: T.Type) -> [([UInt8], T)] where T.RawValue == String {
      T.allCases.map { (Array($0.rawValue.utf8), $0) }
    }
    static let messageKinds = names(CoordinationMessage.Kind.self)
    static let eventKinds = names(PresenterEvent.Kind.self)
    static let keys = names(Key.self)

    /// A string naming a case in `names`, matched on its bytes (no `String` made); nil for any other value.
    mutating func enumeration<T>(_ names: [([UInt8], T)]) -> T? {
      guard let text = stringBytes() else { return nil }
      return names.first { $0.0.count == text.count && $0.0.elementsEqual(text) }?.1
    }

    /// A string without escapes, as valid UTF-8 (an escape sends the message to JSONDecoder).
    mutating func string() -> String? {
      guard let text = stringBytes() else { return nil }
      // ASCII (nearly every string of a message) is valid UTF-8 as it stands; `String(validating:)` is generic over
      // the encoding and was a sixth of decoding.
      if text.allSatisfy({ $0 < 0x80 }) { return String(decoding: text, as: UTF8.self) }
      return String(validating: text, as: UTF8.self)
    }

    /// The bytes of a string without escapes or control characters, between its quotes.
    mutating func stringBytes() -> UnsafeBufferPointer<UInt8>? {
      guard take(UInt8(ascii: "\"")) else { return nil }
      let start = at
      while at < bytes.count, bytes[at] != UInt8(ascii: "\"") {
        if bytes[at] == UInt8(ascii: "\\") || bytes[at] < 0x20 { return nil }
        at += 1
      }
      guard at < bytes.count else { return nil }
      at += 1
      return UnsafeBufferPointer(rebasing: bytes[start..<(at - 1)])
    }

    /// An integer as JSON writes it: an optional minus, then 0 or digits without a leading zero; nil past 64 bits.
    mutating func integer() -> Integer? {
      let start = at
      let negative = take(UInt8(ascii: "-"))
      let digits = at
      var magnitude: UInt64 = 0
      while at < bytes.count, case let digit = bytes[at] &- UInt8(ascii: "0"), digit < 10 {
        let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
        let (sum, o2) = times10.addingReportingOverflow(UInt64(digit))
        guard !o1, !o2 else { return nil }
        magnitude = sum
        at += 1
      }
      guard at > digits, at - digits == 1 || bytes[digits] != UInt8(ascii: "0"), at - start <= 21 else { return nil }
      if at < bytes.count, bytes[at] == UInt8(ascii: ".") || bytes[at] | 0x20 == UInt8(ascii: "e") { return nil }
      return Integer(negative: negative, magnitude: magnitude)
    }

    mutating func word(_ text: StaticString) -> Bool {
      let count = text.utf8CodeUnitCount
      guard at + count <= bytes.count else { return false }
      let same = text.withUTF8Buffer { word in (0..<count).allSatisfy { bytes[at + $0] == word[$0] } }
      if same { at += count }
      return same
    }

    mutating func take(_ byte: UInt8) -> Bool {
      guard at < bytes.count, bytes[at] == byte else { return false }
      at += 1
      return true
    }

    mutating func skipSpace() {
      while at < bytes.count {
        switch bytes[at] {
        case 0x20, 0x09, 0x0a, 0x0d: at += 1
        default: return
        }
      }
    }
  }
}
