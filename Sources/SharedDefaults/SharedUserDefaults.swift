import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import PropertyList
import Synchronization

/// `UserDefaults`, shaped as iOS code calls it — `SharedUserDefaults(suiteName: "group.com.example.notes")`,
/// setters without `try` — over the cross-process engine ``SharedDefaults``. For code ported from iOS; new code
/// can use ``SharedDefaults`` and its throwing setters directly (``shared``).
///
/// ```swift
/// let defaults = SharedUserDefaults(suiteName: "group.com.example.notes")!
/// defaults.set(42, forKey: "count")             // no `try`, as on iOS
/// let count = defaults.integer(forKey: "count")  // 42, in every process of the group
/// ```
///
/// Why not the name `UserDefaults`: Foundation on Linux declares `UserDefaults` too, and a second type of that
/// name in this module does not shadow Foundation's for a client importing both — every use becomes ambiguous
/// (tried with Swift 6.3). One changed line in ported code buys a name that never clashes.
///
/// ## Errors are surfaced, never dropped
/// Apple's setters cannot fail; the engine's can (a value of an unsupported type, a value over the size limit, a
/// full disk, a read-only container). A setter that fails here leaves the suite unchanged and, in this order:
/// 1. logs the error at `error` level (logger label `GroupContainer.SharedDefaults`),
/// 2. keeps it in ``lastError`` (until the next failure replaces it, or you set it to `nil`),
/// 3. calls ``errorHandler`` when you set one, with the error and the key.
///
/// ``synchronize()`` returns `false` on failure, as Apple's does, after the same three steps.
/// Getters never fail (the engine's getters do not throw).
///
/// ## Behavior
/// Everything ``SharedDefaults`` guarantees: a setter returns once every process can read the value; no lost
/// update across processes; a committed write survives `kill -9`.
public final class SharedUserDefaults: Sendable {
  /// The engine underneath: typed keys, atomic ``SharedDefaults/update(_:_:)->Value``, change streams.
  public let shared: SharedDefaults

  private struct State {
    var lastError: SharedDefaultsError?
    var errorHandler: (@Sendable (SharedDefaultsError, String?) -> Void)?
  }
  // Sendable honestly: the only mutable state is behind this Mutex.
  private let state = Mutex(State())

  /// Opens the suite of a group, as Apple's `UserDefaults(suiteName: "group.…")` does: a suite name that is a
  /// group identifier (it starts with `group.`) names both the container and the suite in it.
  ///
  /// Returns `nil`, with the reason logged, when `suiteName` is `nil`, is not a group identifier (there is no
  /// per-app domain here: open other suites with ``init(suiteName:container:)``), or the container or suite
  /// cannot be opened (an invalid identifier, no container root, permissions).
  public convenience init?(suiteName: String?) {
    guard let suiteName, suiteName.hasPrefix("group.") else {
      Self.logger.error(
        "SharedUserDefaults(suiteName: \(suiteName.map { "'\($0)'" } ?? "nil")): not a group identifier; pass an identifier starting with 'group.', or use init(suiteName:container:) for another suite"
      )
      return nil
    }
    let container: GroupContainer
    do {
      container = try GroupContainer(identifier: suiteName)
    } catch {
      Self.logger.error("SharedUserDefaults(suiteName: '\(suiteName)'): cannot open the group container: \(error)")
      return nil
    }
    self.init(suiteName: suiteName, container: container)
  }

  /// Opens the suite `suiteName` (default: the container's identifier) of `container`; `nil`, with the reason
  /// logged, when it cannot be opened.
  public convenience init?(suiteName: String? = nil, container: GroupContainer) {
    do {
      self.init(try SharedDefaults(suiteName: suiteName, container: container))
    } catch {
      Self.logger.error(
        "SharedUserDefaults(suiteName: '\(suiteName ?? container.identifier)'): cannot open the suite in \(container.path): \(error)"
      )
      return nil
    }
  }

  /// Wraps an open suite.
  public init(_ shared: SharedDefaults) {
    self.shared = shared
  }

  static let logger = Logger(label: "GroupContainer.SharedDefaults")

  // MARK: Errors

  /// The last error a setter, ``removeObject(forKey:)``, ``register(defaults:)`` or ``synchronize()`` met in
  /// this object; `nil` when none yet (or after you reset it).
  public var lastError: SharedDefaultsError? {
    get { state.withLock { $0.lastError } }
    set { state.withLock { $0.lastError = newValue } }
  }

  /// Called on the failing caller's thread with each error and the key involved (`nil` for ``synchronize()``
  /// and ``register(defaults:)``), after it is logged and kept in ``lastError``.
  public var errorHandler: (@Sendable (SharedDefaultsError, String?) -> Void)? {
    get { state.withLock { $0.errorHandler } }
    set { state.withLock { $0.errorHandler = newValue } }
  }

  /// Runs one throwing engine call; a failure is logged, kept and handed to the handler (see the type's
  /// discussion). Returns whether it succeeded.
  @discardableResult
  private func surfacing(
    _ operation: String, key: String?, _ body: () throws(SharedDefaultsError) -> Void
  ) -> Bool {
    do {
      try body()
      return true
    } catch {
      // A key can be up to 1 MiB: the log names its start, the handler gets it whole.
      let what = key.map { "\(operation) for key '\($0.count > 64 ? $0.prefix(64) + "…" : $0)'" } ?? operation
      Self.logger.error("\(what) in suite '\(shared.suiteName)' of \(shared.container.path) failed: \(error)")
      let handler = state.withLock { state in
        state.lastError = error
        return state.errorHandler
      }
      handler?(error, key)
      return false
    }
  }

