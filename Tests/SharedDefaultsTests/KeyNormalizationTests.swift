import Foundation
import PropertyList
import TestSupport
import Testing

/// One rule for a key's spelling at every layer (KeyNormalization.swift): `café` written precomposed (NFC) and
/// decomposed (NFD) is one key, held in NFC — through the journal, a compaction into the image, a rewind, the
/// export and an outside edit — across real processes (`groupctl` and gc-test-helper; this process never opens the
/// suite). Before, a new process read 1 for both spellings after a compaction while `dictionaryRepresentation()`
/// and the plist said 2 (the image compared bytes, the in-memory tables Swift's canonical equivalence).
///
/// Mutants this suite catches (each run by hand):
/// - `normalizedKey` returning the key as it is (no normalization anywhere): the dump shows the NFD spelling's
///   bytes, and after the compaction a new process reads 1 for the NFC spelling;
/// - the observers' journal scan comparing the observed key's bytes as given: `anObserverOfOneSpellingHearsTheOther`
///   (the watcher of the NFD spelling heard nothing);
/// - `ExportHistory.pair` hashing the key's bytes as written: the stale copy that spells the removed key NFD is
///   applied (the removal rolled back) instead of kept aside.
@Suite(.runSlot(.minutes(6))) struct KeyNormalizationTests {
  static let nfc = "caf\u{E9}"
  static let nfd = "cafe\u{301}"
  let group = "group.com.example.spelling"
  let suite = "s"

  func prefs(_ root: TestRoot) -> String { root.path + "/" + group + "/Library/Preferences" }

  /// `groupctl defaults <verb> <group> <rest…> --suite s --root <root>`: its stdout (expected to succeed).
  @discardableResult
  func defaults(
    _ verb: String, _ rest: [String] = [], root: TestRoot, sourceLocation: SourceLocation = #_sourceLocation
  ) async throws -> String {
    let run = try await groupctl(["defaults", verb, group] + rest + ["--suite", suite, "--root", root.path])
    #expect(run.status == 0, "\(verb) \(rest): \(run)", sourceLocation: sourceLocation)
    return run.out
  }

  /// What a new process holds: each line of its dump as UTF-8 bytes (a `String` comparison would call the two
  /// spellings equal).
  func dump(_ root: TestRoot) async throws -> [[UInt8]] {
    let reader = try Child(.defaultsScript(suite: suite, steps: [.dump]), root: root.path, group: group)
    #expect(await reader.exit() == 0, "\(reader.errors.text)")
    return reader.output.map { Array($0.utf8) }
  }

  func line(_ value: Int) -> [[UInt8]] { [Array("\(Self.nfc) \(value)".utf8), Array("end".utf8)] }

  /// The export's keys as bytes, and its dictionary.
  func export(_ root: TestRoot) throws -> (keys: [[UInt8]], values: [String: PropertyListValue]) {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: prefs(root) + "/\(suite).plist")))
    let values = try PropertyListValue(bytes: bytes).dictionaryValue ?? [:]
    return (values.keys.map { Array($0.utf8) }, values)
  }

  /// Both spellings read the same value from a new process.
  func readsBoth(_ value: Int, _ root: TestRoot, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    for key in [Self.nfc, Self.nfd] {
      #expect(try await defaults("read", [key], root: root) == "\(value)\n", sourceLocation: sourceLocation)
    }
  }

  @Test func bothSpellingsAreOneKeyThroughCompactionRewindExportAndOutsideEdit() async throws {
    let root = try TestRoot()
    // NFC, compacted into the image; then NFD over it, in the journal and then compacted too.
    try await defaults("write", [Self.nfc, "-int", "1"], root: root)
    try await defaults("sync", root: root)
    try await defaults("write", [Self.nfd, "-int", "2"], root: root)
    #expect(try await dump(root) == line(2))
    try await readsBoth(2, root)
    try await defaults("sync", root: root)
    #expect(try await dump(root) == line(2))
    try await readsBoth(2, root)
    #expect(try export(root).keys == [Array(Self.nfc.utf8)])
    // A rewind (a new generation; every process reloads from the image it wrote).
    let rewinder = try Child(
      .defaultsScript(suite: suite, steps: [.set(Self.nfd, 3), .rewind]), root: root.path, group: group)
    #expect(await rewinder.exit() == 0, "\(rewinder.errors.text)")
    #expect(try await dump(root) == line(3))
    try await readsBoth(3, root)
    let exported = try export(root)
    #expect(exported.keys == [Array(Self.nfc.utf8)] && exported.values[Self.nfc] == .integer(3))
    // A tool writes the key in the other spelling: its change is applied to the one key.
    try Data(try PropertyListValue.dictionary([Self.nfd: .integer(4)]).encoded(as: .binary))
      .write(to: URL(fileURLWithPath: root.path + "/tool.plist"))
    #expect(rename(root.path + "/tool.plist", prefs(root) + "/\(suite).plist") == 0)
    try await readsBoth(4, root)
    try await defaults("sync", root: root)
    #expect(try await dump(root) == line(4))
    #expect(try export(root).keys == [Array(Self.nfc.utf8)])
    // The app removes the key; a tool's stale copy spells it NFD with a value the export showed (4): kept aside,
    // never a removal rolled back (the history learned that pair from the images, in NFC).
    try await defaults("delete", [Self.nfc], root: root)
    try await defaults("sync", root: root)
    try Data(try PropertyListValue.dictionary([Self.nfd: .integer(4)]).encoded(as: .binary))
      .write(to: URL(fileURLWithPath: root.path + "/stale.plist"))
    #expect(rename(root.path + "/stale.plist", prefs(root) + "/\(suite).plist") == 0)
    try await defaults("sync", root: root)
    #expect(try await dump(root) == [Array("end".utf8)], "the removal was rolled back")
    let kept =
      (try? FileManager.default.contentsOfDirectory(atPath: prefs(root)))?
      .filter { $0.hasPrefix("\(suite).plist.unapplied-") } ?? []
    #expect(kept.count == 1, "\(kept)")
    withExtendedLifetime(root) {}
  }

  /// A process that observes the key in one spelling hears writes in the other: its scan of the journal, which
  /// matches observed keys by bytes without decoding records (`catchUpForObservers`), compares NFC with NFC.
  @Test func anObserverOfOneSpellingHearsTheOther() async throws {
    let root = try TestRoot()
    let watch = try Child(
      ["defaults", "watch", group, Self.nfd, "--suite", suite, "--root", root.path], executable: "groupctl")
    #expect(await watch.line { $0.contains("\"ready\"") } != nil)
    let writer = try Child(
      .defaultsScript(suite: suite, steps: [.fill("o", count: 100, bytes: 0), .set(Self.nfc, 5)]),
      root: root.path, group: group)
    #expect(await writer.exit() == 0, "\(writer.errors.text)")
    let heard = await eventually { watch.output.contains { $0.contains("\"new\":5") } }
    await watch.stop(SIGTERM)
    #expect(heard, "\(watch.output)")
  }
}
