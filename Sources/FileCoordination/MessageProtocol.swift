import Foundation
import Synchronization
import SystemLayer

/// One callback a process must run on one of its presenters.
struct PresenterEvent: Codable, Sendable, Hashable {
  enum Kind: String, Codable, Sendable, CaseIterable {
    // Before the access (the sender waits for the ack).
    case relinquishToReader, relinquishToWriter, save, accommodateDeletion, accommodateSubitemDeletion
    // After it.
    case didChange, didMove, subitemDidAppear, subitemDidChange, subitemDidMove

    var isBefore: Bool {
      switch self {
      case .relinquishToReader, .relinquishToWriter, .save, .accommodateDeletion, .accommodateSubitemDeletion: true
      default: false
      }
    }
  }

  var presenter: String
  var kind: Kind
  /// The subitem (subitem events) or the new location (`didMove`), container-relative.
  var path: String?
  /// The destination of `subitemDidMove`.
  var newPath: String?
}

/// The message protocol, in one place.
///
/// A coordinated access talks to every process that presents an affected item through that process's inbox,
/// `.coordination/inbox/<pid>.<start>/`: prepares and finishes as datagrams on its socket, everything else as files
/// (MessageTransport.swift says how, and the order rules that let both coexist):
///
/// 1. **prepare** (`<id>.prepare`), before the accessor runs: the "before" callbacks (relinquish, save,
///    accommodate deletion) for that process's presenters. It also tells the process that a coordinated write
///    of the item is under way, so inotify events it causes are not reported a second time as uncoordinated (and
///    its watcher need not wake for them: `Watcher.beginQuiet`).
///    When it carries callbacks the receiver answers with **ack** (`<id>.ack` in the sender's inbox) once every
///    callback called its completion handler, listing any errors the presenters gave. The sender checks a
///    receiver's liveness before a prepare only when the prepare cannot go as a datagram: a dead receiver's socket
///    refuses, and a dead one is reaped and sent nothing (`Messenger.sendUnlessDead`).
///    An ack that carries nothing (no presenter failed) skips the file: the prepare names a slot of the sender's
///    **ack board** (`.acks` in its inbox, a shared mapping) and a token; the receiver stores the token in the slot
///    and posts the board's futex, which wakes the waiting thread itself — two thread hops and five file system
///    calls fewer than an ack file, whose path (inotify → watcher thread → waiting thread) stays for acks with
///    failures and for `openURL` answers.
/// 2. The sender waits for all acks — bounded by its timeout, and never for a dead process (liveness is checked
///    while waiting) — then takes its locks and runs the accessor. It spins briefly on its board before sleeping
///    on the futex: an answer within the spin costs no wake-up at all.
/// 3. **finish** (`<id>.finish`), after the accessor and after the locks are released: the "after" callbacks
///    (didChange, didMove, subitem events); then the receiver runs the reacquirers its presenters handed over
///    for this id. If the sender dies first, the receiver notices on its next liveness tick and runs them anyway.
///    Finishes leave from the sender's outbox queue, so the coordinated call returns without waiting for them (as
///    Apple's presenters, ours hear "after" callbacks asynchronously); any later message of the sender waits until
///    the outbox is empty, so a process always receives one access's finish before the next access's prepare, and
///    the outbox is emptied when the process exits normally.
///
/// Every message is JSON: one datagram, or a file written to a temp name and renamed into the inbox (atomic
/// publish: inotify's IN_MOVED_TO means it is complete). Receivers treat both as untrusted: size-limited, strictly
/// decoded, paths validated, anything else dropped (a file deleted) with a logged error.
struct CoordinationMessage: Codable, Sendable {
  /// `openURL` asks a process's URL handler to open `url` (URLOpening.swift); its ack carries `opened`.
  /// `request` asks its request handler (app intents) to answer `request`; its ack carries `requestAnswer`.
  enum Kind: String, Codable, Sendable, CaseIterable { case prepare, finish, ack, openURL, request }

  static let formatVersion = 1
  static let maxBytes = 1 << 20
  static let maxEvents = 65_536

