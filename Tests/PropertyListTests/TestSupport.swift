import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// Directory of this test target, located from the source file so no resources are needed.
let testsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()

/// Parses `bytes` expecting failure; checks the error kind, that it carries a byte offset and
/// that its description mentions each of `mentioning` (case-insensitive).
@discardableResult
func expectFailure(
  _ bytes: [UInt8],
  format: PropertyListFormat? = nil,
  limits: PropertyListLimits = .default,
  kind: PropertyListError.Kind? = nil,
  mentioning fragments: String...,
  sourceLocation: SourceLocation = #_sourceLocation
) -> PropertyListError? {
  do throws(PropertyListError) {
    let value: PropertyListValue
    if let format {
      value = try PropertyListValue(bytes: bytes, format: format, limits: limits)
    } else {
      value = try PropertyListValue(bytes: bytes, limits: limits)
    }
    Issue.record("expected a PropertyListError, got \(value)", sourceLocation: sourceLocation)
    return nil
  } catch {
    if let kind {
      #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation)
    }
    #expect(error.offset != nil, "reader errors should carry an offset: \(error)", sourceLocation: sourceLocation)
    #expect(error.description.contains("byte offset"), sourceLocation: sourceLocation)
    for fragment in fragments {
      #expect(
        error.description.lowercased().contains(fragment.lowercased()), "\(error)", sourceLocation: sourceLocation)
    }
    return error
  }
}

/// Parses `bytes` with both readers; either outcome is fine, but a value must survive being
/// re-encoded and re-read. Used for garbage, mutated and regression inputs.
func parseWithoutCrashing(_ bytes: [UInt8], limits: PropertyListLimits = .default) {
  for format in PropertyListFormat.allCases {
    guard let value = try? PropertyListValue(bytes: bytes, format: format, limits: limits) else { continue }
    for output in PropertyListFormat.allCases {
      do throws(PropertyListError) {
        let encoded = try value.encoded(as: output)
        let decoded = try PropertyListValue(bytes: encoded, format: output)
        #expect(equivalent(value, decoded, viaXML: output == .xml))
      } catch {
        #expect(error.kind == .unsupportedValue, "\(error)")
      }
    }
  }
}

/// Structural equality with NaN == NaN, bitwise reals, scalar-exact strings and, after an XML
/// trip, whole-second dates.
func equivalent(_ a: PropertyListValue, _ b: PropertyListValue, viaXML: Bool = false) -> Bool {
  switch (a, b) {
  case (.real(let x), .real(let y)):
    return (x.isNaN && y.isNaN) || x.bitPattern == y.bitPattern
  case (.date(let x), .date(let y)):
    let expected = viaXML ? floor(x.secondsSinceReferenceDate) : x.secondsSinceReferenceDate
    return expected.bitPattern == y.secondsSinceReferenceDate.bitPattern
      || (expected.isNaN && y.secondsSinceReferenceDate.isNaN)
      || (viaXML && expected == y.secondsSinceReferenceDate)
  case (.string(let x), .string(let y)):
    return x.unicodeScalars.elementsEqual(y.unicodeScalars)
  case (.array(let x), .array(let y)):
    return x.count == y.count && zip(x, y).allSatisfy { equivalent($0, $1, viaXML: viaXML) }
  case (.dictionary(let x), .dictionary(let y)):
    guard x.count == y.count else { return false }
    return x.allSatisfy { key, value in y[key].map { equivalent(value, $0, viaXML: viaXML) } ?? false }
  default:
    return a == b
  }
}

/// Text form used to compare our values with what Python's plistlib sees; must match
/// `Python.canonicalFunction`.
func canonical(_ value: PropertyListValue) -> String {
  switch value {
  case .bool(let flag): return flag ? "b:1" : "b:0"
  case .integer(let integer): return "i:\(integer)"
  case .real(let real):
    if real.isNaN { return "r:nan" }
    let hex = String(real.bitPattern, radix: 16)
    return "r:" + String(repeating: "0", count: 16 - hex.count) + hex
  case .string(let string): return "s:" + hex(Array(string.utf8))
  case .data(let bytes): return "x:" + hex(bytes)
  case .date(let date): return "d:\(Int(floor(date.secondsSinceReferenceDate)))"
  case .uid(let uid): return "u:\(uid)"
  case .array(let elements): return "a[" + elements.map(canonical).joined(separator: ",") + "]"
  case .dictionary(let entries):
    let keys = entries.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    return "{" + keys.map { canonical(.string($0)) + "=" + canonical(entries[$0]!) }.joined(separator: ",") + "}"
  }
}

func hex(_ bytes: [UInt8]) -> String {
  bytes.map { byte in
    let digits = String(byte, radix: 16)
    return digits.count == 1 ? "0" + digits : digits
  }.joined()
}

/// Runs python3 snippets for interoperability tests.
enum Python {
  struct Failure: Error, CustomStringConvertible {
    var description: String
  }

  static let available: Bool = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
    .contains { FileManager.default.isExecutableFile(atPath: "\($0)/python3") }

