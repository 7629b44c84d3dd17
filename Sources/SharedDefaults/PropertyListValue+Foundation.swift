import Foundation
import PropertyList

/// Conversions between Foundation values (what `UserDefaults` takes and returns) and `PropertyListValue`.
extension PropertyListValue {
  /// `Int`, `Int8…64`, `UInt…64`, `Double`, `Float`, `Bool`, `String`, `Data`, `Date`, `URL` (stored as its
  /// absolute string, as UserDefaults does), arrays and `[String: Any]` of those, or a `PropertyListValue`.
  public init(foundation value: Any) throws(SharedDefaultsError) {
    switch value {
    case let v as PropertyListValue: self = v
    case let n as NSNumber where type(of: value) is NSNumber.Type:
      // An NSNumber object (not a Swift number bridged to one): `as Bool` would succeed for any 0 or 1. On Linux a
      // Boolean NSNumber is one of two `__NSCFBoolean` singletons (`NSNumber(value: true)`, `true as NSNumber`,
      // JSONSerialization's `true`); other numbers keep their kind in `objCType`.
      if n === NSNumber(value: true) || n === NSNumber(value: false) {
        self = .bool(n.boolValue)
      } else {
        switch String(cString: n.objCType) {
        case "f", "d": self = .real(n.doubleValue)
        case "Q", "L", "I", "S", "C": self = .integer(PropertyListInteger(n.uint64Value))
        default: self = .integer(PropertyListInteger(n.int64Value))
        }
      }
    case let v as Bool: self = .bool(v)
    case let v as Int: self = .integer(PropertyListInteger(v))
    case let v as Int8: self = .integer(PropertyListInteger(Int(v)))
    case let v as Int16: self = .integer(PropertyListInteger(Int(v)))
    case let v as Int32: self = .integer(PropertyListInteger(Int(v)))
    case let v as Int64: self = .integer(PropertyListInteger(v))
    case let v as UInt: self = .integer(PropertyListInteger(UInt64(v)))
    case let v as UInt8: self = .integer(PropertyListInteger(Int(v)))
    case let v as UInt16: self = .integer(PropertyListInteger(Int(v)))
    case let v as UInt32: self = .integer(PropertyListInteger(Int(v)))
    case let v as UInt64: self = .integer(PropertyListInteger(v))
    case let v as Double: self = .real(v)
    case let v as Float: self = .real(Double(v))
    case let v as String: self = .string(v)
    case let v as Data: self = .data(Array(v))
    case let v as Date: self = .date(PropertyListDate(secondsSinceReferenceDate: v.timeIntervalSinceReferenceDate))
    case let v as URL: self = .string(v.absoluteString)
    case let v as [Any]:
      var elements: [PropertyListValue] = []
      for element in v { elements.append(try PropertyListValue(foundation: element)) }
      self = .array(elements)
    case let v as [String: Any]:
      var dictionary: [String: PropertyListValue] = [:]
      for (key, element) in v { dictionary[key] = try PropertyListValue(foundation: element) }
      self = .dictionary(dictionary)
    default:
      throw .unsupportedValue("\(type(of: value)) is not a property-list type")
    }
  }

  /// The Foundation form: `Int` (or `Int128` text beyond 64 bits… as `NSNumber` cannot hold it, a `String`),
  /// `Double`, `Bool`, `String`, `Data`, `Date`, `[Any]`, `[String: Any]`.
  public var foundationValue: Any {
    switch self {
    case .string(let v): return v
    case .integer(let v):
      if let i = v.intValue { return i }
      if let u = v.uint64Value { return u }
      return v.description
    case .real(let v): return v
    case .bool(let v): return v
    case .date(let v): return Date(timeIntervalSinceReferenceDate: v.secondsSinceReferenceDate)
    case .data(let v): return Data(v)
    case .array(let v): return v.map(\.foundationValue)
    case .dictionary(let v): return v.mapValues(\.foundationValue)
    case .uid(let v): return v
    }
  }
}
