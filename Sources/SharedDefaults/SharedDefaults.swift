import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import SystemLayer

/// `UserDefaults(suiteName:)` for a group container: one suite of keys and property-list values that every process
/// of the group reads and writes at once, with no lost update.
///
/// ```swift
/// let defaults = try SharedDefaults(suiteName: "group.com.example.timer", container: container)
/// try defaults.set(120, forKey: "countdown")
/// let left = defaults.integer(forKey: "countdown")
/// try defaults.update("countdown") { old in .integer(.init((old?.intValue ?? 0) - 1)) }   // atomic, cross-process
/// for await change in defaults.changes(forKeys: ["countdown"]) { … }                 // other processes' writes too
/// ```
///
/// ## Behavior
/// - **Visibility.** A setter returns once its write is committed: every process reads it from then on.
/// - **Reads are cheap.** When nothing changed since this process last looked, a read costs two atomic loads of a
///   shared mapping and a dictionary lookup: no system call.
/// - **No lost update.** Writers serialize on the suite's lock, a word of shared memory (compare-and-swap, `futex`
///   to wait; a writer killed while holding it is detected and its lock taken over); `update(_:_:)` reads,
///   transforms and writes under it.
/// - **Durability.** A committed write survives `kill -9` of any process. ``synchronize()`` also makes it survive
///   power loss, and leaves `Library/Preferences/<suite>.plist` current (a binary plist any tool reads).
/// - **Change streams** (``changes(forKeys:)``, ``observe(_:handler:)``): one ``DefaultsChange`` per changed key, in
///   commit order, for writes of this process and of others (woken by the suite's change signal, a `futex` word in
///   the mapped header: writes through a mapping make no inotify event), and for outside edits of the plist file
///   (seen through inotify, diffed). They start with the next change; a stream ends when its task is cancelled.
/// - **Errors.** Setters throw: a value of an unsupported type, a full disk, a key over 1 MiB. Corrupt files are
///   moved aside with a logged error and the suite recovers its last good state; getters never throw.
public final class SharedDefaults: Sendable {
  /// The suite, which names the files in `Library/Preferences`.
  public let suiteName: String
  /// The group container whose `Library/Preferences` holds the suite.
  public let container: GroupContainer
  let store: DefaultsStore

  /// The limits a suite's snapshot and its plist are written and read with (a suite past them refuses sets with
  /// ``SharedDefaultsError/suiteTooLarge(_:_:)``); for tools that read the plist themselves.
  public static let suiteLimits = DefaultsStore.snapshotLimits

  /// The longest suite name, in bytes (the file names add a suffix to it).
  public static let maxSuiteNameBytes = 200

  /// Opens the suite `suiteName` (default: the container's identifier) of `container`.
  public init(suiteName: String? = nil, container: GroupContainer) throws(SharedDefaultsError) {
    let name = suiteName ?? container.identifier
    try Self.validate(suiteName: name)
    self.suiteName = name
    self.container = container
    store = try DefaultsStore.open(suite: name, container: container)
  }

  /// Opens the suite `suiteName` (`nil`: the container's identifier) of `container` only if it exists — it was
  /// written before, or its plist was put in `Library/Preferences` — and returns `nil` otherwise, creating
  /// nothing. For tools that only read (a misspelled suite must not appear as a new, empty one).
  /// - Throws: an invalid suite name, or a suite file that cannot be read.
  public init?(existingSuiteName suiteName: String?, container: GroupContainer) throws(SharedDefaultsError) {
    let name = suiteName ?? container.identifier
    try Self.validate(suiteName: name)
    guard let store = try DefaultsStore.openExisting(suite: name, container: container) else { return nil }
    self.suiteName = name
    self.container = container
    self.store = store
  }

  /// Edits of the suite's plist by another tool that were kept aside instead of applied, as paths
  /// (`<suite>.plist.unapplied-…`, oldest first): each held a value the plist showed before, so the tool may have
  /// read an older export, and applying it could have undone newer writes. Look at them, re-apply what is wanted
  /// (`groupctl defaults write`, or edit the current plist), then delete them.
  public var unappliedOutsideEdits: [String] { store.unappliedEdits() }

