import Foundation
import PropertyList
import SharedDefaults
import TestSupport
import Testing

/// The parts of `UserDefaults` that #9 found missing or wrong: NSNumber kinds, `float`, persistent domains.
///
/// Mutants this suite catches: `Any` → value trying `as Bool` first (0.1.0: `NSNumber(value: 1)` stored `true`):
/// `numbersKeepTheirKind`; `setPersistentDomain` as two commits (remove, then set): a reader in another process
/// saw a mix or an empty suite (`setPersistentDomainIsOneCommitForReadersInAnotherProcess`).
@Suite(.runSlot(.minutes(3))) struct DefaultsSurfaceTests {
  @Test func numbersKeepTheirKind() throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(suiteName: "numbers", container: try root.container())
    let json = try JSONSerialization.jsonObject(with: Data("[1, true, 1.5, 0, false]".utf8)) as! [Any]
    let cases: [(Any, PropertyListValue)] = [
      (NSNumber(value: 1), .integer(1)), (NSNumber(value: 0), .integer(0)), (NSNumber(value: Int8(1)), .integer(1)),
      (NSNumber(value: UInt64.max), .integer(PropertyListInteger(UInt64.max))), (NSNumber(value: true), .bool(true)),
      (NSNumber(value: false), .bool(false)), (true as NSNumber, .bool(true)), (NSNumber(value: 1.5), .real(1.5)),
      (NSNumber(value: Float(2)), .real(2)), (1, .integer(1)), (Int8(1), .integer(1)), (UInt64(7), .integer(7)),
      (true, .bool(true)), (1.5, .real(1.5)), (Float(0.5), .real(0.5)),
      (json, .array([.integer(1), .bool(true), .real(1.5), .integer(0), .bool(false)])),
      (
        ["n": NSNumber(value: 1), "b": NSNumber(value: true)] as [String: Any],
        .dictionary(["n": .integer(1), "b": .bool(true)])
      ),
    ]
    for (index, (value, expected)) in cases.enumerated() {
      try defaults.set(value, forKey: "k\(index)")
      #expect(defaults.value(forKey: "k\(index)") == expected, "case \(index): \(value)")
    }
  }

  @Test func floatsFollowTheDoubleRules() throws {
    let root = try TestRoot()
    let defaults = try SharedDefaults(suiteName: "floats", container: try root.container())
    try defaults.set(Float(0.1), forKey: "f")
    #expect(defaults.float(forKey: "f") == Float(0.1))
    try defaults.set("2.5", forKey: "s")
    try defaults.set(true, forKey: "b")
    #expect(
      defaults.float(forKey: "s") == 2.5 && defaults.float(forKey: "b") == 1 && defaults.float(forKey: "none") == 0)
    let ported = try #require(SharedUserDefaults(suiteName: "floats", container: try root.container()))
    ported.set(Float(3.25), forKey: "g")
    #expect(ported.float(forKey: "g") == 3.25)
  }

  @Test func persistentDomainsReadSetAndRemoveWholeSuites() throws {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: "main", container: container)
    #expect(defaults.persistentDomain(forName: "other") == nil)
    #expect(!FileManager.default.fileExists(atPath: container.preferencesURL.appendingPathComponent("other.lock").path))
    try defaults.setPersistentDomain(["x": 1, "y": "two"], forName: "other")
    #expect(defaults.propertyListDomain(forName: "other") == ["x": .integer(1), "y": .string("two")])
    try defaults.setPersistentDomain(["y": "three"], forName: "other")
    #expect(defaults.propertyListDomain(forName: "other") == ["y": .string("three")])
    try defaults.removePersistentDomain(forName: "other")
    #expect(defaults.propertyListDomain(forName: "other") == [:])
    try defaults.removePersistentDomain(forName: "never")
    #expect(defaults.persistentDomain(forName: "never") == nil)
  }

  @Test func setPersistentDomainIsOneCommitForReadersInAnotherProcess() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let defaults = try SharedDefaults(suiteName: "domains", container: container)
    // A: 200 keys of its own and 50 shared; B: 100 of its own and the 50 shared. Every value names its domain.
    let shared = (0..<50).map { "s\($0)" }
    let a = Dictionary(
      uniqueKeysWithValues: ((0..<200).map { "a\($0)" } + shared).map { ($0, PropertyListValue.string("A")) })
    let b = Dictionary(
      uniqueKeysWithValues: ((0..<100).map { "b\($0)" } + shared).map { ($0, PropertyListValue.string("B")) })
    try defaults.setPersistentDomain(values: a, forName: "domains")
    let reader = try Child(.domainReader(suite: "domains"), root: root.path, group: container.identifier)
    #expect(await reader.line { $0 == "ready" } != nil)
    for round in 0..<300 { try defaults.setPersistentDomain(values: round % 2 == 0 ? b : a, forName: "domains") }
    #expect(FileManager.default.createFile(atPath: root.path + "/stop", contents: nil))
    #expect(await reader.exit() == 0)
    let line = reader.output.last ?? ""
    #expect(line.hasSuffix(" mixed=0") && line.contains(" empty=0"), "\(line)")
    withExtendedLifetime(root) {}
  }
}