  /// Python function producing the same text as `canonical(_:)`.
  static let canonicalFunction = """
    import plistlib, struct, datetime, math, sys
    def canon(v):
        if isinstance(v, bool): return 'b:1' if v else 'b:0'
        if isinstance(v, int): return 'i:%d' % v
        if isinstance(v, float):
            return 'r:nan' if math.isnan(v) else 'r:' + struct.pack('>d', v).hex()
        if isinstance(v, str): return 's:' + v.encode('utf-8').hex()
        if isinstance(v, bytes): return 'x:' + v.hex()
        if isinstance(v, datetime.datetime):
            d = v.replace(tzinfo=None) - datetime.datetime(2001, 1, 1)
            return 'd:%d' % (d.days * 86400 + d.seconds)
        if isinstance(v, plistlib.UID): return 'u:%d' % v.data
        if isinstance(v, list): return 'a[' + ','.join(canon(x) for x in v) + ']'
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: k.encode('utf-8'))
            return '{' + ','.join(canon(k) + '=' + canon(v[k]) for k in keys) + '}'
        raise TypeError(type(v))

    """

  static func run(_ script: String, arguments: [String] = []) async throws -> String {
    let run = try await runToEnd("/usr/bin/env", ["python3", "-c", script] + arguments)
    guard run.status == 0 else {
      throw Failure(description: "python3 exited \(run.status.map(String.init) ?? "after its time"): \(run.errors)")
    }
    return run.output
  }
}

/// A fresh temporary file path, removed by the caller.
func temporaryFile(_ suffix: String) -> URL {
  FileManager.default.temporaryDirectory.appendingPathComponent("plist-test-\(UUID().uuidString)\(suffix)")
}

/// Assembles a binary plist from raw object encodings, for crafting malformed files.
struct BinaryPlistBuilder {
  var objects: [[UInt8]]
  var top: UInt64 = 0
  var refSize: UInt8 = 1
  var offsetSize: UInt8 = 1

  func build(patch: (inout [UInt8], _ trailerStart: Int, _ tableStart: Int) -> Void = { _, _, _ in }) -> [UInt8] {
    var out = Array("bplist00".utf8)
    var offsets: [UInt64] = []
    for object in objects {
      offsets.append(UInt64(out.count))
      out += object
    }
    let table = out.count
    for offset in offsets { out += bigEndian(offset, size: Int(offsetSize)) }
    let trailer = out.count
    out += [0, 0, 0, 0, 0, 0, offsetSize, refSize]
    out += bigEndian(UInt64(objects.count), size: 8)
    out += bigEndian(top, size: 8)
    out += bigEndian(UInt64(table), size: 8)
    patch(&out, trailer, table)
    return out
  }
}

func bigEndian(_ value: UInt64, size: Int) -> [UInt8] {
  (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> (UInt64($0) * 8)) }
}

/// Deterministic generator (SplitMix64) for randomized tests.
struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// A random value tree that both formats can hold (no UIDs, whole-second dates, XML-safe strings).
func randomValue(_ rng: inout SeededGenerator, depth: Int = 0) -> PropertyListValue {
  let pick = Int.random(in: 0..<(depth > 3 ? 7 : 9), using: &rng)
  switch pick {
  case 0: return .string(randomString(&rng))
  case 1:
    let choices: [Int128] = [
      0, 1, -1, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296,
      Int128(Int64.min), Int128(Int64.max), Int128(UInt64.max), Int128.min, Int128.max,
    ]
    return .integer(
      PropertyListInteger(
        Bool.random(using: &rng)
          ? choices.randomElement(using: &rng)!
          : Int128(Int64.random(in: Int64.min...Int64.max, using: &rng))))
  case 2: return .real(Double(bitPattern: rng.next()).isNaN ? 0.5 : Double(bitPattern: rng.next()))
  case 3: return .bool(Bool.random(using: &rng))
  case 4:
    return .date(
      PropertyListDate(secondsSinceReferenceDate: Double(Int.random(in: -2_000_000_000...2_000_000_000, using: &rng))))
  case 5: return .data((0..<Int.random(in: 0..<40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
  case 6: return .string("")
  case 7: return .array((0..<Int.random(in: 0..<6, using: &rng)).map { _ in randomValue(&rng, depth: depth + 1) })
  default:
    var entries: [String: PropertyListValue] = [:]
    for _ in 0..<Int.random(in: 0..<6, using: &rng) {
      entries[randomString(&rng)] = randomValue(&rng, depth: depth + 1)
    }
    return .dictionary(entries)
  }
}

func randomString(_ rng: inout SeededGenerator) -> String {
  let pool: [Unicode.Scalar] = [
    "a", "Z", "0", " ", "\t", "\n", "\r", "&", "<", ">", "\"", "'", "é", "ß", "中", "😀", "\u{10FFFD}", "\u{FEFF}", "]",
  ]
  var scalars = String.UnicodeScalarView()
  for _ in 0..<Int.random(in: 0..<20, using: &rng) {
    scalars.append(pool.randomElement(using: &rng)!)
  }
  return String(scalars)
}