  var version: Int = CoordinationMessage.formatVersion
  /// `<sender pid>.<start>.<n>`; an ack repeats the id of its prepare.
  var id: String
  var kind: Kind
  var sender: ProcessName
  var purpose: String?
  /// The accessed item.
  var item: String
  var needsAck: Bool
  /// A write (its inotify events are the coordinator's, not an outside tool's).
  var isWrite: Bool = false
  var events: [PresenterEvent]
  /// Ack only: errors presenters passed to their completion handlers.
  var failures: [String]?
  /// `openURL` only: the URL to open.
  var url: String?
  /// Ack of an `openURL` only: what the handler answered.
  var opened: Bool?
  /// `request`, and `openURL` of a handed-over `file:` URL: the scheme whose handler it is for.
  var scheme: String?
  /// `request` only: the request's bytes (their format is the sender's and receiver's business).
  var request: Data?
  /// `request` only: the delivery's id, the same on a retry (DeliveryLedger.swift).
  var deliveryID: String?
  /// Ack of a `request` only: what the receiver answered.
  var requestAnswer: RequestAnswerRecord?
  /// Prepare only: where on the sender's ack board to store `ackToken` instead of sending an ack file.
  var ackSlot: Int?
  var ackToken: UInt64?

  var fileName: String { "\(id).\(kind.rawValue)" }

  /// The message in `bytes`, validated; `fileName` is the inbox file it came in (nil: a datagram of the inbox
  /// socket, MessageTransport.swift), which must be the message's own.
  static func decode(_ bytes: [UInt8], fileName inbox: String?) throws(GroupContainerError) -> CoordinationMessage {
    let decoded = bytes.withUnsafeBufferPointer { bytes in
      Result { () throws(GroupContainerError) in
        try decode(bytes, fileName: inbox)
      }
    }
    return try decoded.get()
  }

  /// `decode(_:fileName:)` on bytes in place (a datagram, in the receive buffer).
  static func decode(
    _ bytes: UnsafeBufferPointer<UInt8>, fileName inbox: String?
  ) throws(GroupContainerError) -> CoordinationMessage {
    let fileName = inbox ?? "a datagram"  // what errors name
    guard bytes.count <= maxBytes else { throw .corruptFile(fileName, reason: "message over \(maxBytes) bytes") }
    let message: CoordinationMessage
    do {
      message =
        try MessageJSON.decode(bytes) ?? JSONDecoder().decode(CoordinationMessage.self, from: Data(buffer: bytes))
    } catch {
      throw .corruptFile(fileName, reason: "message is not valid JSON of the expected shape")
    }
    guard message.version == formatVersion else {
      throw .corruptFile(fileName, reason: "message version \(message.version) is not \(formatVersion)")
    }
    // An id is `<sender>.<number>`; an ack repeats the id of the prepare it answers, which names that prepare's
    // sender.
    guard inbox == nil || message.fileName == inbox, let idSender = Self.sender(inID: message.id),
      message.kind == .ack || idSender == message.sender
    else {
      throw .corruptFile(fileName, reason: "message id '\(message.id)' does not match its file and sender")
    }
    guard message.events.count <= maxEvents, (message.failures?.count ?? 0) <= maxEvents else {
      throw .corruptFile(fileName, reason: "message has too many entries")
    }
    if let slot = message.ackSlot {
      guard AckBoard.slots.contains(slot), message.ackToken ?? 0 != 0 else {
        throw .corruptFile(fileName, reason: "ack slot \(slot) or its token is out of range")
      }
    }
    if !message.item.isEmpty { try ContainerPath.check(message.item) }
    if message.kind == .openURL {
      guard let url = message.url else { throw .corruptFile(fileName, reason: "an openURL message without a URL") }
      do { _ = try OpenURLRule.validate(url) } catch { throw .corruptFile(fileName, reason: error.description) }
    }
    if let scheme = message.scheme {
      do { _ = try OpenURLRule.validate(scheme: scheme) } catch {
        throw .corruptFile(fileName, reason: error.description)
      }
    }
    if message.kind == .request {
      guard message.scheme != nil, message.request != nil, let delivery = message.deliveryID,
        DeliveryLedger.isValid(delivery)
      else {
        throw .corruptFile(fileName, reason: "a request without a scheme, a body or a valid delivery id")
      }
    }
    for event in message.events {
      if let path = event.path, !path.isEmpty { try ContainerPath.check(path) }
      if let path = event.newPath, !path.isEmpty { try ContainerPath.check(path) }
      guard Self.sender(inID: event.presenter) != nil else {
        throw .corruptFile(fileName, reason: "message names an invalid presenter '\(event.presenter)'")
      }
      if message.kind == .prepare && !event.kind.isBefore || message.kind == .finish && event.kind.isBefore {
        throw .corruptFile(fileName, reason: "\(event.kind.rawValue) does not belong in a \(message.kind.rawValue)")
      }
    }
    return message
  }