  // MARK: Setters (Apple's names, no `try`)

  /// Sets a property-list value (numbers, `Bool`, `String`, `Data`, `Date`, `URL`, arrays and `[String: Any]` of
  /// those); `nil` removes the key.
  public func set(_ value: Any?, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in try shared.set(value, forKey: defaultName) }
  }
  /// Sets an integer.
  public func set(_ value: Int, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in try shared.set(value, forKey: defaultName) }
  }
  /// Sets a double.
  public func set(_ value: Double, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in try shared.set(value, forKey: defaultName) }
  }
  /// Sets a float (stored as a double, as Apple's defaults store it).
  public func set(_ value: Float, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in
      try shared.set(Double(value), forKey: defaultName)
    }
  }
  /// Sets a Boolean.
  public func set(_ value: Bool, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in try shared.set(value, forKey: defaultName) }
  }
  /// Sets a URL (stored as its absolute string); `nil` removes the key.
  public func set(_ url: URL?, forKey defaultName: String) {
    surfacing("set", key: defaultName) { () throws(SharedDefaultsError) in try shared.set(url, forKey: defaultName) }
  }
  /// Removes the key (getters then return the registered default, if any).
  public func removeObject(forKey defaultName: String) {
    surfacing("removeObject", key: defaultName) { () throws(SharedDefaultsError) in
      try shared.removeObject(forKey: defaultName)
    }
  }
  /// Values the getters return for keys that are not set; kept in this process only, as Apple's are.
  public func register(defaults registrationDictionary: [String: Any]) {
    surfacing("register(defaults:)", key: nil) { () throws(SharedDefaultsError) in
      try shared.register(defaults: registrationDictionary)
    }
  }
  /// Makes every committed write survive power loss and rewrites the suite's plist; `false` when that failed
  /// (the error is surfaced as the type's discussion says).
  @discardableResult
  public func synchronize() -> Bool {
    surfacing("synchronize", key: nil) { () throws(SharedDefaultsError) in try shared.synchronize() }
  }

  /// Apple's `persistentDomain(forName:)`: the values of suite `domainName` of this container, or nil when that
  /// suite does not exist.
  public func persistentDomain(forName domainName: String) -> [String: Any]? {
    shared.persistentDomain(forName: domainName)
  }

  /// Apple's `setPersistentDomain(_:forName:)`: one commit, so readers see the old contents or the new.
  public func setPersistentDomain(_ domain: [String: Any], forName domainName: String) {
    surfacing("setPersistentDomain", key: nil) { () throws(SharedDefaultsError) in
      try shared.setPersistentDomain(domain, forName: domainName)
    }
  }

  /// Apple's `removePersistentDomain(forName:)`: every key of that suite removed, in one commit.
  public func removePersistentDomain(forName domainName: String) {
    surfacing("removePersistentDomain", key: nil) { () throws(SharedDefaultsError) in
      try shared.removePersistentDomain(forName: domainName)
    }
  }

  // MARK: Getters

  /// The value in its Foundation form (`Int`, `Double`, `Bool`, `String`, `Data`, `Date`, `[Any]`,
  /// `[String: Any]`), or the registered default, or `nil`.
  public func object(forKey defaultName: String) -> Any? { shared.object(forKey: defaultName) }
  /// The string (numbers convert to text), or `nil`.
  public func string(forKey defaultName: String) -> String? { shared.string(forKey: defaultName) }
  /// The integer, or 0 when not set or not convertible.
  public func integer(forKey defaultName: String) -> Int { shared.integer(forKey: defaultName) }
  /// The double, or 0 when not set or not convertible.
  public func double(forKey defaultName: String) -> Double { shared.double(forKey: defaultName) }
  /// The float, or 0 when not set or not convertible.
  public func float(forKey defaultName: String) -> Float { Float(shared.double(forKey: defaultName)) }
  /// The Boolean, or `false` when not set or not convertible.
  public func bool(forKey defaultName: String) -> Bool { shared.bool(forKey: defaultName) }
  /// The data, or `nil`.
  public func data(forKey defaultName: String) -> Data? { shared.data(forKey: defaultName) }
  /// The URL, or `nil`.
  public func url(forKey defaultName: String) -> URL? { shared.url(forKey: defaultName) }
  /// The array, or `nil`.
  public func array(forKey defaultName: String) -> [Any]? { shared.array(forKey: defaultName) }
  /// The array when every element is a string, or `nil`.
  public func stringArray(forKey defaultName: String) -> [String]? { shared.stringArray(forKey: defaultName) }
  /// The dictionary, or `nil`.
  public func dictionary(forKey defaultName: String) -> [String: Any]? { shared.dictionary(forKey: defaultName) }
  /// Every key: the suite's values over the registered defaults.
  public func dictionaryRepresentation() -> [String: Any] { shared.dictionaryRepresentation() }
}