  /// Suite names follow the container identifier rule: `A-Z a-z 0-9 . -`, starting with a letter or digit.
  public static func validate(suiteName: String) throws(SharedDefaultsError) {
    do { try GroupContainer.validate(identifier: suiteName) } catch {
      if error.code == .invalidIdentifier, let rule = error.reason { throw .invalidSuiteName(suiteName, rule) }
      throw .container(error)
    }
    guard suiteName.utf8.count <= maxSuiteNameBytes else {
      throw .invalidSuiteName(String(suiteName.prefix(40)) + "…", "it is longer than \(maxSuiteNameBytes) bytes")
    }
  }

  /// glibc's getpid is a system call: read it once (the suite is not used across fork).
  private let pid = CurrentProcess.id

  // MARK: Writing

  /// Sets `value` (a property-list type: numbers, `Bool`, `String`, `Data`, `Date`, `URL`, arrays and
  /// `[String: Any]` of those); `nil` removes the key. Apple's `set(_:forKey:)`.
  public func set(_ value: Any?, forKey key: String) throws(SharedDefaultsError) {
    guard let value else { return try removeObject(forKey: key) }
    try set(value: try PropertyListValue(foundation: value), forKey: key)
  }

  /// Stores an integer; every process reads it once this returns.
  public func set(_ value: Int, forKey key: String) throws(SharedDefaultsError) {
    try set(value: value.propertyListValue, forKey: key)
  }

  /// Stores a floating-point number; every process reads it once this returns.
  public func set(_ value: Double, forKey key: String) throws(SharedDefaultsError) {
    try set(value: value.propertyListValue, forKey: key)
  }

  /// Stores a `Float` (as a real, as Apple's defaults do: `float(forKey:)` gives it back exactly).
  public func set(_ value: Float, forKey key: String) throws(SharedDefaultsError) {
    try set(value: .real(Double(value)), forKey: key)
  }

  /// Stores a Boolean; every process reads it once this returns.
  public func set(_ value: Bool, forKey key: String) throws(SharedDefaultsError) {
    try set(value: value.propertyListValue, forKey: key)
  }

  /// Stores a string; every process reads it once this returns.
  public func set(_ value: String, forKey key: String) throws(SharedDefaultsError) {
    try set(value: value.propertyListValue, forKey: key)
  }

  /// Stores a URL as its absolute string (`nil` removes the key), as `UserDefaults.set(_:forKey:)` does.
  public func set(_ url: URL?, forKey key: String) throws(SharedDefaultsError) {
    guard let url else { return try removeObject(forKey: key) }
    try set(value: url.propertyListValue, forKey: key)
  }

  /// Sets a `PropertyListValue` directly.
  public func set(value: PropertyListValue, forKey key: String) throws(SharedDefaultsError) {
    try store.write([JournalFormat.Record(key: key, operation: .set(value), pid: pid)])
  }

  /// Sets several keys in one commit: other processes see all of them or none.
  public func set(values: [String: PropertyListValue]) throws(SharedDefaultsError) {
    try store.write(values.map { JournalFormat.Record(key: $0.key, operation: .set($0.value), pid: pid) })
  }

  /// Sets `values` and removes `keys` in one commit: other processes see all of it or none (a rename is
  /// `set(values: [new: value], removing: [old])`).
  public func set(values: [String: PropertyListValue], removing keys: [String]) throws(SharedDefaultsError) {
    try store.write(
      values.map { JournalFormat.Record(key: $0.key, operation: .set($0.value), pid: pid) }
        + keys.filter { values[$0] == nil }.map { JournalFormat.Record(key: $0, operation: .remove, pid: pid) })
  }

  // MARK: Persistent domains (Apple's names: a domain is a suite of this container)

  /// Apple's `persistentDomain(forName:)`: the values of suite `domainName` in this suite's container (not
  /// registered defaults), as Foundation types; nil when that suite does not exist (nothing is created).
  public func persistentDomain(forName domainName: String) -> [String: Any]? {
    propertyListDomain(forName: domainName)?.mapValues(\.foundationValue)
  }

