/// The one error type thrown by every reader and writer in this module, so callers can handle
/// all failures with a single typed `catch`. `message` says what failed; `offset` says where.
public struct PropertyListError: Error, Sendable, Hashable, CustomStringConvertible {
  /// Broad category of a failure, for programmatic handling.
  public enum Kind: Sendable, Hashable {
    /// The input is neither a binary (`bplist00`) nor an XML property list.
    case unknownFormat
    /// A binary property list violates the `bplist00` format.
    case invalidBinary
    /// An XML property list is not well-formed XML or not a valid plist document.
    case invalidXML
    /// An old-style (OpenStep) text property list is malformed (`OpenStepPropertyListReader`).
    case invalidOpenStep
    /// The input or value exceeds one of the bounds in `PropertyListLimits`.
    case limitExceeded
    /// A value cannot be represented in the requested output format (e.g. a UID).
    case unsupportedValue
  }

  /// What kind of failure this is.
  public let kind: Kind
  /// Human-readable description of what failed, without the offset.
  public let message: String
  /// Byte offset in the input where the problem was detected; `nil` for writer errors.
  public let offset: Int?

  /// Creates an error; mostly useful for tests and wrappers.
  public init(kind: Kind, message: String, offset: Int? = nil) {
    self.kind = kind
    self.message = message
    self.offset = offset
  }

  /// `message`, followed by the byte offset when there is one.
  public var description: String {
    if let offset {
      return "\(message) (at byte offset \(offset))"
    }
    return message
  }
}

extension PropertyListError {
  static func binary(_ message: String, at offset: Int) -> PropertyListError {
    PropertyListError(kind: .invalidBinary, message: message, offset: offset)
  }

  static func xml(_ message: String, at offset: Int) -> PropertyListError {
    PropertyListError(kind: .invalidXML, message: message, offset: offset)
  }

  static func limit(_ message: String, at offset: Int?) -> PropertyListError {
    PropertyListError(kind: .limitExceeded, message: message, offset: offset)
  }

  static func unsupported(_ message: String) -> PropertyListError {
    PropertyListError(kind: .unsupportedValue, message: message, offset: nil)
  }
}

/// Two-digit upper-case hex, for markers in error messages.
func hexByte(_ byte: UInt8) -> String {
  let digits = Array("0123456789ABCDEF")
  return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xF)])
}
