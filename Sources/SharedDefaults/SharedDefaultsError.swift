import FileCoordination
import GroupContainerCore
import SystemLayer

/// Why a defaults operation failed. Each error says what and where.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`); a failed system
/// call under it is ``underlyingError``.
public struct SharedDefaultsError: Error, CustomStringConvertible, Sendable {
  /// What kind of failure a ``SharedDefaultsError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `valueTooLarge`.
    public var description: String { name }

    /// The suite name breaks the rule.
    public static let invalidSuiteName = Code("invalidSuiteName")
    /// The key cannot be stored.
    public static let invalidKey = Code("invalidKey")
    /// The value has a type a property list cannot hold.
    public static let unsupportedValue = Code("unsupportedValue")
    /// One record is over the size limit.
    public static let valueTooLarge = Code("valueTooLarge")
    /// A `Codable` value failed to encode or decode.
    public static let coding = Code("coding")
    /// The suite is over the size a snapshot may have.
    public static let suiteTooLarge = Code("suiteTooLarge")
    /// A file of the suite could not be read or written (``SharedDefaultsError/underlyingError``).
    public static let system = Code("system")
    /// The container refused something (``SharedDefaultsError/containerError``).
    public static let container = Code("container")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable {
    case invalidSuiteName(String, String)
    case invalidKey(String, String)
    case unsupportedValue(String)
    case valueTooLarge(String, Int)
    case coding(key: String, message: String)
    case suiteTooLarge(String, String)
    case system(FileSystemError)
    case container(GroupContainerError)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The suite name breaks the rule (reverse-DNS characters, like container identifiers); the second value says how.
  public static func invalidSuiteName(_ name: String, _ rule: String) -> Self { Self(.invalidSuiteName(name, rule)) }
  /// The key cannot be stored; the second value says why.
  public static func invalidKey(_ key: String, _ rule: String) -> Self { Self(.invalidKey(key, rule)) }
  /// The value has a type a property list cannot hold.
  public static func unsupportedValue(_ what: String) -> Self { Self(.unsupportedValue(what)) }
  /// One record is over the size limit (the key, and the limit in bytes).
  public static func valueTooLarge(_ key: String, _ limit: Int) -> Self { Self(.valueTooLarge(key, limit)) }
  /// A `Codable` value failed to encode or decode.
  public static func coding(key: String, message: String) -> Self { Self(.coding(key: key, message: message)) }
  /// The suite is over the size a snapshot may have (the path, and what is over): sets fail until keys are
  /// removed; nothing is lost.
  public static func suiteTooLarge(_ path: String, _ what: String) -> Self { Self(.suiteTooLarge(path, what)) }
  /// A file of the suite could not be read or written (full disk, permissions…).
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }
  /// The container refused something.
  public static func container(_ error: GroupContainerError) -> Self { Self(.container(error)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .invalidSuiteName: .invalidSuiteName
    case .invalidKey: .invalidKey
    case .unsupportedValue: .unsupportedValue
    case .valueTooLarge: .valueTooLarge
    case .coding: .coding
    case .suiteTooLarge: .suiteTooLarge
    case .system: .system
    case .container: .container
    }
  }

  /// The key, for ``Code/invalidKey``, ``Code/valueTooLarge`` and ``Code/coding``.
  public var key: String? {
    switch detail {
    case .invalidKey(let key, _), .valueTooLarge(let key, _), .coding(let key, _): key
    default: nil
    }
  }

  /// The suite name (``Code/invalidSuiteName``), the suite's path (``Code/suiteTooLarge``), or the file a system
  /// call or the container failed on.
  public var path: String? {
    switch detail {
    case .invalidSuiteName(let text, _), .suiteTooLarge(let text, _): text
    case .system(let error): error.path
    case .container(let error): error.path
    default: nil
    }
  }

  /// Why: the broken rule, the unsupported value, the coding error's message, or what is over the limit.
  public var reason: String? {
    switch detail {
    case .invalidSuiteName(_, let text), .invalidKey(_, let text), .unsupportedValue(let text), .coding(_, let text),
      .suiteTooLarge(_, let text):
      text
    default: nil
    }
  }

  /// The limit in bytes, for ``Code/valueTooLarge``.
  public var limit: Int? {
    if case .valueTooLarge(_, let limit) = detail { limit } else { nil }
  }

  /// The container's refusal, for ``Code/container``.
  public var containerError: GroupContainerError? {
    if case .container(let error) = detail { error } else { nil }
  }

  /// The failed system call, for ``Code/system`` (and for ``Code/container`` when one is under it).
  public var underlyingError: SystemError? {
    switch detail {
    case .system(let error): SystemError(error)
    case .container(let error): error.underlyingError
    default: nil
    }
  }

  /// The failed system call in the package's own terms, for ``Code/system`` (and under ``Code/container``).
  package var fileSystemError: FileSystemError? {
    switch detail {
    case .system(let error): error
    case .container(let error): error.fileSystemError
    default: nil
    }
  }

  /// What failed, on which suite or key, and what to do.
  public var description: String {
    switch detail {
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

  static func wrap<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(SharedDefaultsError) -> T {
    do { return try body() } catch { throw .system(error) }
  }
}