  /// The process named by an id of the form `<pid>.<start>.<number>` (a message's, or a presenter's), or nil when
  /// `id` is not of that form.
  static func sender(inID id: String) -> ProcessName? {
    let utf8 = id.utf8
    guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")) else { return nil }
    let number = utf8[utf8.index(after: dot)...]
    guard !number.isEmpty, number.count <= 20, number.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }),
      UInt64(Substring(number)) != nil
    else { return nil }
    return ProcessName(Substring(utf8[..<dot]))
  }

  func encoded() -> [UInt8] { MessageJSON.encode(self) ?? Array((try? JSONEncoder().encode(self)) ?? Data()) }
}

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

/// The ack of a `request`: its status and, when replied, the reply's bytes.
struct RequestAnswerRecord: Codable, Sendable {
  enum Status: String, Codable, Sendable { case replied, interrupted, notHandled }
  var status: Status
  var reply: Data?
}

/// A process's ack board: `<inbox>/.acks`, a `MappedCounters` file its owner creates and sizes; its words are
/// declared here once (a test checks `layout`). Senders of prepares never create one, they only map an existing one.
enum AckBoard {
  static let fileName = ".acks"
  /// A `ChangeSignal` the owner waits on (it listens for good: `listenForever`), posted by whoever stores an ack.
  static let sequence = 0, listeners = 1
  /// The slots, each lent to one pending prepare at a time (`Messenger.reserveAck`): the answerer stores the
  /// prepare's token there. Every other word of the file: as many prepares in flight as that, then acks are files.
  static let slots = 2..<MappedCounters.capacity

  static let layout = MappedLayout(
    file: CoordinationPaths.inbox + "/<p>/" + fileName,
    [("sequence", MappedLayout.word(sequence)), ("listeners", MappedLayout.word(listeners)), ("slots", slots)])
}

/// Sends messages, receives this process's inbox, and matches acks to waiting senders.
final class Messenger: @unchecked Sendable {  // `acks` is guarded by `condition`; the rest is immutable or a Mutex
  private let space: CoordinationSpace
  private let sequence = Atomic<UInt64>(0)
  private let condition = NSCondition()
  private var acks: [String: CoordinationMessage] = [:]
  /// Ids nobody waits for any more (timed out): their late acks are dropped instead of kept forever.
  private var abandoned: Set<String> = []
  private var inbox: String { space.inbox(of: space.me) }
  private let board: MappedCounters
  private let boardSignal: ChangeSignal
  /// Slots of our board free to lend. A slot whose ack never came is not given back: a late ack must not answer
  /// the next prepare that would borrow it.
  private let freeSlots = Mutex<[Int]>(Array(AckBoard.slots.reversed()))
  private let tokens = Atomic<UInt64>(0)
  /// Other processes' boards, mapped on first use.
  private let boards = Mutex<[ProcessName: MappedCounters]>([:])
  private let outbox = DispatchQueue(label: "GroupContainer.outbox")
  private let queued = Atomic<Int>(0)
  private let inboxWatch = Mutex<Watcher.Token?>(nil)
  /// This process's inbox, opened beneath the container when it is watched (again when the container is made anew):
  /// each message is read and removed relative to it — one `openat` and one `unlinkat` — instead of from the
  /// container's descriptor down (three more system calls and two path walks per message).
  private let inboxDirectory = Mutex<SystemFD?>(nil)
  /// How long a waiting sender polls its board before sleeping: longer than a typical answer on an idle machine.
  static let spinNanoseconds: UInt64 = 500_000
  /// Up to how many answering processes a sender spins at all.
  static let spinProcesses = 4
  /// Datagrams for prepares and finishes, files for the rest (MessageTransport.swift).
  let transport: MessageTransport

