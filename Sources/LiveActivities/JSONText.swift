import Foundation

/// A JSON value held as its canonical bytes: compact, keys sorted by their UTF-8 bytes, numbers as
/// ``ActivityJSON/Writer`` writes them — the bytes JSONEncoder writes with `.sortedKeys` and `.withoutEscapingSlashes`.
///
/// Why bytes and not a `JSONValue` tree: a record is written far more often than its attributes or state are read
/// as values. An update went from the app's `Encodable` to a tree (dictionaries, one per object) and from the tree to
/// bytes for the record; a reader went from the record's tree back to bytes to decode the app's type. With the bytes
/// kept, an update writes them as they are and a reader decodes the app's type from them. Two texts are equal when
/// their values write the same bytes (`1.0` and `1` are one value, as JSONEncoder and every reader see them). The
/// bytes read back to a value that writes them again: a double an `Int64` holds is written as that integer
/// (`1e+16` as `10000000000000000`, `-0.0` as `0`), which is what reading it gives.
package struct JSONText: Codable, Hashable, Sendable {
  /// The canonical bytes.
  package let bytes: [UInt8]

  /// Bytes ``ActivityJSON/Writer`` wrote (not checked: callers hold the writer's output).
  package init(canonical bytes: [UInt8]) { self.bytes = bytes }

  /// `value`'s canonical bytes; nil when it holds a number JSON cannot write (NaN, infinity).
  package init?(_ value: JSONValue) {
    var writer = ActivityJSON.Writer()
    writer.wholeAsInteger = true
    guard writer.value(value) else { return nil }
    bytes = writer.bytes
  }

  /// The value, read from the bytes (by hand; JSONDecoder past the hand reader's depth).
  package var value: JSONValue {
    if let value = ActivityJSON.decode(bytes) { return value }
    return (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))) ?? .null
  }

  /// The bytes as text.
  package var text: String { String(decoding: bytes, as: UTF8.self) }

  /// Decodes any JSON value and keeps its canonical bytes.
  package init(from decoder: any Decoder) throws {
    guard let text = JSONText(try JSONValue(from: decoder)) else {
      throw DecodingError.dataCorrupted(
        .init(codingPath: decoder.codingPath, debugDescription: "a number is not finite"))
    }
    self = text
  }

  /// Encodes the value (what JSONEncoder writes for it: these bytes).
  package func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}
