// libFuzzer harness for the PropertyList readers (binary, XML, OpenStep) and writers.
//
// Build and run with Fuzz/run.sh. A plain `swift build` compiles the stub at the bottom, so the
// package builds without libFuzzer.
import PropertyList

#if FUZZING
  import CFuzzShim
  import Glibc

  /// Small enough that a crafted input cannot make one execution slow.
  let fuzzLimits = PropertyListLimits(maxBytes: 1 << 20, maxDepth: 512, maxObjects: 50_000)

  /// Structural equality where NaN equals NaN, reals compare bit for bit (so 0.0 and -0.0
  /// differ), strings compare scalar for scalar (not by canonical equivalence), and — after an
  /// XML trip — dates compare with the fractional second dropped.
  func same(_ a: PropertyListValue, _ b: PropertyListValue, viaXML: Bool) -> Bool {
    switch (a, b) {
    case (.real(let x), .real(let y)):
      return (x.isNaN && y.isNaN) || x.bitPattern == y.bitPattern
    case (.date(let x), .date(let y)):
      let expected = viaXML ? x.secondsSinceReferenceDate.rounded(.down) : x.secondsSinceReferenceDate
      return (expected.isNaN && y.secondsSinceReferenceDate.isNaN)
        || expected.bitPattern == y.secondsSinceReferenceDate.bitPattern
        || (viaXML && expected == y.secondsSinceReferenceDate)
    case (.string(let x), .string(let y)):
      return x.unicodeScalars.elementsEqual(y.unicodeScalars)
    case (.array(let x), .array(let y)):
      return x.count == y.count && zip(x, y).allSatisfy { same($0, $1, viaXML: viaXML) }
    case (.dictionary(let x), .dictionary(let y)):
      guard x.count == y.count else { return false }
      for (key, value) in x {
        guard let other = y[key], same(value, other, viaXML: viaXML) else { return false }
      }
      let xKeys = x.keys.map { Array($0.unicodeScalars) }.sorted { $0.lexicographicallyPrecedes($1) }
      let yKeys = y.keys.map { Array($0.unicodeScalars) }.sorted { $0.lexicographicallyPrecedes($1) }
      return xKeys == yKeys
    default:
      return a == b
    }
  }

  /// Re-encodes a parsed value in both formats and checks it reads back unchanged.
  func checkRoundTrip(_ value: PropertyListValue) {
    for format in PropertyListFormat.allCases {
      let encoded: [UInt8]
      do {
        encoded = try value.encoded(as: format, limits: fuzzLimits)
      } catch {
        // Only "this format cannot hold that value" is acceptable from a writer.
        precondition(error.kind == .unsupportedValue, "writer failed: \(error)")
        continue
      }
      let decoded: PropertyListValue
      do {
        decoded = try PropertyListValue(bytes: encoded, format: format)
      } catch {
        preconditionFailure("cannot read back our own \(format) output: \(error)")
      }
      precondition(same(value, decoded, viaXML: format == .xml), "\(format) round trip changed the value")
    }
  }

  /// Old-style plists have strings, data, arrays and dictionaries only.
  func onlyOpenStepTypes(_ value: PropertyListValue) -> Bool {
    switch value {
    case .string, .data: return true
    case .array(let items): return items.allSatisfy(onlyOpenStepTypes)
    case .dictionary(let entries): return entries.values.allSatisfy(onlyOpenStepTypes)
    default: return false
    }
  }

  let callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32 = { data, size in
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    for format in PropertyListFormat.allCases {
      if let value = try? PropertyListValue(bytes: bytes, format: format, limits: fuzzLimits) {
        checkRoundTrip(value)
      }
    }
    _ = try? PropertyListValue(bytes: bytes, limits: fuzzLimits)
    // The OpenStep reader: never traps; what it reads holds only strings, data, arrays and dictionaries, and
    // survives both writers.
    if let value = try? OpenStepPropertyListReader.read(bytes, limits: fuzzLimits) {
      precondition(onlyOpenStepTypes(value), "the OpenStep reader produced a value the format cannot express")
      checkRoundTrip(value)
    }
    return 0
  }

  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, callback))
#else
  print("PropertyListFuzz was built without libFuzzer; build and run it with Fuzz/run.sh.")
#endif
