import Foundation
import LiveActivities
import Testing

/// A content state encoded without JSONEncoder (JSONValueEncoder) gives JSONEncoder's bytes, or leaves the value to
/// JSONEncoder.
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
    let tree = try JSONValueEncoder().encode(state)
    #expect(ActivityJSON.encode(tree) == (try Self.foundation(state)))
    #expect(ActivityJSON.encode(try JSONValueEncoder().encode([1, 2])) == (try Self.foundation([1, 2])))
    #expect(ActivityJSON.encode(try JSONValueEncoder().encode("top")) == (try Self.foundation("top")))
  }

  @Test func whatItCannotWriteAlikeIsLeftToJSONEncoder() throws {
    #expect(throws: JSONValueEncoder.Unsupported.self) { try JSONValueEncoder().encode(WithFloat()) }
    #expect(throws: JSONValueEncoder.Unsupported.self) { try JSONValueEncoder().encode(Decimal(string: "1.5")!) }
    #expect(throws: JSONValueEncoder.Unsupported.self) { try JSONValueEncoder().encode(UInt64.max) }
    #expect(throws: JSONValueEncoder.Unsupported.self) { try JSONValueEncoder().encode(Double.nan) }
    #expect(throws: JSONValueEncoder.Unsupported.self) { try JSONValueEncoder().encode(Empty()) }
  }
}
