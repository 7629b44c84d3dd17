import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// Values every format must carry unchanged.
let portableSamples: [PropertyListValue] = [
  "", "plain ascii", "héllo wörld", "中文字符", "astral 😀 \u{10FFFD}", "markup <&> \"quotes\" 'apos' ]]>",
  "line\nbreaks\r\nand\rreturns\tand tabs", .string(String(repeating: "long string ", count: 40)),
  0, 1, 14, 15, 16, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, -1, -255, -65_536,
  .integer(PropertyListInteger(Int64.min)), .integer(PropertyListInteger(Int64.max)),
  .integer(PropertyListInteger(UInt64(Int64.max) + 1)), .integer(PropertyListInteger(UInt64.max)),
  .integer(PropertyListInteger(Int128.max)), .integer(PropertyListInteger(Int128.min)),
  .integer(PropertyListInteger(Int128(Int64.min) - 1)),
  0.0, -0.0, 1.5, 3.141592653589793, 1e300, -1e-300, .real(.leastNonzeroMagnitude), .real(.greatestFiniteMagnitude),
  .real(.infinity), .real(-.infinity), .real(.nan),
  true, false,
  .date(PropertyListDate(secondsSinceReferenceDate: 0)),
  .date(PropertyListDate(secondsSinceReferenceDate: 725_857_445)),
  .date(PropertyListDate(secondsSinceReferenceDate: -978_307_200)),
  .date(PropertyListDate(secondsSinceReferenceDate: -63_113_904_000)),
  .data([]), .data([0]), .data(Array(0...255)), .data(Array(repeating: 0xAB, count: 1000)),
  [], [:], [[]], [[:]], ["key": [:]],
  [1, "two", 3.0, [true, false], ["nested": ["deeper": [.data([1, 2, 3])]]]],
  ["": "empty key", "😀": "astral key", "a&b<c>": "escaped key", "Z": 1, "a": 2],
  .array(Array(repeating: "shared", count: 100)),
]

@Suite("Round trips", .runSlot(.minutes(10)))
struct RoundTripTests {
  @Test("every sample survives a round trip", arguments: portableSamples, PropertyListFormat.allCases)
  func roundTrip(value: PropertyListValue, format: PropertyListFormat) throws {
    let bytes = try value.encoded(as: format)
    #expect(PropertyListFormat.detect(bytes) == format)
    let decoded = try PropertyListValue(bytes: bytes)
    #expect(equivalent(value, decoded), "\(value) became \(decoded)")
  }

  @Test("binary keeps fractional dates, NaN bits and odd strings exactly")
  func binaryOnlyValues() throws {
    let values: [PropertyListValue] = [
      .date(PropertyListDate(secondsSinceReferenceDate: 0.25)),
      .date(PropertyListDate(secondsSinceReferenceDate: -1e300)),
      .date(PropertyListDate(secondsSinceReferenceDate: .nan)),
      .real(Double(bitPattern: 0x7FF0_0000_0000_0001)),
      .string("nul\u{0}inside and control \u{1B}"),
      .string("\u{FFFE}\u{FFFF}"),
    ]
    for value in values {
      let decoded = try PropertyListValue(bytes: value.encoded(as: .binary))
      if case .real(let real) = value {
        #expect(decoded.realValue?.bitPattern == real.bitPattern)
      } else {
        #expect(equivalent(value, decoded), "\(value) became \(decoded)")
      }
    }
  }

  @Test("randomized trees round-trip in both formats", arguments: 0..<4)
  func randomTrees(seed: UInt64) throws {
    var rng = SeededGenerator(state: seed)
    for _ in 0..<50 {
      let value = randomValue(&rng)
      for format in PropertyListFormat.allCases {
        let decoded = try PropertyListValue(bytes: value.encoded(as: format))
        #expect(equivalent(value, decoded), "\(format): \(value) became \(decoded)")
      }
    }
  }

