import FileCoordination
import SystemLayer

/// Why a defaults operation failed. Each case says what and where.
public enum SharedDefaultsError: Error, CustomStringConvertible, Sendable {
  /// The suite name breaks the rule (reverse-DNS characters, like container identifiers).
  case invalidSuiteName(String, String)
  /// The key cannot be stored.
  case invalidKey(String, String)
  /// The value has a type a property list cannot hold.
  case unsupportedValue(String)
  /// One record is over the size limit.
  case valueTooLarge(String, Int)
  /// A `Codable` value failed to encode or decode.
  case coding(key: String, message: String)
  /// The suite is over the size a snapshot may have (the path, and what is over): sets fail until keys are
  /// removed; nothing is lost.
  case suiteTooLarge(String, String)
  /// A file of the suite could not be read or written (full disk, permissions…).
  case system(FileSystemError)
  /// The container refused something.
  case container(GroupContainerError)

  /// What failed, on which suite or key, and what to do.
  public var description: String {
    switch self {
    case .invalidSuiteName(let name, let rule): "suite name '\(name)' is invalid: \(rule)"
    case .invalidKey(let key, let rule): "key '\(key)' is invalid: \(rule)"
    case .unsupportedValue(let what): "value cannot be stored in defaults: \(what)"
    case .valueTooLarge(let key, let limit): "value for key '\(key)' is larger than \(limit) bytes"
    case .coding(let key, let message): "value for key '\(key)' could not be coded: \(message)"
    case .suiteTooLarge(let path, let what):
      "suite '\(path)' is too large (\(what)); remove keys or split it into several suites"
    case .system(let error): error.description
    case .container(let error): error.description
    }
  }

  static func wrap<T>(_ body: () throws(FileSystemError) -> T) throws(SharedDefaultsError) -> T {
    do { return try body() } catch { throw .system(error) }
  }
}
