import Foundation
import PropertyList
import SharedDefaults
import TestSupport
import Testing

/// A file that is not a property list, put where the suite's plist goes by another tool, must never cost an
/// acknowledged write: the suite moves it aside and keeps its last good state — in a process that never loaded
/// the suite too, whose only copy of that state is the committed journal.
///
/// Mutants this suite catches:
/// - `adoptOutsideSnapshot` compacting without `recoverJournal` after moving an unparsable plist aside (the state
///   the next process opened was `{}`: every key written since the last compaction was gone):
///   `anUnparsableOutsidePlistKeepsTheJournalsWrites` fails for each argument. (Since the plist became an export
///   that is never read as the state, the same test guards that an unusable export costs nothing.)
@Suite(.runSlot(.minutes(3))) struct OutsideSnapshotTests {
  @Test(arguments: ["garbage", "fifo", "directory"])
  func anUnparsableOutsidePlistKeepsTheJournalsWrites(kind: String) async throws {
    let root = try TestRoot()
    let container = try root.container()
    // Another process writes five keys and exits: short-lived, it never compacts, so they are in the journal only.
    let writer = try Child(
      .defaultsSet(suite: "outside", count: 5, valueBytes: 8), root: root.path, group: container.identifier)
    #expect(await writer.exit() == 0)
    let plist = container.preferencesURL.appendingPathComponent("outside.plist").path
    try? FileManager.default.removeItem(atPath: plist)
    switch kind {
    case "garbage": try Data("not a property list".utf8).write(to: URL(fileURLWithPath: plist))
    case "fifo": #expect(mkfifo(plist, 0o600) == 0)
    default: try FileManager.default.createDirectory(atPath: plist, withIntermediateDirectories: false)
    }

    // A fresh process reads the suite: every acknowledged key is there.
    let reader = try Child(.defaultsKeys(suite: "outside"), root: root.path, group: container.identifier)
    #expect(await reader.exit() == 0)
    #expect(reader.output == ["k0 8", "k1 8", "k2 8", "k3 8", "k4 8", "end"], "stderr: \(reader.errors.text)")
    // When the export is next written, the outside file is moved aside (a file that does not parse may be
    // half-written: it is given `exportRetryDelay` first), and the plist holds the suite again.
    let defaults = try SharedDefaults(suiteName: "outside", container: container)
    try defaults.synchronize()
    let files = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(files.contains { $0.hasPrefix("outside.plist.corrupt-") }, "\(files)")
    #expect(defaults.propertyListRepresentation().count == 5)
    let exported = try PropertyListValue(bytes: Array(Data(contentsOf: URL(fileURLWithPath: plist))))
    #expect(exported.dictionaryValue?.count == 5)
    withExtendedLifetime(root) {}
  }
}