  @Test("integers use the smallest encoding; values past Int64 use 16 bytes")
  func integerSizes() throws {
    func objectBytes(_ value: PropertyListInteger) throws -> [UInt8] {
      let file = try BinaryPropertyListWriter.write(.integer(value))
      let offsetTable = Int(file[file.count - 1])
      return Array(file[8..<offsetTable])
    }
    #expect(try objectBytes(0) == [0x10, 0x00])
    #expect(try objectBytes(255) == [0x10, 0xFF])
    #expect(try objectBytes(256) == [0x11, 0x01, 0x00])
    #expect(try objectBytes(65_536) == [0x12, 0x00, 0x01, 0x00, 0x00])
    #expect(try objectBytes(4_294_967_296) == [0x13, 0, 0, 0, 1, 0, 0, 0, 0])
    #expect(try objectBytes(-1) == [0x13] + Array(repeating: 0xFF, count: 8))
    #expect(
      try objectBytes(PropertyListInteger(UInt64.max)) == [0x14] + Array(repeating: 0, count: 8)
        + Array(repeating: 0xFF, count: 8))
    #expect(
      try objectBytes(PropertyListInteger(Int128(Int64.min) - 1)) == [0x14] + Array(repeating: 0xFF, count: 8) + [0x7F]
        + Array(repeating: 0xFF, count: 7))
  }

  @Test("strings are ASCII when possible, otherwise UTF-16BE with surrogate pairs")
  func stringEncodings() throws {
    let ascii = try BinaryPropertyListWriter.write("abc")
    #expect(Array(ascii[8..<12]) == [0x53, 0x61, 0x62, 0x63])
    let astral = try BinaryPropertyListWriter.write("é😀")
    #expect(Array(astral[8..<15]) == [0x63, 0x00, 0xE9, 0xD8, 0x3D, 0xDE, 0x00])
  }

  @Test("output is deterministic: keys sorted, equal scalars stored once")
  func determinism() throws {
    var forward: [String: PropertyListValue] = [:]
    var backward: [String: PropertyListValue] = [:]
    let keys = (0..<50).map { "key\($0)" }
    for key in keys { forward[key] = "v" }
    for key in keys.reversed() { backward[key] = "v" }
    for format in PropertyListFormat.allCases {
      #expect(
        try PropertyListValue.dictionary(forward).encoded(as: format)
          == PropertyListValue.dictionary(backward).encoded(as: format))
    }
    let unsorted: PropertyListValue = ["b": 1, "a": 2, "C": 3]
    let xml = String(decoding: try unsorted.encoded(as: .xml), as: UTF8.self)
    let positions = ["<key>C</key>", "<key>a</key>", "<key>b</key>"].map { xml.range(of: $0)!.lowerBound }
    #expect(positions == positions.sorted())
    // 100 copies of one string: 1 array + 1 string object.
    let shared = try PropertyListValue.array(Array(repeating: "same", count: 100)).encoded(as: .binary)
    #expect(bigEndianValue(shared, at: shared.count - 24) == 2)
  }

  @Test("large files use wider references and offsets")
  func wideReferencesAndOffsets() throws {
    let many = PropertyListValue.array((0..<70_000).map { .integer(PropertyListInteger($0)) })
    let bytes = try many.encoded(as: .binary)
    #expect(bytes[bytes.count - 25] == 4)  // object-ref size
    #expect(bytes[bytes.count - 26] == 4)  // offset-int size
    #expect(try PropertyListValue(bytes: bytes) == many)

    let big = PropertyListValue.array([.data(Array(repeating: 7, count: 70_000)), "after"])
    let bigBytes = try big.encoded(as: .binary)
    #expect(bigBytes[bigBytes.count - 26] == 4)
    #expect(try PropertyListValue(bytes: bigBytes) == big)
  }

  @Test("writers refuse UIDs with a clear error")
  func uidsAreReadOnly() throws {
    for format in PropertyListFormat.allCases {
      let error = #expect(throws: PropertyListError.self) {
        try PropertyListValue.array([.uid(3)]).encoded(as: format)
      }
      #expect(error?.kind == .unsupportedValue)
      #expect(error?.description.contains("UID") == true)
    }
  }

  @Test("XML writer refuses what XML cannot hold")
  func xmlUnsupported() {
    let values: [PropertyListValue] = [
      "control \u{1}", "nul \u{0}",
      .date(PropertyListDate(secondsSinceReferenceDate: .infinity)),
      .date(PropertyListDate(secondsSinceReferenceDate: 1e300)),
    ]
    for value in values {
      let error = #expect(throws: PropertyListError.self) { try value.encoded(as: .xml) }
      #expect(error?.kind == .unsupportedValue)
    }
  }

  @Test("writers enforce the depth limit")
  func writerDepthLimit() {
    var value: PropertyListValue = []
    for _ in 0..<20 { value = [value] }
    let limits = PropertyListLimits(maxDepth: 10)
    for format in PropertyListFormat.allCases {
      let error = #expect(throws: PropertyListError.self) { try value.encoded(as: format, limits: limits) }
      #expect(error?.kind == .limitExceeded)
    }
  }

  @Test("dates convert to and from calendar fields")
  func dateComponents() throws {
    let date = try #require(PropertyListDate(year: 2024, month: 1, day: 2, hour: 3, minute: 4, second: 5))
    #expect(date.secondsSinceReferenceDate == 725_857_445)
    #expect(date.secondsSince1970 == 1_704_164_645)
    let parts = try #require(date.components)
    #expect(parts == (2024, 1, 2, 3, 4, 5))
    #expect(PropertyListDate(year: 2023, month: 2, day: 29) == nil)
    #expect(PropertyListDate(year: 2024, month: 2, day: 29) != nil)
    #expect(PropertyListDate(secondsSinceReferenceDate: -0.5).components! == (2000, 12, 31, 23, 59, 59))
    let xml = String(decoding: try PropertyListValue.date(date).encoded(as: .xml), as: UTF8.self)
    #expect(xml.contains("<date>2024-01-02T03:04:05Z</date>"))
  }

  @Test("accessors and literals")
  func accessors() {
    let value: PropertyListValue = ["name": "x", "n": 5, "list": [1.5, true], "big": 18_446_744_073_709_551_615]
    #expect(value["name"]?.stringValue == "x")
    #expect(value["n"]?.intValue == 5)
    #expect(value["big"]?.uint64Value == UInt64.max)
    #expect(value["big"]?.int64Value == nil)
    #expect(value["list"]?[0]?.realValue == 1.5)
    #expect(value["list"]?[1]?.boolValue == true)
    #expect(value["list"]?[2] == nil)
    #expect(value["missing"] == nil)
    #expect(value.stringValue == nil)
  }
}