  init(space: CoordinationSpace) throws(FileSystemError) {
    self.space = space
    transport = MessageTransport(space: space)
    board = try MappedCounters(fd: Self.openOwnBoard(space))
    boardSignal = ChangeSignal(board, sequence: AckBoard.sequence, listeners: AckBoard.listeners)
    boardSignal.listenForever()
    Self.flushAtExit
  }

  /// After the container was removed and made again (CoordinationSpace.recreateAfterRemoval): this process's board
  /// is mapped onto a new `.acks` file, and other processes' boards, mapped from deleted files, are forgotten.
  func rebindBoard() throws(FileSystemError) {
    try board.rebind(to: Self.openOwnBoard(space))
    boards.withLock { $0.removeAll() }
  }

  func start() throws(FileSystemError) {
    if let reason = Watcher.shared.unavailableReason {
      // Locks need no inotify, and acks come on the board; ack files (failures, openURL answers) are read by
      // `awaitAcks` scanning the inbox. Only presenters need the watcher, and they are refused.
      CoordinationSpace.logger.warning("coordination works without presenters in this process: \(reason)")
      return
    }
    try watchInbox()
    _ = Watcher.shared.onOverflow { [self] in scanInbox() }
    _ = Watcher.shared.onTick { [self] in
      space.host.checkSenders()
      // The container removed under us. The inbox's own IN_DELETE_SELF cannot be relied on: the mapped `.acks`
      // (and `counters`) pin the directories' dentries, so the kernel reports their deletion only at unmap.
      if (try? FileSystem.status(inbox)) ?? nil == nil { space.host.containerRemoved() }
    }
    scanInbox()
  }

  /// Watches this process's inbox. Its removal (the container deleted under us) makes the presenter host recreate
  /// and re-arm everything; the liveness tick checks for it too (see `start`).
  func watchInbox() throws(FileSystemError) {
    // A watch of a removed inbox may still be in place (its deletion not yet reported): drop it, so the new one
    // watches the new directory instead of joining the old watch.
    if let old = inboxWatch.withLock({ $0.take() }) { Watcher.shared.cancel(old) }
    let directory = try space.root.openDirectory(CoordinationPaths.inbox(of: space.me))
    inboxDirectory.withLock { current in
      current?.close()
      current = directory
    }
    transport.bind(in: directory) { [self] bytes in receive(datagram: bytes) }
    // Messages arrive by rename only: asking for nothing else (but the inbox's own deletion) keeps the temp file's
    // own events from waking the watcher thread (twice per message otherwise).
    let token = try Watcher.shared.watch(inbox, mask: Watcher.movedTo | Watcher.deleteSelf) { [self] event in
      if event.mask & (Watcher.deleteSelf | Watcher.ignored) != 0 {
        if (try? FileSystem.status(inbox)) ?? nil == nil { space.host.containerRemoved() }
        return
      }
      guard event.mask & Watcher.movedTo != 0, !event.name.hasPrefix(".") else { return }
      receive(fileNamed: event.name)
    }
    inboxWatch.withLock { $0 = token }
  }

  func nextMessageID() -> String {
    "\(space.me).\(sequence.add(1, ordering: .relaxed).newValue)"
  }

  /// Lends a slot of our board to a prepare that needs an ack (nil when all are lent: the ack comes as a file).
  func reserveAck(for message: inout CoordinationMessage) {
    guard let slot = freeSlots.withLock({ $0.popLast() }) else { return }
    let token = tokens.add(1, ordering: .relaxed).newValue
    board.store(slot, 0)
    message.ackSlot = slot
    message.ackToken = token
  }

