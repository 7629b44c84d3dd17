import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// Hostile and malformed `bplist00` input: every case must throw `PropertyListError`.
@Suite("Binary reader hardening", .runSlot(.minutes(10)))
struct BinaryReaderTests {
  /// A small valid file covering every object kind.
  static let valid: [UInt8] = {
    let value: PropertyListValue = [
      "s": "ascii", "u": "ünï 😀", "i": 70_000, "n": -3, "big": .integer(PropertyListInteger(UInt64.max)),
      "r": 2.5, "b": true, "d": .date(PropertyListDate(secondsSinceReferenceDate: 12.5)),
      "x": .data([1, 2, 3]), "a": [1, [2, [:]]], "long": .string(String(repeating: "z", count: 20)),
    ]
    return try! value.encoded(as: .binary)
  }()

  @Test("16-byte integers are read as signed 128-bit values, as Python writes them")
  func sixteenByteIntegers() throws {
    let objects: [[UInt8]] = [
      [0xA3, 1, 2, 3],
      [0x14] + Array(repeating: 0, count: 8) + Array(repeating: 0xFF, count: 8),
      [0x14] + Array(repeating: 0, count: 7) + [1] + Array(repeating: 0, count: 8),
      [0x14] + Array(repeating: 0xFF, count: 16),
    ]
    let value = try PropertyListValue(bytes: BinaryPlistBuilder(objects: objects).build())
    #expect(value[0]?.uint64Value == UInt64.max)
    #expect(value[1]?.integerValue?.value == Int128(1) << 64)
    #expect(value[2]?.intValue == -1)
  }

  @Test("other legal encodings: 4-byte reals, extended counts, UIDs, shared objects")
  func legalVariants() throws {
    let objects: [[UInt8]] = [
      [0xA6, 1, 2, 3, 4, 4, 5],
      [0x22] + bigEndian(UInt64(Float(1.5).bitPattern), size: 4),
      [0x4F, 0x10, 0x02, 0xAA, 0xBB],  // data with a separate count integer
      [0x80, 0x2A],  // UID 42
      [0x51, 0x41],  // "A", referenced twice
      [0x11, 0x01, 0x00],
    ]
    let value = try PropertyListValue(bytes: BinaryPlistBuilder(objects: objects).build())
    #expect(value == [1.5, .data([0xAA, 0xBB]), .uid(42), "A", "A", 256])
  }

  @Test("the sample file parses")
  func sampleParses() throws {
    let value = try PropertyListValue(bytes: Self.valid)
    #expect(value["u"]?.stringValue == "ünï 😀")
    #expect(value["big"]?.uint64Value == UInt64.max)
  }

  @Test("truncation at every length throws")
  func truncation() {
    for length in 0..<Self.valid.count {
      let error = expectFailure(Array(Self.valid.prefix(length)), format: .binary)
      #expect(error?.kind == .invalidBinary)
    }
  }

