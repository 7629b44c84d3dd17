import Foundation

/// Encodes an `Encodable` value straight into a `JSONValue`, as JSONEncoder would write it (`.deferredToDate`,
/// `Data` as base64, `URL` as its absolute string): JSONEncoder took 18 µs for a five-field content state, the
/// largest part left of an update's encoding. What it does not write the same way (`Decimal`, `Float`, an integer
/// past Int64, a value that encodes nothing, NaN) throws `Unsupported`, and the caller asks JSONEncoder, which
/// decides.
package struct JSONValueEncoder {
  /// The value cannot be encoded here as JSONEncoder would: ask JSONEncoder.
  package struct Unsupported: Error {}

  package init() {}

  package func encode<T: Encodable>(_ value: T) throws -> JSONValue {
    let box = Box()
    try Self.encode(value, into: box, path: [])
    guard let result = box.value else { throw Unsupported() }
    return result
  }

  /// A value being built: containers fill it after it was handed out (nested containers, superEncoder).
  final class Box {
    var value: JSONValue?
    var object: [String: Member]?
    var array: [Box]?

    /// A keyed member: a scalar is stored as it is (a box per field was most of a small state's allocations).
    enum Member {
      case value(JSONValue)
      case box(Box)

      var resolved: JSONValue? {
        switch self {
        case .value(let value): return value
        case .box(let box): return box.resolved
        }
      }
    }

    var resolved: JSONValue? {
      if let object {
        var out: [String: JSONValue] = [:]
        out.reserveCapacity(object.count)
        for (key, member) in object {
          guard let value = member.resolved else { return nil }
          out[key] = value
        }
        return .object(out)
      }
      if let array {
        var out: [JSONValue] = []
        for box in array {
          guard let value = box.resolved else { return nil }
          out.append(value)
        }
        return .array(out)
      }
      return value
    }
  }

  static func encode<T: Encodable>(_ value: T, into box: Box, path: [any CodingKey]) throws {
    switch value {
    case let data as Data: box.value = .string(data.base64EncodedString())
    case let url as URL: box.value = .string(url.absoluteString)
    case is Decimal: throw Unsupported()
    default:
      let encoder = ValueEncoder(box: box, codingPath: path)
      try value.encode(to: encoder)
      guard let resolved = box.resolved else { throw Unsupported() }
      box.value = resolved
      box.object = nil
      box.array = nil
    }
  }

  static func scalar<T: BinaryInteger>(_ value: T) throws -> JSONValue {
    guard let i = Int64(exactly: value) else { throw Unsupported() }
    return .integer(i)
  }

  static func scalar(_ value: Double) throws -> JSONValue {
    guard value.isFinite else { throw Unsupported() }  // JSONEncoder refuses it too, with its own message
    return .double(value)
  }

  /// JSONEncoder writes a Float with its own digits (`1e+10`, where a double prints `10000000000`): left to it.
  static func scalar(_ value: Float) throws -> JSONValue { throw Unsupported() }

  struct ValueEncoder: Encoder {
    let box: Box
    var codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
      if box.object == nil { box.object = [:] }
      return KeyedEncodingContainer(Keyed<Key>(box: box, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
      if box.array == nil { box.array = [] }
      return Unkeyed(box: box, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { Single(box: box, codingPath: codingPath) }
  }

  struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: Box
    var codingPath: [any CodingKey]

    func child(_ key: Key) -> Box {
      let child = Box()
      box.object![key.stringValue] = .box(child)
      return child
    }

    func set(_ key: Key, _ value: JSONValue) { box.object![key.stringValue] = .value(value) }

    mutating func encodeNil(forKey key: Key) throws { set(key, .null) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(key, .bool(value)) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(key, .string(value)) }
    mutating func encode(_ value: Double, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Float, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(key, try scalar(value)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
      try JSONValueEncoder.encode(value, into: child(key), path: codingPath + [key])
    }
    mutating func nestedContainer<NestedKey: CodingKey>(
      keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
      ValueEncoder(box: child(key), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
      ValueEncoder(box: child(key), codingPath: codingPath + [key]).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder {
      let child = Box()
      box.object!["super"] = .box(child)  // JSONEncoder's key for it
      return ValueEncoder(box: child, codingPath: codingPath)
    }
    mutating func superEncoder(forKey key: Key) -> any Encoder { ValueEncoder(box: child(key), codingPath: codingPath) }
  }

  struct Unkeyed: UnkeyedEncodingContainer {
    let box: Box
    var codingPath: [any CodingKey]
    var count: Int { box.array!.count }

    func next() -> Box {
      let child = Box()
      box.array!.append(child)
      return child
    }

    mutating func encodeNil() throws { next().value = .null }
    mutating func encode(_ value: Bool) throws { next().value = .bool(value) }
    mutating func encode(_ value: String) throws { next().value = .string(value) }
    mutating func encode(_ value: Double) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Float) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Int) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Int8) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Int16) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Int32) throws { next().value = try scalar(value) }
    mutating func encode(_ value: Int64) throws { next().value = try scalar(value) }
    mutating func encode(_ value: UInt) throws { next().value = try scalar(value) }
    mutating func encode(_ value: UInt8) throws { next().value = try scalar(value) }
    mutating func encode(_ value: UInt16) throws { next().value = try scalar(value) }
    mutating func encode(_ value: UInt32) throws { next().value = try scalar(value) }
    mutating func encode(_ value: UInt64) throws { next().value = try scalar(value) }
    mutating func encode<T: Encodable>(_ value: T) throws {
      try JSONValueEncoder.encode(value, into: next(), path: codingPath)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<
      NestedKey
    > {
      ValueEncoder(box: next(), codingPath: codingPath).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
      ValueEncoder(box: next(), codingPath: codingPath).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { ValueEncoder(box: next(), codingPath: codingPath) }
  }

  struct Single: SingleValueEncodingContainer {
    let box: Box
    var codingPath: [any CodingKey]

    mutating func encodeNil() throws { box.value = .null }
    mutating func encode(_ value: Bool) throws { box.value = .bool(value) }
    mutating func encode(_ value: String) throws { box.value = .string(value) }
    mutating func encode(_ value: Double) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Float) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Int) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Int8) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Int16) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Int32) throws { box.value = try scalar(value) }
    mutating func encode(_ value: Int64) throws { box.value = try scalar(value) }
    mutating func encode(_ value: UInt) throws { box.value = try scalar(value) }
    mutating func encode(_ value: UInt8) throws { box.value = try scalar(value) }
    mutating func encode(_ value: UInt16) throws { box.value = try scalar(value) }
    mutating func encode(_ value: UInt32) throws { box.value = try scalar(value) }
    mutating func encode(_ value: UInt64) throws { box.value = try scalar(value) }
    mutating func encode<T: Encodable>(_ value: T) throws {
      try JSONValueEncoder.encode(value, into: box, path: codingPath)
    }
  }
}
