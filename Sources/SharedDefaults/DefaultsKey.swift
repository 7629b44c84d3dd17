import Foundation
import PropertyList

/// A value type that defaults can store directly.
public protocol DefaultsValue: Sendable {
  /// Converts a stored value; nil when it cannot (the key's default is read instead).
  init?(propertyListValue: PropertyListValue)
  /// The value as stored in the suite.
  var propertyListValue: PropertyListValue { get }
}

/// A typed key with its default value: `static let countdown = DefaultsKey("countdown", default: 0)`.
public struct DefaultsKey<Value: DefaultsValue>: Sendable {
  /// The key's name in the suite.
  public let name: String
  /// What a read returns while the key is unset or holds a value of another type.
  public let defaultValue: Value

  /// A key named `name` whose reads return `defaultValue` until it is set.
  public init(_ name: String, default defaultValue: Value) {
    self.name = name
    self.defaultValue = defaultValue
  }
}

extension Int: DefaultsValue {
  /// Reads an integer, a real without its fraction, a Boolean as 0 or 1, or a numeric string.
  public init?(propertyListValue: PropertyListValue) {
    switch propertyListValue {
    case .integer(let i): guard let v = i.intValue else { return nil }; self = v
    case .real(let d): guard let v = Int(exactly: d.rounded(.towardZero)) else { return nil }; self = v
    case .bool(let b): self = b ? 1 : 0
    case .string(let s): guard let v = Int(s) else { return nil }; self = v
    default: return nil
    }
  }
  /// Stored as a property-list integer.
  public var propertyListValue: PropertyListValue { .integer(PropertyListInteger(self)) }
}

extension Double: DefaultsValue {
  /// Reads a real, an integer, a Boolean as 0 or 1, or a numeric string.
  public init?(propertyListValue: PropertyListValue) {
    switch propertyListValue {
    case .real(let d): self = d
    case .integer(let i): self = Double(i.value)
    case .bool(let b): self = b ? 1 : 0
    case .string(let s): guard let v = Double(s) else { return nil }; self = v
    default: return nil
    }
  }
  /// Stored as a property-list real.
  public var propertyListValue: PropertyListValue { .real(self) }
}

extension Bool: DefaultsValue {
  /// Reads a Boolean, a number (non-zero is true) or a string such as "YES", "true" or "1".
  public init?(propertyListValue: PropertyListValue) {
    switch propertyListValue {
    case .bool(let b): self = b
    case .integer(let i): self = i.value != 0
    case .real(let d): self = d != 0
    case .string(let s):
      switch s.lowercased() {
      case "yes", "true", "1": self = true
      case "no", "false", "0": self = false
      default: return nil
      }
    default: return nil
    }
  }
  /// Stored as a property-list Boolean.
  public var propertyListValue: PropertyListValue { .bool(self) }
}

extension String: DefaultsValue {
  /// Reads a string, or an integer or real as its decimal text.
  public init?(propertyListValue: PropertyListValue) {
    switch propertyListValue {
    case .string(let s): self = s
    case .integer(let i): self = i.description
    case .real(let d): self = String(d)
    default: return nil
    }
  }
  /// Stored as a property-list string.
  public var propertyListValue: PropertyListValue { .string(self) }
}

extension Data: DefaultsValue {
  /// Reads a data value only.
  public init?(propertyListValue: PropertyListValue) {
    guard case .data(let bytes) = propertyListValue else { return nil }
    self = Data(bytes)
  }
  /// Stored as property-list data.
  public var propertyListValue: PropertyListValue { .data(Array(self)) }
}

extension Date: DefaultsValue {
  /// Reads a date value only.
  public init?(propertyListValue: PropertyListValue) {
    guard case .date(let d) = propertyListValue else { return nil }
    self = Date(timeIntervalSinceReferenceDate: d.secondsSinceReferenceDate)
  }
  /// Stored as a property-list date.
  public var propertyListValue: PropertyListValue {
    .date(PropertyListDate(secondsSinceReferenceDate: timeIntervalSinceReferenceDate))
  }
}

extension URL: DefaultsValue {
  /// Reads a URL stored as its absolute string.
  public init?(propertyListValue: PropertyListValue) {
    guard case .string(let s) = propertyListValue, let url = URL(string: s) else { return nil }
    self = url
  }
  /// Stored as its absolute string, as `UserDefaults` does.
  public var propertyListValue: PropertyListValue { .string(absoluteString) }
}

extension Array: DefaultsValue where Element: DefaultsValue {
  /// Reads an array whose every element converts; nil when one does not.
  public init?(propertyListValue: PropertyListValue) {
    guard case .array(let elements) = propertyListValue else { return nil }
    var result: [Element] = []
    for element in elements {
      guard let v = Element(propertyListValue: element) else { return nil }
      result.append(v)
    }
    self = result
  }
  /// Stored as a property-list array.
  public var propertyListValue: PropertyListValue { .array(map(\.propertyListValue)) }
}

extension Dictionary: DefaultsValue where Key == String, Value: DefaultsValue {
  /// Reads a dictionary whose every value converts; nil when one does not.
  public init?(propertyListValue: PropertyListValue) {
    guard case .dictionary(let entries) = propertyListValue else { return nil }
    var result: [String: Value] = [:]
    for (key, element) in entries {
      guard let v = Value(propertyListValue: element) else { return nil }
      result[key] = v
    }
    self = result
  }
  /// Stored as a property-list dictionary.
  public var propertyListValue: PropertyListValue { .dictionary(mapValues(\.propertyListValue)) }
}
