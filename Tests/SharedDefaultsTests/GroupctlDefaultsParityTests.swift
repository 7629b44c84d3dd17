import Foundation
import PropertyList
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import SharedDefaults

/// `groupctl defaults` with macOS `defaults(1)` semantics: -array-add, -dict-add, typed -array/-dict items,
/// old-style plist values, domains, export, import, read-type, rename, find. Runs the real binary.
///
/// Mutants this suite catches (each made once, seen failing, restored):
/// - `-array-add` storing only the new items (no append): `arrayAddAppendsAndCreatesTheArray` fails.
/// - `-dict-add` replacing instead of merging: `dictAddMerges` fails.
/// - typed items stored as strings (`ValueSyntax.item` ignoring the flag): `typedArrayItemsAndDictValues` fails.
/// - a bare plist value stored as a string (`ValueSyntax.bare` not parsing): `oldStylePlistValues` fails.
/// - `import` without removing the keys the file lacks: `importReplacesTheSuite` fails.
/// - `rename` without removing the old key: `renameMovesTheValue` fails.
@Suite(.runSlot(.minutes(3))) struct GroupctlDefaultsParityTests {
  let group = "group.com.example.parity"

  /// `groupctl defaults <verb> <group> <rest…> --root <root>`, expected to succeed.
  @discardableResult
  func defaults(
    _ verb: String, _ rest: [String], root: TestRoot, sourceLocation: SourceLocation = #_sourceLocation
  ) async throws -> String {
    let run = try await groupctl(["defaults", verb, group] + rest + ["--root", root.path])
    #expect(run.status == 0, "\(verb) \(rest): \(run)", sourceLocation: sourceLocation)
    return run.out
  }

  /// The suite read back in this process: what another process of the group sees.
  func suite(_ name: String? = nil, root: TestRoot) throws -> [String: PropertyListValue] {
    try SharedDefaults(suiteName: name, container: try root.container(group)).propertyListRepresentation()
  }

  @Test func arrayAddAppendsAndCreatesTheArray() async throws {
    let root = try TestRoot()
    try await defaults("write", ["list", "-array-add", "a"], root: root)
    try await defaults("write", ["list", "-array-add", "-int", "1", "b"], root: root)
    #expect(try suite(root: root)["list"] == .array([.string("a"), .integer(1), .string("b")]))
  }

  @Test func dictAddMerges() async throws {
    let root = try TestRoot()
    try await defaults("write", ["d", "-dict", "a", "1", "b", "2"], root: root)
    try await defaults("write", ["d", "-dict-add", "b", "-int", "3", "c", "x"], root: root)
    #expect(
      try suite(root: root)["d"]
        == .dictionary(["a": .string("1"), "b": .integer(3), "c": .string("x")]))
    try await defaults("write", ["fresh", "-dict-add", "k", "v"], root: root)
    #expect(try suite(root: root)["fresh"] == .dictionary(["k": .string("v")]))
  }

  @Test func typedArrayItemsAndDictValues() async throws {
    let root = try TestRoot()
    try await defaults(
      "write", ["a", "-array", "-int", "1", "-string", "x", "-bool", "yes", "-float", "2.5", "plain", "-data", "0aff"],
      root: root)
    #expect(
      try suite(root: root)["a"]
        == .array([.integer(1), .string("x"), .bool(true), .real(2.5), .string("plain"), .data([0x0A, 0xFF])]))
    try await defaults(
      "write", ["d", "-dict", "n", "-int", "1", "s", "text", "when", "-date", "2001-01-01T00:00:10Z"], root: root)
    #expect(
      try suite(root: root)["d"]
        == .dictionary([
          "n": .integer(1), "s": .string("text"), "when": .date(PropertyListDate(secondsSinceReferenceDate: 10)),
        ]))
    // Untyped items stay strings, as on macOS.
    try await defaults("write", ["u", "-array", "1", "true"], root: root)
    #expect(try suite(root: root)["u"] == .array([.string("1"), .string("true")]))
  }

  @Test func oldStylePlistValues() async throws {
    let root = try TestRoot()
    try await defaults("write", ["d", #"{ a = 1; b = (x, "y z"); c = <0fbd>; }"#], root: root)
    #expect(
      try suite(root: root)["d"]
        == .dictionary([
          "a": .string("1"), "b": .array([.string("x"), .string("y z")]), "c": .data([0x0F, 0xBD]),
        ]))
    try await defaults("write", ["a", "( 1, 2 )"], root: root)
    #expect(try suite(root: root)["a"] == .array([.string("1"), .string("2")]))
    try await defaults("write", ["q", #""quoted\tstring""#], root: root)
    #expect(try suite(root: root)["q"] == .string("quoted\tstring"))  // the plist escape, decoded
    // A word is a string, spaces and all.
    try await defaults("write", ["w", "hello world"], root: root)
    #expect(try suite(root: root)["w"] == .string("hello world"))
  }

  @Test func readTypeNamesEveryType() async throws {
    let root = try TestRoot()
    let values: [(key: String, value: [String], type: String)] = [
      ("s", ["-string", "x"], "string"), ("i", ["-int", "5"], "integer"), ("f", ["-float", "1.5"], "float"),
      ("b", ["-bool", "no"], "boolean"), ("t", ["-date", "2026-01-02T03:04:05Z"], "date"),
      ("d", ["-data", "00"], "data"), ("a", ["-array", "x"], "array"), ("m", ["-dict", "k", "v"], "dictionary"),
    ]
    for (key, value, _) in values { try await defaults("write", [key] + value, root: root) }
    for (key, _, type) in values {
      #expect(try await defaults("read-type", [key], root: root) == "Type is \(type)\n")
    }
  }

  @Test func renameMovesTheValue() async throws {
    let root = try TestRoot()
    try await defaults("write", ["old", "-int", "7"], root: root)
    try await defaults("rename", ["old", "new"], root: root)
    let values = try suite(root: root)
    #expect(values["new"] == .integer(7) && values["old"] == nil, "\(values)")
  }

  @Test func domainsListsTheSuitesOnePerLine() async throws {
    let root = try TestRoot()
    try await defaults("write", ["k", "v", "--suite", "beta"], root: root)
    try await defaults("write", ["k", "v", "--suite", "alpha"], root: root)
    try await defaults("write", ["k", "v"], root: root)
    #expect(try await defaults("domains", [], root: root) == "alpha\nbeta\n\(group)\n")
  }

  @Test func findSearchesKeysAndValuesOfEverySuite() async throws {
    let root = try TestRoot()
    try await defaults("write", ["color", "blue", "--suite", "one"], root: root)
    try await defaults("write", ["size", "-int", "3", "--suite", "one"], root: root)
    try await defaults("write", ["theme", "-array", "Light", "BLUEish", "--suite", "two"], root: root)
    try await defaults("write", ["other", "red", "--suite", "two"], root: root)
    let found = try await defaults("find", ["blue"], root: root)
    #expect(
      found == """
        Found 1 keys in domain 'one': {
            color = blue;
        }
        Found 1 keys in domain 'two': {
            theme = (
                Light,
                BLUEish
            );
        }

        """, "\(found)")
    let none = try await defaults("find", ["nothing-like-it"], root: root)
    #expect(none == "No domain, key, nor value containing 'nothing-like-it'\n")
  }

  @Test func exportWritesXMLToAFileOrStdout() async throws {
    let root = try TestRoot()
    try await defaults("write", ["n", "-int", "1", "--suite", "s"], root: root)
    try await defaults("write", ["t", "text", "--suite", "s"], root: root)
    let stdout = try await defaults("export", ["s", "-"], root: root)
    #expect(stdout.hasPrefix("<?xml"), "\(stdout)")
    #expect(
      try PropertyListValue(bytes: Array(stdout.utf8), format: .xml)
        == .dictionary(["n": .integer(1), "t": .string("text")]))
    let file = root.path + "/out.plist"
    try await defaults("export", ["s", file], root: root)
    #expect(FileManager.default.contents(atPath: file) == Data(stdout.utf8))
  }

  @Test(arguments: ["xml", "binary", "openstep"])
  func importReplacesTheSuite(format: String) async throws {
    let root = try TestRoot()
    try await defaults("write", ["stale", "gone", "--suite", "s"], root: root)
    try await defaults("write", ["kept", "old", "--suite", "s"], root: root)
    let contents: PropertyListValue = .dictionary([
      "kept": .string("new"), "list": .array([.string("a"), .string("b")]),
    ])
    let bytes: [UInt8] =
      switch format {
      case "xml": try contents.encoded(as: .xml)
      case "binary": try contents.encoded(as: .binary)
      default: Array("{ kept = new; list = (a, b); }".utf8)
      }
    let file = root.path + "/in.plist"
    try Data(bytes).write(to: URL(fileURLWithPath: file))
    try await defaults("import", ["s", file], root: root)
    #expect(try suite("s", root: root) == contents.dictionaryValue)
  }

  @Test func importRefusesWhatIsNotADictionary() async throws {
    let root = try TestRoot()
    let file = root.path + "/array.plist"
    try Data("( a, b )".utf8).write(to: URL(fileURLWithPath: file))
    let run = try await groupctl(["defaults", "import", group, "s", file, "--root", root.path])
    #expect(run.status == 1 && run.err.contains("holds array, not a dictionary"), "\(run)")
    let garbage = root.path + "/garbage.plist"
    try Data("{ unclosed = 1;".utf8).write(to: URL(fileURLWithPath: garbage))
    let bad = try await groupctl(["defaults", "import", group, "s", garbage, "--root", root.path])
    #expect(bad.status == 1 && bad.err.contains("is not a property list") && bad.err.contains("offset"), "\(bad)")
  }
}
