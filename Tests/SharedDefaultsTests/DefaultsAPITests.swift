import Foundation
import PropertyList
import Synchronization
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import SharedDefaults

@Suite(.runSlot(.minutes(3))) struct DefaultsAPITests {
  @Test func storesEveryPropertyListTypeAndReadsItBackWithApplesAccessors() throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(container: try root.container())
    let date = Date(timeIntervalSinceReferenceDate: 12345.5)
    try defaults.set(42, forKey: "int")
    try defaults.set(2.5, forKey: "double")
    try defaults.set(true, forKey: "bool")
    try defaults.set("héllo", forKey: "string")
    try defaults.set(Data([0, 1, 255]), forKey: "data")
    try defaults.set(date, forKey: "date")
    try defaults.set(URL(string: "https://example.com/a?b=c")!, forKey: "url")
    try defaults.set(["a", "b"], forKey: "array")
    try defaults.set(["k": 1, "nested": ["x": [true]]] as [String: Any], forKey: "dict")
    try defaults.set(UInt64.max, forKey: "huge")
    #expect(defaults.integer(forKey: "int") == 42)
    #expect(defaults.double(forKey: "double") == 2.5)
    #expect(defaults.bool(forKey: "bool"))
    #expect(defaults.string(forKey: "string") == "héllo")
    #expect(defaults.data(forKey: "data") == Data([0, 1, 255]))
    #expect(defaults.date(forKey: "date") == date)
    #expect(defaults.url(forKey: "url")?.absoluteString == "https://example.com/a?b=c")
    #expect(defaults.stringArray(forKey: "array") == ["a", "b"])
    #expect((defaults.dictionary(forKey: "dict")?["k"] as? Int) == 1)
    #expect(defaults.value(forKey: "huge")?.uint64Value == UInt64.max)
    // Apple's fallbacks for missing keys and type mismatches.
    #expect(defaults.integer(forKey: "missing") == 0 && !defaults.bool(forKey: "missing"))
    #expect(defaults.string(forKey: "data") == nil)
    try defaults.removeObject(forKey: "int")
    #expect(defaults.object(forKey: "int") == nil)
    try defaults.set(nil, forKey: "string")
    #expect(defaults.object(forKey: "string") == nil)
  }

  @Test func registeredDefaultsFillInButAreNotStored() throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(suiteName: "registered", container: try root.container())
    try defaults.register(defaults: ["countdown": 60, "name": "timer"])
    #expect(defaults.integer(forKey: "countdown") == 60)
    try defaults.set(30, forKey: "countdown")
    #expect(defaults.integer(forKey: "countdown") == 30)
    #expect(defaults.dictionaryRepresentation()["name"] as? String == "timer")
    #expect(defaults.propertyListRepresentation().keys.sorted() == ["countdown"])
  }

  @Test func typedKeysCodableAndUpdate() throws {
    struct History: Codable, Equatable { var runs: [Int] }
    let root = try TestRoot()
    let defaults = try SharedDefaults(container: try root.container())
    let countdown = DefaultsKey("countdown", default: 10)
    #expect(defaults[countdown] == 10)
    try defaults.set(7, for: countdown)
    #expect(defaults[countdown] == 7)
    #expect(try defaults.update(countdown) { $0 - 1 } == 6)
    try defaults.set(encoded: History(runs: [1, 2]), forKey: "history")
    #expect(try defaults.decoded(History.self, forKey: "history") == History(runs: [1, 2]))
    try defaults.set("not data", forKey: "bad")
    #expect(throws: SharedDefaultsError.self) { try defaults.decoded(History.self, forKey: "bad") }
    // Data another member stored with a number JSONDecoder would stop the process on (its Decimal parser traps once
    // the exponent leaves Int8): an error, not a crash (UntrustedJSON).
    let trap = #"{"runs":[9007199254740993"# + String(repeating: "0", count: 200) + "e-200]}"
    try defaults.set(Data(trap.utf8), forKey: "hostile")
    #expect(throws: SharedDefaultsError.self) { try defaults.decoded(History.self, forKey: "hostile") }
    try defaults.set(Data(#"{"runs":[9.1e15]}"#.utf8), forKey: "large")  // a short one is still JSONDecoder's
    #expect(try defaults.decoded(History.self, forKey: "large") == History(runs: [9_100_000_000_000_000]))
  }

  @Test(arguments: ["", "a.b.c", "a/b/../c", "ключ 🔑", String(repeating: "long", count: 25_000), "\0nul"])
  func unusualKeysWork(key: String) throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(container: try root.container())
    try defaults.set(1, forKey: key)
    try defaults.synchronize()
    #expect(defaults.integer(forKey: key) == 1)
    // A fresh reader sees it in the snapshot too.
    let bytes = try Array(
      Data(
        contentsOf: root.url.appendingPathComponent(
          "group.com.example.tests/Library/Preferences/group.com.example.tests.plist")))
    #expect(try PropertyListValue(bytes: bytes).dictionaryValue?[key] == .integer(1))
  }

  @Test func oversizedKeysAndUnsupportedValuesGiveClearErrors() throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(container: try root.container())
    let error = #expect(throws: SharedDefaultsError.self) {
      try defaults.set(1, forKey: String(repeating: "k", count: 2 << 20))
    }
    #expect(error?.description.contains("longer than") == true)
    #expect(throws: SharedDefaultsError.self) { try defaults.set(NSObject(), forKey: "object") }
    #expect(throws: SharedDefaultsError.self) {
      try SharedDefaults(suiteName: "../evil", container: try root.container())
    }
    #expect(throws: SharedDefaultsError.self) { try SharedDefaults(suiteName: "", container: try root.container()) }
  }

  @Test func snapshotIsABinaryPlistPythonReads() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: "py", container: container)
    try defaults.set(["a": 1, "b": ["x", "y"]] as [String: Any], forKey: "dict")
    try defaults.set(UInt64.max, forKey: "huge")
    try defaults.synchronize()
    let path = container.preferencesURL.appendingPathComponent("py.plist").path
    let python = try await runToEnd(
      "/usr/bin/env",
      [
        "python3", "-c",
        "import plistlib,sys; d=plistlib.load(open(sys.argv[1],'rb')); print(d['dict']['a'], d['dict']['b'], d['huge'])",
        path,
      ])
    #expect(python.output == "1 ['x', 'y'] 18446744073709551615\n", "\(python.errors)")
  }

  @Test func changeStreamsDeliverLocalWritesInOrder() async throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(container: try root.container())
    try defaults.set(1, forKey: "n")
    let stream = defaults.changes(forKeys: ["n"])
    try defaults.set(2, forKey: "n")
    try defaults.set(5, forKey: "other")
    try defaults.removeObject(forKey: "n")
    var seen: [DefaultsChange] = []
    for await change in stream {
      seen.append(change)
      if seen.count == 2 { break }
    }
    #expect(seen.map(\.oldValue) == [.integer(1), .integer(2)])
    #expect(seen.map(\.newValue) == [.integer(2), nil])
    #expect(seen.allSatisfy { $0.originProcessID == getpid() })
  }

  @Test func compactionKeepsEverythingAndEmptiesTheJournal() throws {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: "compact", container: container)
    // A suite of 1 MB (10 distinct values of 100 KB) rewritten 30 times: 30 MB through the journal.
    let blobs = (0..<10).map { Data(repeating: UInt8($0), count: 100_000) }
    for _ in 0..<30 { for i in 0..<10 { try defaults.set(blobs[i], forKey: "blob\(i)") } }
    defaults.waitForBackgroundWork()
    // Compactions run in the background once the journal holds twice what one reads past the snapshot (2 MB here)
    // and keep the journal; the one that installs past 8 MiB also empties it — or, when writes outpace them (a
    // lone writer of 100 KB values on a loaded machine), a set past four times that empties it with the lock. So
    // the journal was emptied (a new generation: header word 1 of the lock file), the committed length (word 2)
    // stays under 32 MiB and one set, and the file itself, never shrunk (others map it), within its doubling.
    let header = try Data(contentsOf: container.preferencesURL.appendingPathComponent("compact.lock"))
    func word(_ n: Int) -> Int {
      header[(8 * n)..<(8 * n + 8)].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
    }
    #expect(word(1) > 1, "the journal was never emptied")
    let committed = word(2)
    #expect(committed < 32 << 20 + 200_000)
    #expect(committed - (word(18) & 0xFFFF_FFFF) < 32 << 20 + 200_000)
    let journal = container.preferencesURL.appendingPathComponent("compact.journal").path
    let size = try FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int ?? .max
    #expect(size <= 64 << 20)
    #expect((0..<10).allSatisfy { defaults.data(forKey: "blob\($0)") == blobs[$0] })
  }
}