func bigEndianValue(_ bytes: [UInt8], at offset: Int) -> UInt64 {
  bytes[offset..<(offset + 8)].reduce(0) { $0 << 8 | UInt64($1) }
}

/// `PropertyListDate.iso8601` (an XML plist's `<date>`, `groupctl activities watch`) writes its 20 bytes by hand:
/// the same text as Foundation's `ISO8601DateFormatter` in UTC, at the edges of each field and for random dates.
/// (Before 1583 Foundation's calendar is Julian, where a plist's is proleptic Gregorian: those are written out here.)
@Suite("ISO 8601 dates", .runSlot(.minutes(2)))
struct ISO8601DateTests {
  @Test func edgesAreWrittenInFull() {
    let cases: [(PropertyListDate?, String)] = [
      (PropertyListDate(year: 1, month: 1, day: 1), "0001-01-01T00:00:00Z"),
      (PropertyListDate(year: 9999, month: 12, day: 31, hour: 23, minute: 59, second: 59), "9999-12-31T23:59:59Z"),
      (PropertyListDate(year: 2000, month: 2, day: 29, hour: 9, minute: 5, second: 7), "2000-02-29T09:05:07Z"),
      (PropertyListDate(secondsSinceReferenceDate: 0), "2001-01-01T00:00:00Z"),
      (PropertyListDate(secondsSinceReferenceDate: -0.5), "2000-12-31T23:59:59Z"),
    ]
    for (date, text) in cases { #expect(date?.iso8601 == text) }
    #expect(PropertyListDate(secondsSinceReferenceDate: .infinity).iso8601 == nil)
  }

  @Test func randomDatesMatchFoundation() {
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    var rng = SystemRandomNumberGenerator()
    let first = PropertyListDate(year: 1583, month: 1, day: 1)!.secondsSince1970
    let last = PropertyListDate(year: 9999, month: 12, day: 31)!.secondsSince1970
    for _ in 0..<20_000 {
      let seconds = Double(Int64.random(in: Int64(first)...Int64(last), using: &rng))
      let date = PropertyListDate(secondsSince1970: seconds)
      #expect(date.iso8601 == formatter.string(from: Date(timeIntervalSince1970: seconds)), "\(seconds)")
    }
  }
}
