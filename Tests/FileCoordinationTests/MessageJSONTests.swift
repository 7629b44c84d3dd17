import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// The hand-written JSON route of messages (`MessageJSON`) against Foundation's: whatever the fast decoder accepts,
/// JSONDecoder accepts too and reads the same message; what it writes, JSONDecoder reads back unchanged.
///
/// Mutants this suite catches (each run once, watched failing, then restored):
/// - escapes read as plain text (`string()` not refusing a backslash): `whatTheFastRouteWritesJSONDecoderReads`,
///   `whatJSONEncoderWritesTheFastRouteReadsTheSameOrLeaves`, `aMessageWithEscapesGoesToJSONDecoder`;
/// - a repeated key read last-wins (no `seen` check in `message()`, or in `eventList()`):
///   `bothRoutesAgreeOnDamagedMessages` (JSONDecoder keeps the first; refusing is the safe choice);
/// - quotes in a path written unescaped (`"` left to the default case of `encode`'s `string`):
///   `whatTheFastRouteWritesJSONDecoderReads`.
@Suite(.runSlot(.minutes(10))) struct MessageJSONTests {
  /// One message of each shape the fast route writes, with names that need escaping and some that do not.
  static func samples() -> [CoordinationMessage] {
    let sender = ProcessName(pid: 4242, startTime: 1_732_000_000_123)
    let names = [
      "Documents/h.txt", "Documents/café", "Documents/say \"hi\"", "a\\b", "tab\there", "ünïcödé/ß", "x",
    ]
    var messages: [CoordinationMessage] = []
    for (index, name) in names.enumerated() {
      var prepare = CoordinationMessage(
        id: "\(sender).\(index)", kind: .prepare, sender: sender, item: name, needsAck: index % 2 == 0,
        isWrite: index % 3 == 0,
        events: [
          PresenterEvent(presenter: "\(sender).7", kind: .relinquishToWriter),
          PresenterEvent(presenter: "\(sender).8", kind: .accommodateSubitemDeletion, path: name),
        ])
      if index % 2 == 0 {
        prepare.ackSlot = 2 + index
        prepare.ackToken = UInt64.max - UInt64(index)
      }
      if index % 3 == 1 { prepare.purpose = "purpose \(name)" }
      messages.append(prepare)
      messages.append(
        CoordinationMessage(
          id: "\(sender).\(index + 100)", kind: .finish, sender: sender, item: name, needsAck: false,
          isWrite: true,
          events: [PresenterEvent(presenter: "\(sender).7", kind: .subitemDidMove, path: name, newPath: name + "2")]))
      messages.append(
        CoordinationMessage(
          id: "\(sender).\(index + 200)", kind: .ack, sender: sender, item: "", needsAck: false, events: []))
    }
    return messages
  }

  /// JSONEncoder's bytes with sorted keys: one spelling per message, to compare two decoded messages.
  static func canonical(_ message: CoordinationMessage?) -> Data? {
    guard let message else { return nil }
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    return try? encoder.encode(message)
  }

  static func slow(_ bytes: [UInt8]) -> CoordinationMessage? {
    try? JSONDecoder().decode(CoordinationMessage.self, from: Data(bytes))
  }

  @Test func whatTheFastRouteWritesJSONDecoderReads() throws {
    for message in Self.samples() {
      let bytes = try #require(MessageJSON.encode(message))
      let slow = Self.slow(bytes)
      #expect(slow != nil, "\(String(decoding: bytes, as: UTF8.self))")
      #expect(Self.canonical(slow) == Self.canonical(message), "\(String(decoding: bytes, as: UTF8.self))")
      // Without escapes the fast route reads it too, the same.
      let fast = MessageJSON.decode(bytes)
      if !bytes.contains(UInt8(ascii: "\\")) {
        #expect(fast != nil, "\(String(decoding: bytes, as: UTF8.self))")
      }
      if let fast { #expect(Self.canonical(fast) == Self.canonical(message)) }
    }
  }

  @Test func whatJSONEncoderWritesTheFastRouteReadsTheSameOrLeaves() throws {
    for message in Self.samples() {
      let bytes = Array(try JSONEncoder().encode(message))
      if let fast = MessageJSON.decode(bytes) { #expect(Self.canonical(fast) == Self.canonical(message)) }
    }
  }

  @Test func messagesWithOtherFieldsAreWrittenByJSONEncoder() {
    var message = Self.samples()[0]
    message.failures = ["no"]
    #expect(MessageJSON.encode(message) == nil)
    #expect(Self.slow(message.encoded())?.failures == ["no"])
  }

  @Test func aMessageWithEscapesGoesToJSONDecoder() {
    let text =
      #"{"version":1,"id":"1.2.3","kind":"prepare","sender":"1.2","item":"Documents\/a","needsAck":false,"isWrite":false,"events":[]}"#
    #expect(MessageJSON.decode(Array(text.utf8)) == nil)
    #expect(Self.slow(Array(text.utf8))?.item == "Documents/a")
  }

  /// Hand-made damage and 20,000 random mutations: the fast route never accepts what JSONDecoder refuses, and
  /// never reads a message differently.
  @Test func bothRoutesAgreeOnDamagedMessages() throws {
    let base =
      #"{"version":1,"id":"1.2.3","kind":"prepare","sender":"1.2","item":"Documents/a","needsAck":true,"isWrite":false,"events":[{"presenter":"1.2.3","kind":"relinquishToWriter"}],"ackSlot":3,"ackToken":99}"#
    func replacing(_ old: String, _ new: String) -> String { base.replacingOccurrences(of: old, with: new) }
    // Integers are read in place (no string made): the edges of each type, and -0. Field names are matched on
    // their bytes: a known name with a byte more or less, or escaped.
    let edges: [String] = [
      replacing(#""ackToken":99"#, #""ackToken":18446744073709551615"#),
      replacing(#""ackToken":99"#, #""ackToken":-0"#), replacing(#""version":1"#, #""version":-0"#),
      replacing(#""ackSlot":3"#, #""ackSlot":-9223372036854775808"#),
      replacing(#""ackSlot":3"#, #""ackSlot":-9223372036854775809"#),
      replacing(#""ackSlot":3"#, #""ackSlot":9223372036854775807"#),
      replacing(#""ackSlot":3"#, #""ackSlot":99999999999999999999999"#),
      replacing(#""ackSlot":3"#, #""ackSlots":3"#), replacing(#""ackSlot":3"#, #""ackSlo":3"#),
      replacing(#""item":"#, #""\u0069tem":"#),
    ]
    let handMade: [String] =
      edges + [
        base.replacingOccurrences(of: #""ackToken":99"#, with: #""ackToken":99,"ackToken":98"#),  // repeated
        base.replacingOccurrences(
          of: #""kind":"relinquishToWriter"}"#,
          with: #""kind":"accommodateSubitemDeletion","path":"Documents/a","path":"Documents/b"}"#),  // in an event
        base.replacingOccurrences(of: #""version":1"#, with: #""version":1.0"#),
        base.replacingOccurrences(of: #""version":1"#, with: #""version":01"#),
        base.replacingOccurrences(of: #""ackSlot":3"#, with: #""ackSlot":-3"#),
        base.replacingOccurrences(of: #""ackToken":99"#, with: #""ackToken":-99"#),
        base.replacingOccurrences(of: #""ackToken":99"#, with: #""ackToken":18446744073709551616"#),
        base.replacingOccurrences(of: #""needsAck":true"#, with: #""needsAck":1"#),
        base.replacingOccurrences(of: #""sender":"1.2""#, with: #""sender":"1.x""#),
        base.replacingOccurrences(of: #""kind":"prepare""#, with: #""kind":"unknown""#),
        base.replacingOccurrences(of: #","ackSlot":3"#, with: #","ackSlot":null"#),
        base.replacingOccurrences(of: #""isWrite":false,"#, with: ""),
        base.replacingOccurrences(of: #"}]"#, with: #","extra":1}]"#),
        base + " x", " \n" + base + "\t", "\u{FEFF}" + base, "[" + base + "]",
      ]
    var inputs = handMade.map { Array($0.utf8) }
    var generator = SystemRandomNumberGenerator()
    let bytes = Array(base.utf8)
    for _ in 0..<20_000 {
      var mutated = bytes
      for _ in 0..<Int.random(in: 1...3, using: &generator) {
        let index = Int.random(in: 0..<mutated.count, using: &generator)
        switch Int.random(in: 0..<3, using: &generator) {
        case 0: mutated[index] = UInt8.random(in: 0...255, using: &generator)
        case 1: mutated.remove(at: index)
        default: mutated.insert(mutated[Int.random(in: 0..<mutated.count, using: &generator)], at: index)
        }
        if mutated.isEmpty { mutated = [0] }
      }
      inputs.append(mutated)
    }
    var fastTaken = 0
    for input in inputs {
      guard let fast = MessageJSON.decode(input) else { continue }
      fastTaken += 1
      let slow = Self.slow(input)
      #expect(
        slow != nil, "the fast route accepted what JSONDecoder refuses: \(String(decoding: input, as: UTF8.self))")
      #expect(
        Self.canonical(fast) == Self.canonical(slow), "the routes disagree: \(String(decoding: input, as: UTF8.self))")
    }
    #expect(fastTaken > 0)
  }
}