  /// `persistentDomain(forName:)` as property-list values.
  public func propertyListDomain(forName domainName: String) -> [String: PropertyListValue]? {
    if domainName == suiteName { return propertyListRepresentation() }
    guard let other = try? SharedDefaults(existingSuiteName: domainName, container: container) else { return nil }
    return other.propertyListRepresentation()
  }

  /// Apple's `setPersistentDomain(_:forName:)`: suite `domainName` (made if missing) holds exactly `domain`
  /// afterwards. One commit: a reader in any process sees the old contents or the new, never a mix.
  public func setPersistentDomain(_ domain: [String: Any], forName domainName: String) throws(SharedDefaultsError) {
    var values: [String: PropertyListValue] = [:]
    for (key, value) in domain { values[key] = try PropertyListValue(foundation: value) }
    try setPersistentDomain(values: values, forName: domainName)
  }

  /// `setPersistentDomain(_:forName:)` with property-list values.
  public func setPersistentDomain(values: [String: PropertyListValue], forName domainName: String)
    throws(SharedDefaultsError)
  {
    let target = domainName == suiteName ? self : try SharedDefaults(suiteName: domainName, container: container)
    try target.replaceContents(with: values)
  }

  /// Apple's `removePersistentDomain(forName:)`: every key of suite `domainName` removed, in one commit. A suite
  /// that does not exist stays so.
  public func removePersistentDomain(forName domainName: String) throws(SharedDefaultsError) {
    let target =
      domainName == suiteName ? self : try SharedDefaults(existingSuiteName: domainName, container: container)
    try target?.replaceContents(with: [:])
  }

  /// The suite's contents replaced by `values` in one commit (under the suite's lock, from its current keys).
  private func replaceContents(with values: [String: PropertyListValue]) throws(SharedDefaultsError) {
    let pid = self.pid
    do {
      _ = try store.transaction { state, _ in
        let current = try state.dictionary()
        var records: [JournalFormat.Record] = []
        for (key, value) in values where current[key] != value {
          records.append(JournalFormat.Record(key: key, operation: .set(value), pid: pid))
        }
        for key in current.keys where values[key] == nil {
          records.append(JournalFormat.Record(key: key, operation: .remove, pid: pid))
        }
        return (records, 0)
      }
    } catch let error as SharedDefaultsError {
      throw error
    } catch {
      throw .unsupportedValue("\(error)")
    }
  }

  /// Apple's `removeObject(forKey:)`.
  public func removeObject(forKey key: String) throws(SharedDefaultsError) {
    try store.write([JournalFormat.Record(key: key, operation: .remove, pid: pid)])
  }

  /// Atomic read-modify-write across processes: `transform` gets the current value (or the registered default)
  /// and returns the new one (`nil` removes the key); no other process writes the suite in between.
  /// Returns the new value. `transform` runs with the suite locked: keep it short and do not touch the suite in it.
  @discardableResult
  public func update(
    _ key: String, _ transform: (PropertyListValue?) throws -> PropertyListValue?
  ) throws -> PropertyListValue? {
    try store.update(key, pid: pid, transform)
  }

  /// A read-modify-write across processes that may write nothing: `body` reads the suite's values (not the
  /// registered defaults) through `value` under the suite's lock and returns the keys to set and to remove, as one
  /// commit. Nothing to set or remove makes no commit and no change event, where ``update(_:_:)`` always commits:
  /// for modules that keep records of their own in a private suite (LiveActivities ignores an update of an ended
  /// activity). `body` runs with the suite locked: keep it short and do not touch the suite in it. Pairs to set (a
  /// key set twice keeps its last value); one key: ``transaction(forKey:_:)``.
  package func transaction<T: Sendable>(
    _ body: (_ value: (String) -> PropertyListValue?) throws -> (
      set: [(key: String, value: PropertyListValue)], remove: [String], result: T
    )
  ) throws -> T {
    let pid = self.pid
    return try store.transaction { values, _ in
      let (set, remove, result) = try body { values[$0] }
      // One array (a map, a filter and a concatenation were three allocations of a one-key commit).
      var records: [JournalFormat.Record] = []
      records.reserveCapacity(set.count + remove.count)
      for (key, value) in set { records.append(JournalFormat.Record(key: key, operation: .set(value), pid: pid)) }
      for key in remove where !set.contains(where: { $0.key == key }) {
        records.append(JournalFormat.Record(key: key, operation: .remove, pid: pid))
      }
      return (records, result)
    }
  }

