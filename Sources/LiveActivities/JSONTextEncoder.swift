import Foundation

/// Encodes an `Encodable` value straight into a ``JSONText``, as JSONEncoder would write it (`.sortedKeys`,
/// `.deferredToDate`, `Data` as base64, `URL` as its absolute string), in the read-back form JSONText keeps (a
/// double an `Int64` holds as that integer). JSONEncoder took 18 µs for a five-field content state, the largest part
/// left of an update's encoding; going through a `JSONValue` tree (a dictionary per object) was then the largest part.
/// What it does not write the same way (`Decimal`, `Float`, an integer past Int64, a value that encodes nothing,
/// NaN) throws `Unsupported`, and the caller asks JSONEncoder, which decides.
package struct JSONTextEncoder {
  /// The value cannot be encoded here as JSONEncoder would: ask JSONEncoder.
  package struct Unsupported: Error {}

  package init() {}

  package func encode<T: Encodable>(_ value: T) throws -> JSONText {
    let box = Box()
    try Self.encode(value, into: box, path: [])
    var writer = ActivityJSON.Writer()
    writer.wholeAsInteger = true
    guard box.write(into: &writer) else { throw Unsupported() }
    return JSONText(canonical: writer.bytes)
  }

  /// A value being built: containers fill it after it was handed out (nested containers, superEncoder), so it is
  /// written once the whole value was encoded.
  final class Box {
    var value: JSONValue?
    /// Keyed members in the order encoded (sorted when written; no dictionary: hashing every key was most of a
    /// small state's cost).
    var members: [(key: String, member: Member)]?
    var array: [Box]?

    /// A keyed member: a scalar is stored as it is (a box per field was most of a small state's allocations).
    enum Member {
      case value(JSONValue)
      case box(Box)
    }

    /// Writes the value; false when something in it encoded nothing (or a number JSON cannot write).
    func write(into writer: inout ActivityJSON.Writer) -> Bool {
      if let members { return Self.write(members, into: &writer) }
      if let array {
        writer.bytes.append(UInt8(ascii: "["))
        for (index, box) in array.enumerated() {
          if index > 0 { writer.bytes.append(UInt8(ascii: ",")) }
          guard box.write(into: &writer) else { return false }
        }
        writer.bytes.append(UInt8(ascii: "]"))
        return true
      }
      guard let value else { return false }
      return writer.value(value)
    }

    /// An object, keys in the order of their UTF-8 bytes; a key encoded twice keeps its last value, as JSONEncoder.
    private static func write(_ members: [(key: String, member: Member)], into writer: inout ActivityJSON.Writer)
      -> Bool
    {
      func member(_ member: Member) -> Bool {
        switch member {
        case .value(let value): return writer.value(value)
        case .box(let box): return box.write(into: &writer)
        }
      }
      writer.bytes.append(UInt8(ascii: "{"))
      if members.count == 1 {  // nothing to sort
        writer.string(members[0].key)
        writer.bytes.append(UInt8(ascii: ":"))
        guard member(members[0].member) else { return false }
      } else {
        let order = members.indices.sorted { a, b in
          members[a].key == members[b].key ? a < b : members[a].key.utf8.lexicographicallyPrecedes(members[b].key.utf8)
        }
        var first = true
        for (position, index) in order.enumerated() {
          // Of equal keys (adjacent now, in encoding order) the last is written.
          if position + 1 < order.count, members[order[position + 1]].key == members[index].key { continue }
          if !first { writer.bytes.append(UInt8(ascii: ",")) }
          first = false
          writer.string(members[index].key)
          writer.bytes.append(UInt8(ascii: ":"))
          guard member(members[index].member) else { return false }
        }
      }
      writer.bytes.append(UInt8(ascii: "}"))
      return true
    }
  }

  static func encode<T: Encodable>(_ value: T, into box: Box, path: [any CodingKey]) throws {
    // The types JSONEncoder writes its own way, told by type (a dynamic cast of every value to each of them was a
    // tenth of encoding a one-field state).
    if T.self == Data.self {
      box.value = .string((value as! Data).base64EncodedString())
    } else if T.self == URL.self {
      box.value = .string((value as! URL).absoluteString)
    } else if T.self == Decimal.self {
      throw Unsupported()
    } else {
      try value.encode(to: ValueEncoder(box: box, codingPath: path))
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
      if box.members == nil {
        box.members = []
        box.members!.reserveCapacity(8)  // a state's few fields without growing the array one by one
      }
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
      box.members!.append((key.stringValue, .box(child)))
      return child
    }

    func set(_ key: Key, _ value: JSONValue) { box.members!.append((key.stringValue, .value(value))) }

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
      try JSONTextEncoder.encode(value, into: child(key), path: codingPath + [key])
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
      box.members!.append(("super", .box(child)))  // JSONEncoder's key for it
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
      try JSONTextEncoder.encode(value, into: next(), path: codingPath)
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
      try JSONTextEncoder.encode(value, into: box, path: codingPath)
    }
  }
}