  /// Gives back the slot `reserveAck` lent to a prepare that was never sent.
  func returnAck(of message: CoordinationMessage) {
    guard let slot = message.ackSlot else { return }
    freeSlots.withLock { $0.append(slot) }
  }

  /// This process's board, `.coordination/inbox/<me>/.acks`, opened (created and sized when missing) beneath the
  /// container's descriptor.
  private static func openOwnBoard(_ space: CoordinationSpace) throws(FileSystemError) -> SystemFD {
    let inbox = try space.root.openDirectory(CoordinationPaths.inbox(of: space.me))
    defer { inbox.close() }
    return try inbox.openOrCreate(AckBoard.fileName, mode: space.fileMode, size: Int64(MappedCounters.fileSize))
  }

  /// Answers `prepare` on its sender's board; false when that is not possible (then send an ack file).
  func postAck(for prepare: CoordinationMessage) -> Bool {
    guard let slot = prepare.ackSlot, let token = prepare.ackToken else { return false }
    let sender = prepare.sender
    let remote = boards.withLock { boards -> MappedCounters? in
      if let known = boards[sender] { return known }
      // Only an existing board, beneath the container (never created here); MappedCounters refuses non-files.
      let relative = CoordinationPaths.inbox(of: sender) + "/" + AckBoard.fileName
      guard let fd = try? space.root.openFile(relative, .readWrite), let opened = try? MappedCounters(fd: fd)
      else { return nil }
      if boards.count >= 64 { boards.removeAll() }  // bounded: senders come and go
      boards[sender] = opened
      return opened
    }
    guard let remote else { return false }
    remote.store(slot, token)
    ChangeSignal(remote, sequence: AckBoard.sequence, listeners: AckBoard.listeners).post()
    return true
  }

  /// Publishes `message` in `process`'s inbox. A missing inbox means the process is gone.
  func send(_ message: CoordinationMessage, to process: ProcessName) throws(FileSystemError) {
    flushOutbox()
    _ = try write(message, to: process)
  }

  /// Sends a prepare to `process` unless it is dead; false when it is (nothing was sent). Liveness is asked only
  /// when the prepare cannot go as a datagram: one that the kernel took is queued on a socket its receiver holds
  /// open, and a receiver that dies after that is found by the sender's periodic check while it waits for acks.
  /// (Asked for every receiver, liveness was four system calls per presenter process in the writer's own time.)
  func sendUnlessDead(_ message: CoordinationMessage, to process: ProcessName) throws(FileSystemError) -> Bool {
    flushOutbox()
    return try write(message, to: process, unlessDead: true)
  }

  private func write(
    _ message: CoordinationMessage, to process: ProcessName, unlessDead: Bool = false
  ) throws(FileSystemError) -> Bool {
    let bytes = message.encoded()
    if message.kind == .prepare || message.kind == .finish, transport.send(bytes, to: process) { return true }
    if unlessDead && !space.isAlive(process) { return false }
    try space.root.replaceFile(
      atPath: space.inbox(of: process) + "/" + message.fileName, with: bytes, mode: space.fileMode)
    transport.sentFile()
    return true
  }

  /// Sends `messages` from the outbox queue, in order with every other message of this process. One block for all
  /// of an access's finishes: the caller returns after one enqueue, not one per presenter process.
  func sendLater(_ messages: [(CoordinationMessage, ProcessName)]) {
    guard !messages.isEmpty else { return }
    queued.add(1, ordering: .relaxed)
    outbox.async { [self] in
      defer { queued.subtract(1, ordering: .releasing) }
      for (message, process) in messages {
        do { _ = try write(message, to: process) } catch {
          CoordinationSpace.logger.debug("process \(process) did not take a message: \(error)")
        }
      }
    }
  }

  /// Returns once every `sendLater` message is sent.
  func flushOutbox() {
    if queued.load(ordering: .acquiring) > 0 { outbox.sync {} }
  }