  /// ``transaction(_:)`` of one key: `body` gets its value and returns the value to set (nil: nothing is written, no
  /// commit). No array of pairs to set is made (an allocation of every activity update).
  package func transaction<T: Sendable>(
    forKey key: String, _ body: (_ value: PropertyListValue?) throws -> (set: PropertyListValue?, result: T)
  ) throws -> T {
    let pid = self.pid
    return try store.transaction { values, _ in
      let (set, result) = try body(values[key])
      guard let set else { return ([], result) }
      return ([JournalFormat.Record(key: key, operation: .set(set), pid: pid)], result)
    }
  }

  // MARK: Reading (Apple's names and fallbacks)

  /// The value (or the registered default) as Foundation types: numbers, `String`, `Data`, `Date`, arrays and
  /// dictionaries of them; nil when unset.
  public func object(forKey key: String) -> Any? { store.value(forKey: key)?.foundationValue }
  /// The stored `PropertyListValue`, or the registered default.
  public func value(forKey key: String) -> PropertyListValue? { store.value(forKey: key) }
  /// The value as a string (a number as its decimal text, as `UserDefaults` does), or nil.
  public func string(forKey key: String) -> String? {
    store.value(forKey: key).flatMap(String.init(propertyListValue:))
  }
  /// The value as an integer (numbers, Booleans and numeric strings convert), else 0.
  public func integer(forKey key: String) -> Int { store.value(forKey: key).flatMap(Int.init(propertyListValue:)) ?? 0 }
  /// The value as a double (numbers, Booleans and numeric strings convert), else 0.
  public func double(forKey key: String) -> Double {
    store.value(forKey: key).flatMap(Double.init(propertyListValue:)) ?? 0
  }
  /// The value as a float (numbers, Booleans and numeric strings convert, as for `double(forKey:)`), else 0.
  public func float(forKey key: String) -> Float { Float(double(forKey: key)) }
  /// The value as a Boolean (non-zero numbers and "YES", "true" or "1" in any case are true), else false.
  public func bool(forKey key: String) -> Bool {
    store.value(forKey: key).flatMap(Bool.init(propertyListValue:)) ?? false
  }
  /// The data value, or nil.
  public func data(forKey key: String) -> Data? { store.value(forKey: key).flatMap(Data.init(propertyListValue:)) }
  /// The value as a URL: a string starting with `/` or `~` as a file URL, any other as a URL string; else nil.
  public func url(forKey key: String) -> URL? {
    guard let s = string(forKey: key) else { return nil }
    return s.hasPrefix("/") || s.hasPrefix("~")
      ? URL(fileURLWithPath: (s as NSString).expandingTildeInPath) : URL(string: s)
  }
  /// The date value, or nil.
  public func date(forKey key: String) -> Date? { store.value(forKey: key).flatMap(Date.init(propertyListValue:)) }
  /// The array value as Foundation types, or nil.
  public func array(forKey key: String) -> [Any]? { store.value(forKey: key)?.arrayValue?.map(\.foundationValue) }
  /// The array value when every element converts to a string (numbers do), else nil.
  public func stringArray(forKey key: String) -> [String]? {
    store.value(forKey: key).flatMap([String].init(propertyListValue:))
  }
  /// The dictionary value as Foundation types, or nil.
  public func dictionary(forKey key: String) -> [String: Any]? {
    store.value(forKey: key)?.dictionaryValue?.mapValues(\.foundationValue)
  }

