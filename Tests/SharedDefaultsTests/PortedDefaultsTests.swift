import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import SharedDefaults
import Synchronization
import TestSupport
import Testing

/// `SharedUserDefaults`, the non-throwing `UserDefaults`-shaped surface for ported iOS code, and the printed and
/// typed forms of `DefaultsChange` and `PropertyListValue`.
///
/// Mutants this suite catches (each tried): a failed set not kept in `lastError`; a failed set not handed to
/// `errorHandler`; `PropertyListValue.description` printing `integer(42)` for 42; the quoted string form not
/// escaping `"`; `DefaultsChange.value(as:)` (so `integerValue` …) reading `oldValue`.
@Suite(.runSlot(.minutes(3))) struct PortedDefaultsTests {
  struct NotAPropertyList {}
  /// What the error handler was given: (error description, key).
  final class Calls: Sendable {
    let list = Mutex<[(String, String?)]>([])
  }

  @Test func applesSettersAndGettersWorkWithoutTry() throws {
    let root = try TestRoot()
    let container = try root.container("group.com.example.ported")
    let defaults = try #require(SharedUserDefaults(suiteName: "group.com.example.ported", container: container))
    defaults.set(42, forKey: "int")
    defaults.set(2.5, forKey: "double")
    defaults.set(Float(1.5), forKey: "float")
    defaults.set(true, forKey: "bool")
    defaults.set("text", forKey: "string")
    defaults.set(Data([1, 2]), forKey: "data")
    defaults.set(URL(string: "https://example.com/x")!, forKey: "url")
    defaults.set(["a", "b"], forKey: "array")
    defaults.set(["k": 1] as [String: Any], forKey: "dict")
    defaults.register(defaults: ["registered": 7])
    #expect(defaults.integer(forKey: "int") == 42)
    #expect(defaults.double(forKey: "double") == 2.5)
    #expect(defaults.float(forKey: "float") == 1.5)
    #expect(defaults.bool(forKey: "bool"))
    #expect(defaults.string(forKey: "string") == "text")
    #expect(defaults.object(forKey: "string") as? String == "text")
    #expect(defaults.data(forKey: "data") == Data([1, 2]))
    #expect(defaults.url(forKey: "url")?.absoluteString == "https://example.com/x")
    #expect(defaults.array(forKey: "array") as? [String] == ["a", "b"])
    #expect(defaults.stringArray(forKey: "array") == ["a", "b"])
    #expect(defaults.dictionary(forKey: "dict")?["k"] as? Int == 1)
    #expect(defaults.integer(forKey: "registered") == 7)
    #expect(defaults.dictionaryRepresentation()["int"] as? Int == 42)
    defaults.removeObject(forKey: "int")
    #expect(defaults.object(forKey: "int") == nil)
    #expect(defaults.synchronize())
    #expect(defaults.lastError == nil)
    // The engine underneath sees the same suite (another SharedDefaults, as another process would open it).
    #expect(
      try SharedDefaults(suiteName: "group.com.example.ported", container: container).string(forKey: "string") == "text"
    )
  }

  @Test func aSuiteNameThatIsNotAGroupIdentifierGivesNil() {
    // None of these reaches the environment's container root: they fail before it is looked up.
    #expect(SharedUserDefaults(suiteName: nil) == nil)
    #expect(SharedUserDefaults(suiteName: "com.example.app") == nil)
    #expect(SharedUserDefaults(suiteName: "group.bad/../name") == nil)
  }

  @Test func aFailedSetIsLoggedKeptAndHandedToTheHandlerNotDropped() throws {
    let root = try TestRoot()
    let defaults = try #require(SharedUserDefaults(container: try root.container()))
    let seen = Calls()
    defaults.errorHandler = { error, key in seen.list.withLock { $0.append((error.description, key)) } }
    defaults.set("before", forKey: "k")

    defaults.set(NotAPropertyList(), forKey: "k")
    guard defaults.lastError?.code == .unsupportedValue, let what = defaults.lastError?.reason else {
      Issue.record("lastError is \(String(describing: defaults.lastError)), expected unsupportedValue")
      return
    }
    #expect(what.contains("NotAPropertyList"))
    #expect(defaults.string(forKey: "k") == "before")  // the failed set changed nothing

    let longKey = String(repeating: "k", count: (1 << 20) + 1)
    defaults.set(1, forKey: longKey)
    guard defaults.lastError?.code == .invalidKey else {
      Issue.record("lastError is \(String(describing: defaults.lastError)), expected invalidKey")
      return
    }
    let calls = seen.list.withLock { $0 }
    #expect(calls.count == 2)
    #expect(calls.first?.1 == "k")
    #expect(calls.first?.0.contains("NotAPropertyList") == true)
    #expect(calls.last?.1 == longKey)
    defaults.lastError = nil
    defaults.set(3, forKey: "k")
    #expect(defaults.lastError == nil)  // a success does not invent an error
    #expect(seen.list.withLock { $0.count } == 2)
  }

  @Test func propertyListValuesPrintAsPeopleReadThem() {
    let cases: [(PropertyListValue, String)] = [
      (42, "42"), (-7, "-7"), (1.5, "1.5"), (true, "true"), (false, "false"),
      ("text", "\"text\""), ("say \"hi\"\n", "\"say \\\"hi\\\"\\n\""),
      ([1, 2], "[1, 2]"), ([], "[]"), (["b": 2, "a": 1], "{a = 1; b = 2;}"), ([:], "{}"),
      (["two words": "x"], "{\"two words\" = \"x\";}"), (["a": [1, ["b": true]]], "{a = [1, {b = true;}];}"),
      (.data([0x00, 0xff, 0x10]), "<00ff10>"), (.uid(3), "UID(3)"),
      (
        .date(PropertyListDate(year: 2026, month: 11, day: 23, hour: 20, minute: 49, second: 5)!),
        "2026-11-23 20:49:05 +0000"
      ),
    ]
    for (value, printed) in cases {
      #expect(value.description == printed)
      #expect("\(value)" == printed)
    }
    let long = PropertyListValue.data(Array(repeating: 0xab, count: 40))
    #expect(long.description == "<" + String(repeating: "ab", count: 32) + "… (40 bytes)>")
  }

  @Test func changesPrintCompareAndReadTyped() {
    let change = DefaultsChange(key: "count", oldValue: 41, newValue: 42, originProcessID: 812)
    #expect("\(change)" == "count: 41 → 42 (pid 812)")
    #expect(change.integerValue == 42)
    #expect(change.value(as: Int.self) == 42)
    #expect(change.doubleValue == 42)
    #expect(change.stringValue == "42")  // converted as string(forKey:) converts
    #expect(!change.isRemoval)
    #expect(change == DefaultsChange(key: "count", oldValue: 41, newValue: 42, originProcessID: 812))
    #expect(change != DefaultsChange(key: "count", oldValue: 41, newValue: 43, originProcessID: 812))

    let removal = DefaultsChange(key: "title", oldValue: "Groceries", newValue: nil, originProcessID: nil)
    #expect(removal.description == "title: \"Groceries\" → (removed)")
    #expect(removal.isRemoval && removal.stringValue == nil && removal.integerValue == nil)
    let first = DefaultsChange(key: "on", oldValue: nil, newValue: true, originProcessID: 1)
    #expect(first.description == "on: (not set) → true (pid 1)")
    #expect(first.boolValue == true)
    #expect(first.value(as: Data.self) == nil)
  }

  @Test func aChangeFromTheStreamReadsTypedAndPrintsItsWriter() async throws {
    let root = try TestRoot()
    let defaults = try #require(SharedUserDefaults(container: try root.container()))
    let changes = defaults.shared.changes(forKeys: ["count"])
    defaults.set(42, forKey: "count")
    var iterator = changes.makeAsyncIterator()
    let change = try #require(await iterator.next())
    #expect(change.integerValue == 42)
    #expect(change.oldValue == nil)
    #expect(change.description == "count: (not set) → 42 (pid \(getpid()))")
  }
}