  @Test("bad trailer fields are rejected")
  func badTrailer() {
    let base = BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]])
    func patched(_ edit: @escaping (inout [UInt8], Int) -> Void) -> [UInt8] {
      base.build { bytes, trailer, _ in edit(&bytes, trailer) }
    }
    expectFailure(patched { b, t in b[t + 6] = 0 }, kind: .invalidBinary, mentioning: "offset-int size 0")
    expectFailure(patched { b, t in b[t + 6] = 9 }, kind: .invalidBinary, mentioning: "offset-int size 9")
    expectFailure(patched { b, t in b[t + 7] = 0 }, kind: .invalidBinary, mentioning: "object-ref size 0")
    expectFailure(patched { b, t in b[t + 7] = 200 }, kind: .invalidBinary, mentioning: "object-ref size")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 8)..<(t + 16), with: bigEndian(0, size: 8)) }, mentioning: "no objects")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 8)..<(t + 16), with: bigEndian(UInt64.max, size: 8)) },
      mentioning: "objects")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 8)..<(t + 16), with: bigEndian(40, size: 8)) },
      mentioning: "offset table")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 16)..<(t + 24), with: bigEndian(2, size: 8)) }, mentioning: "top object")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 16)..<(t + 24), with: bigEndian(UInt64.max, size: 8)) },
      mentioning: "top object")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 24)..<(t + 32), with: bigEndian(0, size: 8)) },
      mentioning: "offset table offset")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 24)..<(t + 32), with: bigEndian(UInt64(t + 5), size: 8)) },
      mentioning: "offset table offset")
    expectFailure(
      patched { b, t in b.replaceSubrange((t + 24)..<(t + 32), with: bigEndian(1 << 63, size: 8)) },
      mentioning: "offset table offset")
    // 300 objects cannot be addressed with 1-byte references.
    let many = BinaryPlistBuilder(objects: [[0xA1, 1]] + Array(repeating: [0x09], count: 299), offsetSize: 2)
    expectFailure(many.build(), kind: .invalidBinary, mentioning: "cannot be addressed")
    expectFailure(Array("bplist01".utf8) + Array(repeating: 0, count: 40), kind: .invalidBinary, mentioning: "version")
    let error = expectFailure(base.build(), limits: PropertyListLimits(maxObjects: 1), kind: .limitExceeded)
    #expect(error?.description.contains("limit") == true)
  }

  @Test("object offsets and references out of range are rejected")
  func outOfRange() {
    let offsetPastTable = BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]]).build { bytes, _, table in
      bytes[table + 1] = 0xF0
    }
    expectFailure(
      offsetPastTable, kind: .invalidBinary, mentioning: "object 1 has offset 240", "outside the object area")
    let offsetInHeader = BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]]).build { bytes, _, table in
      bytes[table + 1] = 3
    }
    expectFailure(offsetInHeader, kind: .invalidBinary, mentioning: "outside the object area")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xA2, 1, 9], [0x10, 7]]).build(), kind: .invalidBinary,
      mentioning: "object reference 9 is out of range")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xD1, 1, 200], [0x50]]).build(), kind: .invalidBinary, mentioning: "out of range")
    // References that run into the offset table.
    expectFailure(
      BinaryPlistBuilder(objects: [[0xA5, 0]]).build(), kind: .invalidBinary, mentioning: "array of 5 elements")
  }

  @Test("reference cycles are rejected, direct and indirect")
  func cycles() {
    expectFailure(BinaryPlistBuilder(objects: [[0xA1, 0]]).build(), kind: .invalidBinary, mentioning: "cycle")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xA1, 1], [0xA1, 2], [0xA2, 3, 0], [0x09]]).build(), kind: .invalidBinary,
      mentioning: "object 0 contains itself")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xD1, 1, 2], [0x51, 0x6B], [0xA1, 0]]).build(), kind: .invalidBinary,
      mentioning: "cycle")
  }

  @Test("a shared object that is not a cycle is fine")
  func diamond() throws {
    let value = try PropertyListValue(
      bytes: BinaryPlistBuilder(objects: [[0xA2, 1, 1], [0xA1, 2], [0x53, 0x61, 0x62, 0x63]]).build())
    #expect(value == [["abc"], ["abc"]])
  }

  /// `levels` nested one-element arrays ending in `true`.
  static func nested(_ levels: Int) -> [UInt8] {
    let objects = (0..<levels).map { [0xA1] + bigEndian(UInt64($0 + 1), size: 2) } + [[0x09]]
    return BinaryPlistBuilder(objects: objects, refSize: 2, offsetSize: 2).build()
  }

  @Test("nesting beyond the depth limit is rejected")
  func depthLimit() throws {
    _ = try PropertyListValue(bytes: Self.nested(512))
    expectFailure(Self.nested(513), kind: .limitExceeded, mentioning: "nesting deeper than the limit of 512")
    expectFailure(Self.nested(20_000), kind: .limitExceeded, mentioning: "nesting")
    _ = try PropertyListValue(bytes: Self.nested(10), limits: PropertyListLimits(maxDepth: 10))
    expectFailure(Self.nested(11), limits: PropertyListLimits(maxDepth: 10), kind: .limitExceeded)
  }

  @Test("depth counts through shared subtrees too")
  func depthThroughSharedSubtree() {
    // Object 1 is a 6-deep chain; object 0 reaches it directly and through 5 more levels.
    var objects: [[UInt8]] = [[0xA2, 1, 7]]
    for level in 1...6 { objects.append([0xA1, UInt8(level + 1)]) }  // 1...6 -> chain to 7
    objects[6] = [0xA1, 12]
    objects.append([0xA1, 8])  // 7
    for level in 8...11 { objects.append([0xA1, UInt8(level + 1)]) }
    objects[11] = [0xA1, 1]  // 11 -> chain start
    objects.append([0x09])  // 12
    let file = BinaryPlistBuilder(objects: objects).build()
    expectFailure(file, limits: PropertyListLimits(maxDepth: 8), kind: .limitExceeded, mentioning: "nesting")
  }

  @Test("exponential sharing (DAG bombs) is cut off quickly")
  func dagBomb() {
    // Object k is an array holding object k+1 twice: 2^60 leaves if expanded naively.
    let levels = 60
    var objects: [[UInt8]] = (0..<levels).map { [0xA2, UInt8($0 + 1), UInt8($0 + 1)] }
    objects.append([0x5F, 0x10, 100] + Array(repeating: 0x61, count: 100))
    let file = BinaryPlistBuilder(objects: objects).build()
    let start = ContinuousClock.now
    expectFailure(file, kind: .limitExceeded, mentioning: "more than 1000000 objects")
    // A shared large string is charged per reference against maxBytes.
    expectFailure(
      file, limits: PropertyListLimits(maxBytes: 10_000, maxObjects: .max), kind: .limitExceeded,
      mentioning: "10000 bytes")
    #expect(ContinuousClock.now - start < .seconds(5))
  }

  @Test("huge declared counts in tiny files are rejected without allocating")
  func hugeCounts() {
    for (marker, name) in [
      (UInt8(0x4F), "data"), (0x5F, "ASCII string"), (0x6F, "UTF-16 string"), (0xAF, "array"), (0xDF, "dictionary"),
    ] {
      let file = BinaryPlistBuilder(objects: [[marker, 0x13, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]]).build()
      expectFailure(file, kind: .invalidBinary, mentioning: name)
      let negative = BinaryPlistBuilder(objects: [[marker, 0x13, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]])
        .build()
      expectFailure(negative, kind: .invalidBinary, mentioning: "negative length")
    }
    expectFailure(
      BinaryPlistBuilder(objects: [[0x4F, 0x14] + Array(repeating: 0, count: 16)]).build(),
      mentioning: "must be an integer of 1, 2, 4 or 8 bytes")
    expectFailure(BinaryPlistBuilder(objects: [[0x4F, 0x09]]).build(), mentioning: "length")
    expectFailure(BinaryPlistBuilder(objects: [[0x4F]]).build(), mentioning: "missing its length")
  }

  @Test("dictionary keys must be strings")
  func nonStringKeys() {
    expectFailure(
      BinaryPlistBuilder(objects: [[0xD1, 1, 2], [0x10, 1], [0x09]]).build(), kind: .invalidBinary,
      mentioning: "is not a string")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xD1, 1, 2], [0xA0], [0x09]]).build(), kind: .invalidBinary,
      mentioning: "not a string")
    expectFailure(
      BinaryPlistBuilder(objects: [[0xD1, 1, 1], [0xD0]]).build(), kind: .invalidBinary, mentioning: "not a string")
  }

  @Test("strings must be valid: ASCII below 0x80, UTF-16 without unpaired surrogates")
  func invalidStrings() {
    expectFailure(
      BinaryPlistBuilder(objects: [[0x52, 0x41, 0xC3]]).build(), kind: .invalidBinary, mentioning: "non-ASCII byte 0xC3"
    )
    expectFailure(
      BinaryPlistBuilder(objects: [[0x61, 0xD8, 0x3D]]).build(), kind: .invalidBinary, mentioning: "unpaired surrogate")
    expectFailure(
      BinaryPlistBuilder(objects: [[0x61, 0xDE, 0x00]]).build(), kind: .invalidBinary, mentioning: "invalid UTF-16")
    expectFailure(
      BinaryPlistBuilder(objects: [[0x62, 0xD8, 0x3D, 0x00, 0x41]]).build(), kind: .invalidBinary,
      mentioning: "not followed by a low surrogate")
    // Odd byte count: 1 UTF-16 unit declared but only one byte before the table.
    expectFailure(
      BinaryPlistBuilder(objects: [[0x61, 0x00]]).build { bytes, trailer, table in
        bytes.remove(at: table - 1)
        bytes[table - 1] = UInt8(8)
        bytes.replaceSubrange((trailer - 1 + 24)..<(trailer - 1 + 32), with: bigEndian(UInt64(table - 1), size: 8))
      }, kind: .invalidBinary)
  }

  @Test("invalid markers and sizes are rejected")
  func invalidMarkers() {
    let cases: [([UInt8], String)] = [
      ([0x00], "null"), ([0x0F], "unknown object marker 0x0F"),
      ([0x15] + Array(repeating: 0, count: 32), "integer marker 0x15"),
      ([0x21, 0, 0], "real marker 0x21"), ([0x32, 0, 0, 0, 0], "date marker 0x32"), ([0xB0], "sets"),
      ([0xC0], "sets"), ([0x70], "unknown object marker 0x70"),
      ([0x88] + Array(repeating: 0, count: 9), "UID of 9 bytes"),
      ([0xE0], "unknown"), ([0x13, 1, 2], "integer"), ([0x23, 1], "real"), ([0x33, 1], "date"),
    ]
    for (object, fragment) in cases {
      expectFailure(BinaryPlistBuilder(objects: [object]).build(), kind: .invalidBinary, mentioning: fragment)
    }
  }

  @Test("random garbage and random mutations never crash", arguments: 0..<4)
  func garbage(seed: UInt64) {
    var rng = SeededGenerator(state: seed)
    for _ in 0..<300 {
      let length = Int.random(in: 0..<200, using: &rng)
      var bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
      if Bool.random(using: &rng) { bytes = Array("bplist00".utf8) + bytes }
      parseWithoutCrashing(bytes)
    }
    for _ in 0..<2_000 {
      var bytes = Self.valid
      for _ in 0..<Int.random(in: 1...4, using: &rng) {
        let index = Int.random(in: 0..<bytes.count, using: &rng)
        bytes[index] =
          Bool.random(using: &rng)
          ? UInt8.random(in: 0...255, using: &rng) : bytes[index] ^ (1 << UInt8.random(in: 0...7, using: &rng))
      }
      parseWithoutCrashing(bytes)
    }
  }

  @Test("garbage is reported as an unknown format")
  func unknownFormat() {
    expectFailure([], kind: .unknownFormat, mentioning: "not a property list")
    expectFailure(Array("hello".utf8), kind: .unknownFormat)
    expectFailure([0xFF, 0xD8, 0xFF, 0xE0], kind: .unknownFormat)
    expectFailure(Array(repeating: 0x41, count: 10), limits: PropertyListLimits(maxBytes: 5), kind: .unknownFormat)
    expectFailure(
      Array("bplist00".utf8) + Array(repeating: 0, count: 100), limits: PropertyListLimits(maxBytes: 50),
      kind: .limitExceeded, mentioning: "exceeds the limit of 50 bytes")
  }
}