  /// Values returned when a key is not set; kept in this process only, as Apple's are.
  public func register(defaults: [String: Any]) throws(SharedDefaultsError) {
    var converted: [String: PropertyListValue] = [:]
    for (key, value) in defaults { converted[key] = try PropertyListValue(foundation: value) }
    store.register(converted)
  }

  /// Every key: the suite's values over the registered defaults.
  public func dictionaryRepresentation() -> [String: Any] {
    store.snapshot(includingRegistered: true).mapValues(\.foundationValue)
  }

  /// The suite's own values, as property-list values.
  public func propertyListRepresentation() -> [String: PropertyListValue] {
    store.snapshot(includingRegistered: false)
  }

  /// Writes the snapshot and makes every committed write survive power loss. First waits (about 2.5 s at most) for
  /// the edits another tool wrote into exports this process replaced meanwhile: only this process can still reach
  /// them, so call it before exiting when the plist may be edited by other tools.
  public func synchronize() throws(SharedDefaultsError) { try store.synchronize() }

  /// Waits until the compaction this process runs in the background is done, and the edits another tool wrote
  /// into exports this process replaced are committed (at most about 2.5 s): a process that compacted while a
  /// tool rewrote the plist in place holds that edit alone. For processes that exit right after their writes
  /// without the durable compaction of ``synchronize()`` (groupctl's stress writers, tests).
  package func waitForBackgroundWork() { store.waitForBackgroundWork() }

  // MARK: Typed keys and Codable

  /// The value of a typed key, or its default when the key is unset or holds another type. Never throws.
  public subscript<Value>(key: DefaultsKey<Value>) -> Value {
    store.value(forKey: key.name).flatMap(Value.init(propertyListValue:)) ?? key.defaultValue
  }

  /// Stores the value of a typed key; every process reads it once this returns.
  public func set<Value>(_ value: Value, for key: DefaultsKey<Value>) throws(SharedDefaultsError) {
    try set(value: value.propertyListValue, forKey: key.name)
  }

  /// Atomic read-modify-write of a typed key (the current value, or its default, in; the new value out).
  @discardableResult
  public func update<Value>(_ key: DefaultsKey<Value>, _ transform: (Value) throws -> Value) throws -> Value {
    var result = key.defaultValue
    _ = try store.update(key.name, pid: pid) { old in
      result = try transform(old.flatMap(Value.init(propertyListValue:)) ?? key.defaultValue)
      return result.propertyListValue
    }
    return result
  }

  /// Stores a `Codable` value (as JSON in a data value).
  public func set<T: Encodable>(encoded value: T, forKey key: String) throws(SharedDefaultsError) {
    let data: Data
    do { data = try JSONEncoder().encode(value) } catch { throw .coding(key: key, message: "\(error)") }
    try set(value: .data(Array(data)), forKey: key)
  }

  /// Reads a `Codable` value stored with ``set(encoded:forKey:)``; `nil` when the key is not set.
  public func decoded<T: Decodable>(_ type: T.Type, forKey key: String) throws(SharedDefaultsError) -> T? {
    guard let value = store.value(forKey: key) else { return nil }
    guard case .data(let bytes) = value else { throw .coding(key: key, message: "the stored value is not data") }
    do { return try UntrustedJSON.decode(T.self, from: bytes) } catch {
      throw .coding(key: key, message: "\(error)")
    }
  }

  // MARK: Observing

  /// Calls `handler` (on a private serial queue) for each change of `keys` (all keys when `nil`).
  public func observe(
    _ keys: Set<String>? = nil, handler: @escaping @Sendable (DefaultsChange) -> Void
  ) -> DefaultsObservation {
    let id = store.addObserver(keys: keys, handler)
    return DefaultsObservation { [store] in store.removeObserver(id) }
  }

  /// The changes of `keys` (all keys when `nil`) from now on, from every process.
  public func changes(forKeys keys: Set<String>? = nil) -> AsyncStream<DefaultsChange> {
    AsyncStream { continuation in
      let id = store.addObserver(keys: keys) { continuation.yield($0) }
      continuation.onTermination = { [store] _ in store.removeObserver(id) }
    }
  }
}