  /// Empties the outboxes of every space when the process exits normally (`exit` or the end of `main`).
  private static let flushAtExit: Void = {
    atexit { for space in CoordinationSpace.all { space.messenger?.flushOutbox() } }
  }()

  /// Everything in the inbox, oldest messages first (after an overflow the kernel may have dropped their events).
  func scanInbox() {
    let names = ((try? FileSystem.listDirectory(inbox)) ?? []).filter { !$0.hasPrefix(".") }
    // A prepare before the finish of the same id.
    for name in names.sorted(by: { ($0.hasSuffix(".finish") ? 1 : 0, $0) < ($1.hasSuffix(".finish") ? 1 : 0, $1) }) {
      receive(fileNamed: name)
    }
  }

  /// Reads, deletes and dispatches one inbox file. Runs on the watcher thread.
  private func receive(fileNamed name: String) {
    let path = inbox + "/" + name
    let bytes: [UInt8]
    do {
      // Under the lock: `watchInbox` may swap the descriptor meanwhile (the container made anew).
      bytes = try inboxDirectory.withLock { directory throws(FileSystemError) -> [UInt8] in
        guard let directory else { return try space.root.readFile(atPath: path, limit: CoordinationMessage.maxBytes) }
        let file = try directory.open(name, .readOnly)
        defer { file.close() }
        return try file.readRegularFile(limit: CoordinationMessage.maxBytes).bytes
      }
    } catch {
      if error.errno == .noSuchFileOrDirectory { return }  // gone: already handled by a scan
      if error.isPassing, let delay = readAgainDelay(name) {
        // Kept and read again on this thread (in order with every other receive): an answer dropped here made its
        // sender report "did not answer" although the receiver had done the work.
        CoordinationSpace.logger.warning("inbox entry '\(path)' did not read (\(error)); read again in \(delay) ms")
        if Watcher.shared.unavailableReason == nil {
          DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) { [weak self] in
            guard let messenger = self else { return }
            Watcher.shared.afterQueuedEvents { messenger.receive(fileNamed: name) }
          }
        }  // else the waiting sender's own scans read it again (`awaitAcks`)
        return
      }
      CoordinationSpace.logger.error("dropping unreadable inbox entry '\(path)': \(error)")
      try? space.root.removeTree(atPath: path)
      return
    }
    unreadable.withLock { tries in if !tries.isEmpty { tries[name] = nil } }
    // Removed once dispatched: the unlink (a journaled metadata write) stays off the handshake's critical path.
    // Both happen on this thread, so a rescan never sees a dispatched message again.
    defer {
      inboxDirectory.withLock { directory in
        if let directory { try? directory.removeFile(name) } else { try? space.root.removeFile(atPath: path) }
      }
    }
    let message: CoordinationMessage
    do { message = try CoordinationMessage.decode(bytes, fileName: name) } catch {
      CoordinationSpace.logger.error("dropping inbox entry '\(path)': \(error)")
      return
    }
    dispatch(message)
  }

  /// Inbox entries that failed to read for a passing reason, and how many times.
  private let unreadable = Mutex<[String: Int]>([:])

  /// How long to wait before reading `name` again (10 ms, doubling: about 2.5 s in all), or nil once it has failed
  /// too often: then it is dropped like any unreadable entry.
  private func readAgainDelay(_ name: String) -> Int? {
    unreadable.withLock { tries in
      if tries.count > 1024 { tries.removeAll() }  // bounded: names come and go
      let n = tries[name, default: 0] + 1
      guard n <= 8 else {
        tries[name] = nil
        return nil
      }
      tries[name] = n
      return 10 << (n - 1)
    }
  }

  /// Decodes and dispatches one datagram of the inbox socket (only prepares and finishes come so). Runs on the
  /// watcher thread.
  private func receive(datagram bytes: UnsafeBufferPointer<UInt8>) {
    let message: CoordinationMessage
    do { message = try CoordinationMessage.decode(bytes, fileName: nil) } catch {
      CoordinationSpace.logger.error("dropping a datagram of the inbox socket: \(error)")
      return
    }
    guard message.kind == .prepare || message.kind == .finish else {
      CoordinationSpace.logger.error(
        "dropping a datagram of the inbox socket: a \(message.kind.rawValue) comes as a file")
      return
    }
    dispatch(message, asDatagram: true)
  }

  private func dispatch(_ message: CoordinationMessage, asDatagram: Bool = false) {
    if message.kind == .openURL || message.kind == .request {
      space.urlHandlers.receive(message)
    } else if message.kind == .ack {
      condition.lock()
      if abandoned.remove(message.id) == nil { acks[message.id] = message }
      condition.unlock()
      boardSignal.post()  // wakes the waiting sender
    } else {
      space.host.receive(message, asDatagram: asDatagram)
    }
  }

  struct AckOutcome {
    var failures: [(ProcessName, String)] = []
    var timedOut: [ProcessName] = []
    var acks: [String: CoordinationMessage] = [:]
  }

  /// Waits for the acks of `pending` (message id → target process) until `timeout`, skipping targets that die.
  /// `slots` names the board slot and token of the prepares that lent one (`reserveAck`).
  func awaitAcks(
    _ pending: [String: ProcessName], slots: [String: (slot: Int, token: UInt64)] = [:], timeout: Duration,
    isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> AckOutcome {
    var outcome = AckOutcome()
    var waiting = pending
    let start = MonotonicClock.nanoseconds()
    let deadline =
      start + UInt64(timeout.components.seconds) * 1_000_000_000
      + UInt64(timeout.components.attoseconds / 1_000_000_000)
    // Spin only for a few answers: many take longer than the spin anyway, and a spinning sender takes a core from
    // the very processes it waits for.
    let spinUntil = start + (Set(pending.values).count <= Self.spinProcesses ? Self.spinNanoseconds : 0)
    var nextLivenessCheck = start + 20_000_000
    while true {
      let seen = boardSignal.sequenceValue  // before looking: a post after this wakes the wait below
      for (id, lent) in slots where waiting[id] != nil && board.load(lent.slot) == lent.token {
        waiting[id] = nil
        freeSlots.withLock { $0.append(lent.slot) }
      }
      condition.lock()
      for id in Array(waiting.keys) {
        if let ack = acks.removeValue(forKey: id) {
          outcome.acks[id] = ack
          outcome.failures += (ack.failures ?? []).map { (waiting[id]!, $0) }
          if let lent = slots[id] { freeSlots.withLock { $0.append(lent.slot) } }
          waiting[id] = nil
        }
      }
      condition.unlock()
      if waiting.isEmpty { break }
      if isCancelled() { throw .cancelled }
      var now = MonotonicClock.nanoseconds()
      if now >= deadline {
        outcome.timedOut = Array(Set(waiting.values))
        break
      }
      if now >= nextLivenessCheck {
        if Watcher.shared.unavailableReason != nil { scanInbox() }  // no watcher delivers ack files here
        let dead = Set(waiting.values).filter { !space.isAlive($0) }
        waiting = waiting.filter { !dead.contains($0.value) }
        nextLivenessCheck = MonotonicClock.nanoseconds() + 20_000_000
        continue
      }
      // Poll first (the answer usually comes within the spin, and then no thread has to be woken), then sleep.
      while now < spinUntil && boardSignal.sequenceValue == seen { now = MonotonicClock.nanoseconds() }
      // The spin may end past the next check (a preempted thread): then no sleep, and no UInt64 underflow trap.
      let wakeAt = min(deadline, nextLivenessCheck)
      if boardSignal.sequenceValue == seen && wakeAt > now {
        boardSignal.wait(whileSequenceIs: seen, nanoseconds: wakeAt - now)
      }
    }
    return outcome
  }

  /// Forgets acks that arrive after their sender stopped waiting.
  func discardAcks(_ ids: some Sequence<String>) {
    condition.lock()
    if abandoned.count > 4096 { abandoned.removeAll() }  // bounded: a dead process never acks
    for id in ids where acks.removeValue(forKey: id) == nil { abandoned.insert(id) }
    condition.unlock()
  }
}
