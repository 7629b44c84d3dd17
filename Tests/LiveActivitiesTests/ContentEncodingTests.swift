import Foundation
import LiveActivities
import Testing

/// A content state encoded without JSONEncoder (JSONTextEncoder) gives JSONEncoder's bytes (in JSONText's read-back
/// form), or leaves the value to JSONEncoder.
///
/// Mutant these tests catch (made once by hand, seen failing, restored): `Data` encoded as its own array of bytes
/// instead of base64.
@Suite struct ContentEncodingTests {
  enum Phase: String, Codable { case first, second }

  struct Inner: Codable, Equatable {
    var label: String?
    var values: [Double]
  }

  struct State: Codable, Equatable {
    var int = -42
    var small: UInt8 = 200
    var big: UInt64 = 1 << 40
    var text = "Lyon \"A\"\n/é😀\u{1}"
    var flag = true
    var none: Int? = nil
    var double = 0.1
    var whole = 3.0
    var huge = 1e300
    var date = Date(timeIntervalSince1970: 1_800_000_000.25)
    var data = Data([0, 1, 2, 250])
    var url = URL(string: "https://example.com/a?b=c")!
    var phase = Phase.second
    var nested = [Inner(label: nil, values: [1, 2.5]), Inner(label: "x", values: [])]
    var byName: [String: Int] = ["b": 2, "a": 1, "10": 3]
    var byNumber: [Int: String] = [3: "c", 1: "a"]
    var pairs: [[String]] = [["a"], []]
  }

  struct WithFloat: Codable { var f: Float = 1e10 }

  struct Empty: Codable {
    func encode(to encoder: any Encoder) throws {}
  }

  static func foundation<T: Encodable>(_ value: T) throws -> [UInt8] {
    Array(try ActivityRecordFormat.encoder.encode(value))
  }

  @Test func aStateEncodesToJSONEncodersBytes() throws {
    let state = State()
    #expect(try JSONTextEncoder().encode(state).bytes == (try Self.foundation(state)))
    #expect(try JSONTextEncoder().encode([1, 2]).bytes == (try Self.foundation([1, 2])))
    #expect(try JSONTextEncoder().encode("top").bytes == (try Self.foundation("top")))
  }

  /// JSONText's read-back form: a double an Int64 holds is its integer (what reading JSONEncoder's `1e+16` or `-0`
  /// gives), and the bytes read back to a value that writes them again.
  @Test func wholeDoublesAreWrittenAsTheIntegersTheyReadBackAs() throws {
    struct Doubles: Codable { var huge = 1e16, minusZero = -0.0, past = 1e19, half = 0.5 }
    let text = try JSONTextEncoder().encode(Doubles())
    #expect(text.text == #"{"half":0.5,"huge":10000000000000000,"minusZero":0,"past":1e+19}"#)
    #expect(JSONText(text.value) == text)
    #expect(JSONText(try JSONDecoder().decode(JSONValue.self, from: Data(try Self.foundation(Doubles())))) == text)
  }

  /// A key encoded twice keeps its last value, as JSONEncoder; keys sort by their UTF-8 bytes.
  @Test func aKeyEncodedTwiceKeepsItsLastValue() throws {
    struct Twice: Encodable {
      enum Key: String, CodingKey { case b, a, é, Z }
      func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(1, forKey: .b)
        try c.encode(2, forKey: .a)
        try c.encode(3, forKey: .b)
        try c.encode("x", forKey: .é)
        try c.encode(true, forKey: .Z)
      }
    }
    #expect(try JSONTextEncoder().encode(Twice()).bytes == (try Self.foundation(Twice())))
  }

  @Test func whatItCannotWriteAlikeIsLeftToJSONEncoder() throws {
    #expect(throws: JSONTextEncoder.Unsupported.self) { try JSONTextEncoder().encode(WithFloat()) }
    #expect(throws: JSONTextEncoder.Unsupported.self) { try JSONTextEncoder().encode(Decimal(string: "1.5")!) }
    #expect(throws: JSONTextEncoder.Unsupported.self) { try JSONTextEncoder().encode(UInt64.max) }
    #expect(throws: JSONTextEncoder.Unsupported.self) { try JSONTextEncoder().encode(Double.nan) }
    #expect(throws: JSONTextEncoder.Unsupported.self) { try JSONTextEncoder().encode(Empty()) }
  }
}
