import Foundation
import LiveActivities
import SystemLayer
import TestSupport
import Testing

/// The record codec: the fuzz seed reads, round-trips, and the checks refuse what readers must not trust. The
/// hand-written reader and writer (ActivityJSON) agree with JSONDecoder and JSONEncoder, byte for byte.
///
/// Mutants these tests catch (each made once by hand, seen failing, restored): the writer keeping `.0` on whole
/// doubles (`theHandWriterWritesJSONEncodersBytes`); a repeated key taken by the hand reader, the last one winning
/// (`theHandReaderLeavesTheUnusualToJSONDecoder`).
@Suite(.runSlot(.minutes(10))) struct ActivityRecordFormatTests {
  static let seedPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../Fuzz/container-seeds/activity-record").standardizedFileURL.path

  @Test func seedRoundTrips() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())  // the parser byte
    let record = try ActivityRecordFormat.decode(bytes)
    #expect(record.attributesType == "ScoreboardAttributes")
    #expect(try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record)) == record)
    #expect(ActivityRules.effective(record, now: record.startDate + 60).state == .ended)
    #expect(ActivityRules.effective(record, now: record.dismissalDate!).state == .dismissed)
  }

  @Test func refusesInconsistentRecords() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())
    var record = try ActivityRecordFormat.decode(bytes)
    record.lifecycle = .active  // an active record with an end
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    record = try ActivityRecordFormat.decode(bytes)
    record.id = "not-a-uuid"
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    record = try ActivityRecordFormat.decode(bytes)
    record.contentRevision = record.revision + 1
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    #expect(throws: ActivityRecordFormat.Invalid.self) { try ActivityRecordFormat.decode([]) }
    #expect(throws: ActivityRecordFormat.Invalid.self) { try ActivityRecordFormat.decode(Array(bytes.prefix(40))) }
  }

  /// Random records with the values that trip JSON writers: escapes, control characters, non-ASCII keys, doubles of
  /// every size, nested arrays and objects, absent optionals.
  static func records(count: Int, seed: UInt64) -> [ActivityRecord] {
    var rng = SplitMix64(seed: seed)
    let pieces = [
      "a", "Z", "\"", "\\", "/", "\n", "\t", "\u{1}", "\u{1f}", "\u{7f}", "é", "e\u{301}", "😀", "\u{2028}", " ", "10",
      "9", "_",
    ]
    let doubles: [Double] = [
      0, -0.0, 0.5, 1e-5, 1e21, 1e16, 1e15, 0.1, 1.7976931348623157e308, .leastNonzeroMagnitude, -2.5, 123456.789,
    ]
    func string() -> String {
      (0..<Int.random(in: 0...4, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
    }
    func double() -> Double {
      if Bool.random(using: &rng) { return doubles.randomElement(using: &rng)! }
      let d = Double(bitPattern: rng.next())
      return d.isFinite ? d : 1.25
    }
    func value(_ depth: Int) -> JSONValue {
      switch Int.random(in: 0..<(depth < 3 ? 8 : 6), using: &rng) {
      case 0: return .null
      case 1: return .bool(Bool.random(using: &rng))
      case 2: return .integer(Int64(bitPattern: rng.next()) >> Int64.random(in: 0..<63, using: &rng))
      case 3: return .double(double())
      case 4, 5: return .string(string())
      case 6: return .array((0..<Int.random(in: 0...3, using: &rng)).map { _ in value(depth + 1) })
      default:
        var object: [String: JSONValue] = [:]
        for _ in 0..<Int.random(in: 0...4, using: &rng) { object[string()] = value(depth + 1) }
        return .object(object)
      }
    }
    return (0..<count).map { _ in
      var r = ActivityRecord(
        id: UUID().uuidString, attributesType: "Type" + string(), attributes: JSONText(value(1))!,
        contentState: JSONText(value(0))!,
        staleDate: Bool.random(using: &rng) ? double() : nil, relevanceScore: double(), startDate: double(),
        pushType: Bool.random(using: &rng) ? string() : nil, writerPID: Int32.random(in: 1...Int32.max, using: &rng))
      r.revision = rng.next() >> 1
      r.contentRevision = r.revision >> 3
      if Bool.random(using: &rng) {
        r.lifecycle = .ended
        r.endDate = double()
        r.dismissalDate = double()
      }
      return r
    }
  }

  @Test func theHandWriterWritesJSONEncodersBytes() throws {
    for record in Self.records(count: 400, seed: 37) {
      let hand = try ActivityRecordFormat.encode(record)
      #expect(
        hand == (try ActivityRecordFormat.encodeWithFoundation(record)), "\(String(decoding: hand, as: UTF8.self))")
      #expect(
        record.contentState.bytes == Array(try ActivityRecordFormat.encoder.encode(record.contentState)))
    }
  }

  @Test func theHandReaderReadsWhatJSONDecoderReads() throws {
    for record in Self.records(count: 400, seed: 38) {
      let bytes = try ActivityRecordFormat.encode(record)
      let hand = ActivityRecordFormat.decodeByHand(bytes)
      #expect(hand != nil, "the hand route gave up on \(String(decoding: bytes, as: UTF8.self))")
      #expect(hand == (try ActivityRecordFormat.decodeWithFoundation(bytes)))
      let state = record.contentState.bytes
      #expect(ActivityJSON.decode(state) == (try JSONDecoder().decode(JSONValue.self, from: Data(state))))
    }
  }

  /// What the hand route leaves to JSONDecoder, and what both refuse: the answer is JSONDecoder's.
  @Test func theHandReaderLeavesTheUnusualToJSONDecoder() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())
    let text = String(decoding: bytes, as: UTF8.self)
    let likes = #""awayLikes":3"#
    let variants = [
      text.replacingOccurrences(of: #""revision":7"#, with: #""revision":7.0"#),  // JSONDecoder reads 7.0 as 7
      text.replacingOccurrences(of: #""format":1"#, with: #""format":1,"future":[1,{"a":null}]"#),  // a later key
      // Repeated: JSONDecoder keeps the first.
      text.replacingOccurrences(of: #""revision":7"#, with: #""revision":7,"revision":8"#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":3.5,"x":"\ud83d\ude00\u00e9\/""#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":"\ud800""#),  // a lone surrogate
      text.replacingOccurrences(of: likes, with: #""awayLikes":1e400"#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":1e-400"#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":123456789012345678.0"#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":1.5e0"#),
      text.replacingOccurrences(of: likes, with: #""awayLikes":01"#),
      text.replacingOccurrences(of: likes, with: "\"awayLikes\":\"a\tb\""),
      text.replacingOccurrences(of: likes, with: #""awayLikes":[1,]"#),
      text.replacingOccurrences(
        of: likes, with: #""awayLikes":"# + String(repeating: "[", count: 200) + String(repeating: "]", count: 200)),
      " \n" + text + " \n\n", text + "x",
    ]
    for variant in variants {
      let bytes = Array(variant.utf8)
      let foundation = try? ActivityRecordFormat.decodeWithFoundation(bytes)
      if let hand = ActivityRecordFormat.decodeByHand(bytes) { #expect(hand == foundation, "\(variant)") }
      let valid = foundation.map { record in (try? ActivityRecordFormat.validate(record)) != nil } ?? false
      #expect((try? ActivityRecordFormat.decode(bytes)) == (valid ? foundation : nil), "\(variant)")
    }
  }

  /// Numbers where JSONDecoder's Int64 reads the text again as a Decimal (a whole double from 2^53): the hand reader
  /// gives JSONDecoder's value — the fraction cut off, not the double's rounding — or gives up. (The fuzz harness found
  /// `1800000601800000600.5`, which the hand reader had read as its double, …512.)
  @Test func theHandReaderReadsLargeNumbersAsJSONDecoderDoes() throws {
    let numbers = [
      "1800000601800000600.5", "4503599627370497.5", "9007199254740993.5", "9007199254740994.5", "-9007199254740993.5",
      "9007199254740993.5000000000", "9007199254740993.1234", "90071992547409930e-1", "9007199254740993000e-3",
      "0.9007199254740993e16", "9.1e15", "9.1e+15", "1e16", "1e18", "1.0000000000000001", "12.000", "7.0", "0.5",
      "9223372036854775295.0", "9223372036854775807.0", "9223372036854775807.000", "-9223372036854775808.0",
      "-9223372036854775807.0", "-9223372036854775807.5", "18446744073709551615e-1", "1844674407370955161.5",
      "1e19", "-1e19", "1e-400", "9007199254740993e0000000000000000000000000000000000000",
    ]
    for number in numbers {
      let text = #"{"a":"# + number + "}"
      let hand = ActivityJSON.decode(Array(text.utf8))
      let foundation = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
      if let hand {
        #expect(hand == foundation, "\(number): hand \(hand), JSONDecoder \(String(describing: foundation))")
      }
    }
    // Each of these has a place where only the Decimal rule gives JSONDecoder's answer.
    for number in ["1800000601800000600.5", "9007199254740993.5", "9.1e15", "9223372036854775807.000"] {
      #expect(
        ActivityJSON.decode(Array((#"{"a":"# + number + "}").utf8)) != nil, "the hand reader gave up on \(number)")
    }
  }

  /// A number JSONDecoder would stop the process on (its Decimal parser traps once its exponent leaves Int8) is refused
  /// with an error, never handed to it: the hand reader gives up, the JSONDecoder route refuses first.
  @Test func aNumberFoundationStopsOnIsRefused() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())
    let text = String(decoding: bytes, as: UTF8.self)
    for number in [
      "9007199254740993" + String(repeating: "0", count: 200) + "e-200",
      "0." + String(repeating: "0", count: 150) + "9007199254740993e167",
    ] {
      let variant = Array(text.replacingOccurrences(of: #""awayLikes":3"#, with: #""awayLikes":"# + number).utf8)
      #expect(variant != bytes)
      #expect(ActivityRecordFormat.decodeByHand(variant) == nil)
      #expect(throws: ActivityRecordFormat.Invalid.self) { try ActivityRecordFormat.decode(variant) }
    }
  }

  /// The fuzz harness's check on the committed corpus and on byte-level mutations of the seed: whatever the hand
  /// route reads, JSONDecoder reads to the same record and JSON value.
  @Test func theHandRouteAgreesWithFoundationOnTheCorpusAndMutations() throws {
    let corpus = URL(fileURLWithPath: Self.seedPath).deletingLastPathComponent()
      .appendingPathComponent("../corpora/ContainerFilesFuzz").standardizedFileURL
    var inputs: [[UInt8]] = []
    for name in try FileManager.default.contentsOfDirectory(atPath: corpus.path) {
      let bytes = Array(try Data(contentsOf: corpus.appendingPathComponent(name)))
      if let first = bytes.first, first % 9 == 4 { inputs.append(Array(bytes.dropFirst())) }
    }
    let seed = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())
    var rng = SplitMix64(seed: 3)
    let alphabet = Array(#"{}[]",:0123456789.eE+-\u/"bfnrt tfn"#.utf8) + [0x00, 0x1f, 0x7f, 0xc3, 0xa9, 0xff]
    for _ in 0..<3000 {
      var bytes = seed
      for _ in 0..<Int.random(in: 1...3, using: &rng) {
        let at = Int.random(in: 0..<bytes.count, using: &rng)
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: bytes[at] = alphabet.randomElement(using: &rng)!
        case 1: bytes.insert(alphabet.randomElement(using: &rng)!, at: at)
        default: bytes.remove(at: at)
        }
      }
      inputs.append(bytes)
    }
    var agreed = 0
    for bytes in inputs {
      if let hand = ActivityRecordFormat.decodeByHand(bytes) {
        #expect(
          hand == (try? ActivityRecordFormat.decodeWithFoundation(bytes)), "\(String(decoding: bytes, as: UTF8.self))")
        agreed += 1
      }
      if let hand = ActivityJSON.decode(bytes) {
        #expect(
          hand == (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))),
          "\(String(decoding: bytes, as: UTF8.self))")
      }
    }
    #expect(agreed > 100)  // the hand route did read most of what is well formed
  }
}
