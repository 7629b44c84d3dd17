import Foundation
import PropertyList
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// The suite image format (SuiteImageFormat.swift): its writer, its reader over bytes and over a read-only
/// mapping, `merged`, and every bound a damaged or crafted image can break.
///
/// Mutants this suite catches (each tried once, then restored):
/// - no header checksum check in `SuiteImage.init`: `everyHeaderFieldIsChecked` (a changed generation or position
///   without a new checksum is accepted: 3 issues);
/// - no bound check on an entry's value offset (`checkValue` checking only `valueLength >= 1`):
///   `craftedEntriesThrow` ("a value in the header" returns `true` instead of throwing) and
///   `aDamagedBaseFailsTheMergeWithAnError`; the offsets past the end that follow then trap the process (a debug
///   build's bounds check), which is what the real check prevents;
/// - probing without the slotCount limit (`while true` in `find`): `craftedEntriesThrow` ("a lookup in a full
///   index did not complete within 20 s");
/// - dedup turned off (`keep` never sharing): `sharedLargeValuesAreStoredOnce` and
///   `sharedLargeValuesStaySharedThroughAMerge` (41,501,114 bytes instead of under 1 MiB).
@Suite(.runSlot(.minutes(8))) struct SuiteImageFormatTests {
  typealias F = SuiteImageFormat

  func build(
    _ values: [String: PropertyListValue], generation: UInt64 = 7, position: UInt64 = 42
  ) throws -> [UInt8] {
    var builder = SuiteImageBuilder(generation: generation, position: position, count: values.count)
    for (key, value) in values { try builder.add(key: key, value: value) }
    _ = try builder.finish()
    guard case .memory(let bytes) = builder.output else { return [] }
    return bytes
  }

  /// Equality that holds for NaN too (reals compared by bits).
  func same(_ a: PropertyListValue, _ b: PropertyListValue) -> Bool {
    switch (a, b) {
    case (.real(let x), .real(let y)): x.bitPattern == y.bitPattern
    case (.array(let x), .array(let y)): x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    case (.dictionary(let x), .dictionary(let y)): same(x, y)
    default: a == b
    }
  }

  func same(_ a: [String: PropertyListValue], _ b: [String: PropertyListValue]) -> Bool {
    a.count == b.count && a.allSatisfy { key, value in b[key].map { same(value, $0) } ?? false }
  }

  /// Every key and value of `image`, by enumeration.
  func contents(_ image: SuiteImage) throws -> [String: PropertyListValue] {
    var all: [String: PropertyListValue] = [:]
    try image.forEachEntry { entry, key in
      #expect(all[key] == nil, "key \(key) twice")
      all[key] = try image.value(of: entry)
    }
    return all
  }

  /// What `checkLimits` counts: (objects, payload bytes).
  func limits(_ values: [String: PropertyListValue]) -> (Int, Int) {
    var objects = 1
    var payload = 0
    func count(_ value: PropertyListValue) {
      objects += 1
      switch value {
      case .string(let s): payload += s.utf8.count
      case .data(let d): payload += d.count
      case .array(let items): items.forEach(count)
      case .dictionary(let items):
        for (k, v) in items {
          objects += 1
          payload += k.utf8.count
          count(v)
        }
      default: break
      }
    }
    for (k, v) in values {
      objects += 1
      payload += k.utf8.count
      count(v)
    }
    return (objects, payload)
  }

  static let everyType: [String: PropertyListValue] = [
    "string": .string("hello"), "empty": .string(""), "unicode": .string("héllo wörld 日本語 🎉 e\u{301}"),
    "zero": .integer(0), "min": .integer(PropertyListInteger(Int128.min)),
    "max": .integer(PropertyListInteger(Int128.max)), "negative": .integer(-1),
    "uint64": .integer(PropertyListInteger(UInt64.max)),
    "real": .real(3.25), "nan": .real(.nan), "signalingNaN": .real(.signalingNaN), "minusZero": .real(-0.0),
    "infinity": .real(-.infinity),
    "true": .bool(true), "false": .bool(false),
    "date": .date(PropertyListDate(secondsSinceReferenceDate: 12345.5)),
    "data": .data([0, 1, 2, 255]), "emptyData": .data([]), "bigData": .data(Array(repeating: 9, count: 5000)),
    "array": .array([.integer(1), .string("two"), .array([]), .dictionary([:])]),
    "nested": .dictionary([
      "a": .array([.dictionary(["deep": .data([1]), "": .bool(false)])]), "b": .real(1e300),
      "ünï": .string("x"),
    ]),
    "": .string("the empty key"), "caf\u{E9}": .string("NFC"),
  ]

  @Test func everyValueTypeRoundTrips() throws {
    let bytes = try build(Self.everyType)
    let image = try SuiteImage(bytes: bytes)
    try image.validate()
    #expect(image.generation == 7 && image.position == 42 && image.count == Self.everyType.count)
    let (objects, payload) = limits(Self.everyType)
    #expect(image.objects == objects && image.payloadBytes == payload)
    #expect(image.status == nil && image.faultCount == 0)
    for (key, value) in Self.everyType {
      let read = try #require(try image.value(forKey: key), "\(key)")
      #expect(same(read, value), "\(key)")
    }
    #expect(try image.value(forKey: "absent") == nil)
    // Keys are bytes: the NFD spelling of an NFC key is another, absent key.
    #expect(try image.value(forKey: "caf\u{E9}") == .string("NFC"))
    #expect(try image.value(forKey: "cafe\u{301}") == nil)
    #expect(try same(contents(image), Self.everyType))
  }

  @Test func emptyImage() throws {
    let bytes = try build([:], generation: 1, position: 0)
    #expect(bytes.count == F.headerBytes + F.slotBytes * F.minSlots)
    let image = try SuiteImage(bytes: bytes)
    try image.validate()
    #expect(image.count == 0 && image.objects == 1 && image.payloadBytes == 0)
    #expect(try image.value(forKey: "") == nil && image.value(forKey: "a") == nil)
    #expect(try contents(image).isEmpty)
    let again = try SuiteImage(bytes: SuiteImage.merged(base: image, changes: [:], generation: 2, position: 3))
    #expect(again.count == 0 && again.generation == 2 && again.position == 3)
    let empty = try SuiteImage(bytes: SuiteImage.merged(base: nil, changes: ["a": nil], generation: 0, position: 0))
    try empty.validate()
    #expect(empty.count == 0)
  }

  /// Keys sharing one home slot (found by search): lookups walk the probe chain, across the index's end too.
  @Test func keysCollidingInTheIndex() throws {
    // 4 keys: 8 slots. Home slot 7 for all, so the chain wraps to 0, 1, 2.
    var colliding: [String] = []
    var absent: [String] = []
    var i = 0
    while colliding.count < 4 || absent.count < 20 {
      let key = "k\(i)"
      i += 1
      let home = Array(key.utf8).withUnsafeBytes { F.hash($0) } & 7
      guard home == 7 else { continue }
      if colliding.count < 4 { colliding.append(key) } else { absent.append(key) }
    }
    let values = Dictionary(
      uniqueKeysWithValues: colliding.enumerated().map { ($1, PropertyListValue.integer(.init($0))) })
    let image = try SuiteImage(bytes: build(values))
    #expect(image.slotCount == 8)
    try image.validate()
    for (key, value) in values { #expect(try image.value(forKey: key) == value) }
    for key in absent { #expect(try image.value(forKey: key) == nil) }
  }

  @Test func aHundredThousandKeys() throws {
    var values: [String: PropertyListValue] = [:]
    for i in 0..<100_000 { values["key.\(i)"] = i % 3 == 0 ? .string("value \(i)") : .integer(.init(i)) }
    let image = try SuiteImage(bytes: build(values))
    try image.validate()
    #expect(image.count == 100_000)
    for (key, value) in values { #expect(try image.value(forKey: key) == value) }
    for i in 100_000..<110_000 { #expect(try image.value(forKey: "key.\(i)") == nil) }
  }

  @Test func mergedEqualsAReferenceDictionary() throws {
    var reference: [String: PropertyListValue] = [:]
    for i in 0..<2000 {
      reference["k\(i)"] = i % 2 == 0 ? .integer(.init(i)) : .data(Array(repeating: UInt8(i % 7), count: 100))
    }
    let base = try SuiteImage(bytes: build(reference))
    var changes: [String: PropertyListValue?] = [:]
    for i in stride(from: 0, to: 2000, by: 3) { changes["k\(i)"] = .string("set \(i)") }  // replaced
    for i in stride(from: 1, to: 2000, by: 5) { changes["k\(i)"] = .some(nil) }  // removed
    for i in 2000..<2100 { changes["k\(i)"] = .bool(true) }  // added
    changes["never"] = .some(nil)  // removing an absent key
    for (key, value) in changes { reference[key] = value }
    let merged = try SuiteImage(bytes: SuiteImage.merged(base: base, changes: changes, generation: 9, position: 10))
    try merged.validate()
    #expect(merged.generation == 9 && merged.position == 10)
    #expect(try same(contents(merged), reference))
    let (objects, payload) = limits(reference)
    #expect(merged.objects == objects && merged.payloadBytes == payload)
    // A removed key added again, in the next merge.
    let again = try SuiteImage(
      bytes: SuiteImage.merged(base: merged, changes: ["k1": .string("back")], generation: 9, position: 11))
    try again.validate()
    reference["k1"] = .string("back")
    #expect(try same(contents(again), reference))
  }

  @Test func mergingNoChangesReproducesTheEntries() throws {
    let base = try SuiteImage(bytes: build(Self.everyType))
    let bytes = try SuiteImage.merged(base: base, changes: [:], generation: 7, position: 42)
    let merged = try SuiteImage(bytes: bytes)
    try merged.validate()
    #expect(try same(contents(merged), contents(base)))
    #expect(merged.objects == base.objects && merged.payloadBytes == base.payloadBytes)
    // The same entries in the same order, with the same value bytes: the same file.
    #expect(bytes == Array(base.bytes))
  }

  @Test func sharedLargeValuesAreStoredOnce() throws {
    let big = PropertyListValue.data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    var values: [String: PropertyListValue] = [:]
    for i in 0..<10_000 { values["shared.\(i)"] = big }
    let bytes = try build(values)
    #expect(bytes.count < 1 << 20, "\(bytes.count) bytes")
    let image = try SuiteImage(bytes: bytes)
    try image.validate()
    #expect(try image.value(forKey: "shared.9999") == big)
    #expect(image.payloadBytes == limits(values).1)
  }

  @Test func sharedLargeValuesStaySharedThroughAMerge() throws {
    let big = PropertyListValue.string(String(repeating: "x", count: 4096))
    var values: [String: PropertyListValue] = [:]
    for i in 0..<10_000 { values["shared.\(i)"] = big }
    let base = try SuiteImage(bytes: build(values))
    var changes: [String: PropertyListValue?] = ["shared.0": PropertyListValue?.none, "new": big]
    for i in 1..<10 { changes["other.\(i)"] = .integer(.init(i)) }
    let bytes = try SuiteImage.merged(base: base, changes: changes, generation: 1, position: 1)
    #expect(bytes.count < 1 << 20, "\(bytes.count) bytes")
    let merged = try SuiteImage(bytes: bytes)
    try merged.validate()
    #expect(try merged.value(forKey: "new") == big && merged.value(forKey: "shared.1") == big)
    #expect(try merged.value(forKey: "shared.0") == nil)
    // A merge without changes copies every entry: still shared.
    let copy = try SuiteImage.merged(base: merged, changes: [:], generation: 1, position: 2)
    #expect(copy.count < 1 << 20)
  }

  // MARK: Mapped

  @Test func theMappedReaderSurvivesATruncation() throws {
    let root = try TestRoot()
    let path = root.path + "/suite.image"
    var values: [String: PropertyListValue] = [:]
    for i in 0..<20_000 { values["key.\(i)"] = .string("value \(i)") }
    let bytes = try build(values)
    #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
    let image = try SuiteImage(mapping: SystemFD.open(path, .readOnly))
    #expect(image.status?.size == Int64(bytes.count))
    let check = try SystemFD.open(path, .readOnly)
    #expect(image.status?.inode == (try check.status().inode))
    check.close()
    try image.validate()
    #expect(try image.value(forKey: "key.123") == .string("value 123"))
    #expect(image.faultCount == 0)
    // Someone truncates it while it is mapped: reads get zeros and a fault count, never a crash.
    let writer = try SystemFD.open(path, .readWrite)
    try writer.truncate(to: 0)
    writer.close()
    for i in stride(from: 0, to: 20_000, by: 97) { _ = try? image.value(forKey: "key.\(i)") }
    #expect(image.faultCount > 0)
    #expect(throws: SuiteImage.Corruption.self) { try image.validate() }
    // Opening it now: an empty file is no image.
    #expect(throws: SuiteImage.OpenError.self) { try SuiteImage(mapping: SystemFD.open(path, .readOnly)) }
  }

  @Test func mappingRefusesWhatIsNotARegularFile() throws {
    let root = try TestRoot()
    #expect(throws: SuiteImage.OpenError.self) { try SuiteImage(mapping: SystemFD.open(root.path, .readOnly)) }
    let empty = try MappedFile(fd: SystemFD.open(root.path + "/empty", [.readWrite, .create]))
    #expect(empty.bytes.isEmpty && empty.faultCount == 0 && empty.status.size == 0)
  }

  // MARK: Damage

  /// `bytes` with the `width`-byte little-endian field at `offset` set to `value`, the checksum recomputed or not.
  func patched(_ bytes: [UInt8], _ offset: Int, _ value: UInt64, width: Int = 4, checksum: Bool = false) -> [UInt8] {
    var out = bytes
    for i in 0..<width { out[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(i))) }
    if checksum {
      let sum = StableHash.fnv1a32(out[0..<72])
      for i in 0..<4 { out[72 + i] = UInt8(truncatingIfNeeded: sum >> (8 * UInt32(i))) }
    }
    return out
  }

  func field(_ bytes: [UInt8], _ offset: Int, width: Int = 4) -> UInt64 {
    (0..<width).reduce(0) { $0 | UInt64(bytes[offset + $1]) << (8 * UInt64($1)) }
  }

  @Test func everyHeaderFieldIsChecked() throws {
    let good = try build(["a": .integer(1), "b": .string("two"), "c": .data([3])])
    let image = try SuiteImage(bytes: good)
    try image.validate()
    let length = UInt64(good.count)
    let values = field(good, 32, width: 8)
    let entries = field(good, 40, width: 8)
    // (offset, width, bad values): each must fail whether the checksum is recomputed or not.
    let cases: [(Int, Int, [UInt64])] = [
      (0, 8, [0, 0x3245_4741_4d49_4347]),
      (24, 4, [5, 0xFFFF_FFFF]),
      (28, 4, [0, 4, 7, 12, 16, 0x8000_0000]),
      (32, 8, [0, values - 8, values + 1, length + 1, .max]),
      (40, 8, [values - 1, length, length + 1, .max, 0]),
      (48, 8, [length - 1, length + 1, 0, .max]),
      (56, 8, [0, 6, .max, 1 << 63, 1 + 3 * (1 + (entries - values)) + 1]),
      (64, 8, [.max, 1 << 63, 3 * length]),
      (76, 4, [1]),
    ]
    for (offset, width, bads) in cases {
      for bad in bads {
        for checksum in [false, true] {
          let damaged = patched(good, offset, bad, width: width, checksum: checksum)
          #expect(throws: SuiteImage.Corruption.self, "field \(offset) = \(bad), checksum \(checksum)") {
            try SuiteImage(bytes: damaged)
          }
        }
      }
    }
    // The checksum itself, and the fields only it guards (a damaged generation must not pass for another).
    #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: patched(good, 72, field(good, 72) ^ 1)) }
    for (offset, width) in [(8, 8), (16, 8)] {
      #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: patched(good, offset, 99, width: width)) }
      let valid = try SuiteImage(bytes: patched(good, offset, 99, width: width, checksum: true))
      #expect(offset == 8 ? valid.generation == 99 : valid.position == 99)
    }
    // Counts within their bounds but wrong: `validate()` finds them.
    for (offset, delta) in [(56, 1), (64, 1), (64, -1)] {
      let wrong = patched(good, offset, UInt64(Int(field(good, offset, width: 8)) + delta), width: 8, checksum: true)
      let opened = try SuiteImage(bytes: wrong)
      #expect(throws: SuiteImage.Corruption.self) { try opened.validate() }
    }
    // Short files.
    for count in [0, 1, 79, 80, good.count - 1] {
      #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: Array(good.prefix(count))) }
    }
    #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: good + [0]) }
  }

  /// One key "a" = 7: the offsets of its slot and entry.
  /// Its generation is 5: byte 8 is a valid encoded value (`true`) outside the values region.
  func oneKeyImage() throws -> (bytes: [UInt8], slot: Int, entry: Int, hash: UInt32) {
    let bytes = try build(["a": .integer(7)], generation: 5)
    let slot = try #require((0..<8).map { F.headerBytes + 8 * $0 }.first { field(bytes, $0 + 4) != 0 })
    return (bytes, slot, Int(field(bytes, slot + 4)), UInt32(field(bytes, slot)))
  }

  /// Opens `bytes` and expects `value(forKey:)` of `key` and `validate()` to throw.
  func expectDamage(
    _ bytes: [UInt8], _ what: String, key: String = "a", sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    let image = try SuiteImage(bytes: bytes)
    #expect(throws: SuiteImage.Corruption.self, "\(what): lookup", sourceLocation: sourceLocation) {
      try image.value(forKey: key)
    }
    #expect(throws: SuiteImage.Corruption.self, "\(what): validate", sourceLocation: sourceLocation) {
      try image.validate()
    }
  }

  @Test func craftedEntriesThrow() async throws {
    let (good, slot, entry, hash) = try oneKeyImage()
    let image = try SuiteImage(bytes: good)
    #expect(try image.value(forKey: "a") == .integer(7))
    let valueField = entry + 4 + 1
    let values = Int(field(good, 32, width: 8))
    let entries = Int(field(good, 40, width: 8))
    // A value in the header that decodes: only the region check refuses it.
    try expectDamage(patched(patched(good, valueField, 8), valueField + 4, 1), "a value in the header")
    try expectDamage(patched(good, entry, 1000), "key length past the end")
    try expectDamage(patched(good, entry, 0xFFFF_FFFF), "key length 4 GiB")
    for bad in [0, 8, values - 1, entries, entries + 1, good.count, 0xFFFF_FFFF] {
      try expectDamage(patched(good, valueField, UInt64(bad)), "value offset \(bad)")
    }
    for bad in [0, 18, 1000, 0xFFFF_FFFF] {
      try expectDamage(patched(good, valueField + 4, UInt64(bad)), "value length \(bad)")
    }
    try expectDamage(patched(good, values, 77, width: 1), "an unknown value tag")
    for bad in [8, 40, values, entries - 1, good.count, good.count + 100, 0xFFFF_FFFF] {
      try expectDamage(patched(good, slot + 4, UInt64(bad)), "slot offset \(bad)")
    }
    // A stray slot (not the key's) pointing into the header: lookups of other keys that reach it and validate.
    let strayAt = F.headerBytes + 8 * ((slot - F.headerBytes) / 8 + 1) % 64
    let stray = patched(patched(good, strayAt, 5), strayAt + 4, 16)
    #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: stray).validate() }
    // A full index: every slot in use, none of them the key looked up (its hash or another one).
    for slotHash in [hash, hash ^ 1] {
      var full = good
      for s in 0..<8 {
        full = patched(full, F.headerBytes + 8 * s, UInt64(slotHash))
        full = patched(full, F.headerBytes + 8 * s + 4, UInt64(entry))
      }
      let crafted = try SuiteImage(bytes: full)
      let found = await expectCompletes("a lookup in a full index") {
        try crafted.value(forKey: "b") == nil
      }
      #expect(found == true)
      #expect(throws: SuiteImage.Corruption.self) { try crafted.validate() }
    }
    // A key that is not UTF-8.
    let badKey = patched(good, entry + 4, 0xFF, width: 1)
    #expect(throws: SuiteImage.Corruption.self) { try SuiteImage(bytes: badKey).validate() }
    #expect(throws: (any Error).self) { try SuiteImage(bytes: badKey).forEachEntry { _, _ in } }
  }

  /// The fuzzer's seeds and the crashers it found (Fuzz/container-seeds/suite-image*, first byte 5 picks the image
  /// case): each opens or throws, validates or throws, and never traps.
  @Test func fuzzSeedsAndCrashers() throws {
    let seeds = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
      "../../Fuzz/container-seeds")
    let names = try FileManager.default.contentsOfDirectory(atPath: seeds.path).filter { $0.hasPrefix("suite-image") }
    #expect(!names.isEmpty)
    for name in names {
      let bytes = Array(try Data(contentsOf: seeds.appendingPathComponent(name)).dropFirst())
      guard let image = try? SuiteImage(bytes: bytes) else { continue }
      if name == "suite-image" {
        try image.validate()
        #expect(try image.count == 5 && image.value(forKey: "c") == image.value(forKey: "b"))
      }
      _ = try? image.validate()
      try? image.forEachEntry { entry, key in _ = try? image.value(forKey: key) }
    }
  }

  @Test func aDamagedBaseFailsTheMergeWithAnError() throws {
    let (good, _, entry, _) = try oneKeyImage()
    let damaged = try SuiteImage(bytes: patched(good, entry + 5, 8))
    #expect(throws: SharedDefaultsError.self) {
      try SuiteImage.merged(base: damaged, changes: [:], generation: 0, position: 0)
    }
    #expect(throws: SharedDefaultsError.self) {
      try SuiteImage.merged(base: damaged, changes: ["a": .bool(true)], generation: 0, position: 0)
    }
  }
}
