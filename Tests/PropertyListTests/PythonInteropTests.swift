import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// Files we write must load in Python's plistlib, and files plistlib writes must load here.
@Suite(
  "Python plistlib interoperability", .enabled(if: Python.available, "python3 is not installed"),
  .runSlot(.minutes(3)))
struct PythonInteropTests {
  static let pythonWritable: PropertyListValue = [
    "string": "hello", "unicode": "héllo 中文 😀", "empty": "",
    "zero": 0, "small": 200, "medium": 70_000, "negative": -42,
    "int64min": .integer(PropertyListInteger(Int64.min)), "int64max": .integer(PropertyListInteger(Int64.max)),
    "above64": .integer(PropertyListInteger(UInt64(Int64.max) + 1)),
    "uint64max": .integer(PropertyListInteger(UInt64.max)),
    "pi": 3.141592653589793, "negzero": -0.0, "inf": .real(.infinity), "ninf": .real(-.infinity), "nan": .real(.nan),
    "yes": true, "no": false,
    "date": .date(PropertyListDate(year: 2024, month: 1, day: 2, hour: 3, minute: 4, second: 5)!),
    "olddate": .date(PropertyListDate(year: 1900, month: 6, day: 30, hour: 23, minute: 59, second: 59)!),
    "data": .data(Array(0...255)), "nodata": .data([]),
    "list": [1, "two", [3.5, [:]], []],
    "nested": ["a": ["b": ["c": ["deep"]]]],
    "shared": .array(Array(repeating: "same", count: 20)),
    "markup": "<tag> & 'quotes' \"double\" ]]>",
    "lines": "a\nb\r\nc\rd\te",
  ]

  @Test("Python reads what we write", arguments: PropertyListFormat.allCases)
  func pythonReadsOurs(format: PropertyListFormat) async throws {
    var rng = SeededGenerator(state: 99)
    var values: [PropertyListValue] = [Self.pythonWritable, "top-level string", 7, [], [:]]
    values.append(.array((0..<300).map { .integer(PropertyListInteger($0 * 1_000)) }))  // 2-byte refs
    values.append(.array([.data(Array(repeating: 1, count: 70_000)), "x"]))  // 4-byte offsets
    for _ in 0..<10 {
      values.append(randomValue(&rng))
    }
    for value in values {
      let file = temporaryFile(format == .xml ? ".xml" : ".bplist")
      defer { try? FileManager.default.removeItem(at: file) }
      try Data(value.encoded(as: format)).write(to: file)
      let seen = try await Python.run(
        Python.canonicalFunction + "print(canon(plistlib.load(open(sys.argv[1], 'rb'))))",
        arguments: [file.path])
      #expect(seen == canonical(value) + "\n")
    }
  }

  /// `writeDictionary` (the export's streamed form): large data and strings written where they come, the rest
  /// after them — one file both readers take, equal to the dictionary `write` makes. Breaking it on purpose (the
  /// written offsets not advanced past a streamed piece) fails both.
  @Test("Python reads a dictionary written value by value")
  func pythonReadsAStreamedDictionary() async throws {
    var rng = SeededGenerator(state: 7)
    var dictionary: [String: PropertyListValue] = [:]
    for i in 0..<300 { dictionary["k\(i)"] = randomValue(&rng) }
    let big = BinaryPropertyListWriter.streamedScalarBytes
    dictionary["big1"] = .data((0..<big).map { UInt8(truncatingIfNeeded: $0) })
    dictionary["big2"] = .data(Array(repeating: 2, count: 3 * big))
    dictionary["same as big2"] = .data(Array(repeating: 2, count: 3 * big))
    dictionary["big string"] = .string(String(repeating: "é", count: big))
    dictionary["nested"] = ["inner": .data(Array(repeating: 9, count: big + 1)), "small": 1]
    let keys = Array(dictionary.keys)
    var bytes: [UInt8] = []
    var asked = 0
    try BinaryPropertyListWriter.writeDictionary(keys: keys) { i in
      asked += 1
      return dictionary[keys[i]]!
    } write: {
      bytes.append(contentsOf: $0)
    }
    #expect(asked == keys.count)
    #expect(try PropertyListValue(bytes: bytes) == .dictionary(dictionary))
    let file = temporaryFile(".bplist")
    defer { try? FileManager.default.removeItem(at: file) }
    try Data(bytes).write(to: file)
    let seen = try await Python.run(
      Python.canonicalFunction + "print(canon(plistlib.load(open(sys.argv[1], 'rb'))))", arguments: [file.path])
    #expect(seen == canonical(.dictionary(dictionary)) + "\n")
  }

  @Test("we read what Python writes", arguments: ["FMT_BINARY", "FMT_XML"])
  func weReadPythons(format: String) async throws {
    let script =
      Python.canonicalFunction + """
        value = {
            'string': 'hello', 'unicode': 'h\\u00e9llo \\u4e2d \\U0001F600', 'empty': '',
            'ints': [0, 1, 255, 256, 65535, 65536, 2**32, -1, -2**63, 2**63 - 1],
            'above64': 2**63, 'uint64max': 2**64 - 1,
            'reals': [0.0, 1.5, 1e300, float('inf'), float('-inf')],
            'bools': [True, False],
            'dates': [datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime(1901, 12, 13, 20, 45, 52),
                      datetime.datetime(2001, 1, 1)],
            'bytes': bytes(range(256)), 'nobytes': b'',
            'nested': {'a': {'b': [{'c': [[], {}]}]}},
            'wide': list(range(300)),
            'big': b'x' * 70000,
        }
        if sys.argv[2] == 'FMT_BINARY':
            value['uid'] = plistlib.UID(7)
        with open(sys.argv[1], 'wb') as f:
            plistlib.dump(value, f, fmt=getattr(plistlib, sys.argv[2]))
        print(canon(value))
        """
    let file = temporaryFile(".plist")
    defer { try? FileManager.default.removeItem(at: file) }
    let expected = try await Python.run(script, arguments: [file.path, format])
    let value = try PropertyListValue(bytes: [UInt8](Data(contentsOf: file)))
    let ours = canonical(value) + "\n"
    // Report a short window around the first difference rather than the whole dump.
    let mismatch = Array(zip(ours, expected)).firstIndex { $0 != $1 } ?? min(ours.count, expected.count)
    #expect(
      ours == expected,
      "first difference at \(mismatch): ours \(ours.dropFirst(max(0, mismatch - 40)).prefix(100)) vs python \(expected.dropFirst(max(0, mismatch - 40)).prefix(100))"
    )
    #expect(value["uint64max"]?.uint64Value == UInt64.max)
    #expect(value["above64"]?.uint64Value == UInt64(1) << 63)
    #expect(value["ints"]?[8]?.int64Value == Int64.min)
    #expect(value["dates"]?[0]?.dateValue?.secondsSinceReferenceDate == 725_857_445)
    #expect(value["bytes"]?.dataValue == Array(0...255))
    #expect(value["unicode"]?.stringValue == "héllo 中 😀")
    if format == "FMT_BINARY" {
      #expect(value["uid"]?.uidValue == 7)
    }
  }
}
