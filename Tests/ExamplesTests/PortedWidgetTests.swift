import Foundation
import GroupContainer
import TestSupport
import Testing

/// The classic iOS App Group snippet (`Examples/PortedWidget/Original.swift.txt`) and its Linux port
/// (`Examples/PortedWidget/main.swift`, the `ported-widget` target): the port differs in at most three lines and
/// runs to completion.
///
/// Mutants this suite catches (each tried): a fourth changed line in the port (`try` added before the
/// `coordinate(writingItemAt:…error:…)` call: 4 > 3); the `error:` write overload not running its accessor (no
/// "notes: Buy milk", no notes.txt); the `error:` overloads dropping the failure instead of setting `&error`.
@Suite(.runSlot(.minutes(3))) struct PortedWidgetTests {
  static let exampleDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Examples/PortedWidget", isDirectory: true)

  static func lines(_ name: String) throws -> [String] {
    let text = try String(contentsOf: exampleDirectory.appendingPathComponent(name), encoding: .utf8)
    var lines = text.components(separatedBy: "\n")
    if lines.last == "" { lines.removeLast() }
    return lines
  }

  @Test func theLCSDiffCountsChangedLines() {
    #expect(changedLineCount(["a", "b", "c"], ["a", "b", "c"]) == 0)
    #expect(changedLineCount(["a", "b", "c"], ["a", "x", "c"]) == 1)  // one line edited
    #expect(changedLineCount(["a", "b"], ["a", "new", "b"]) == 1)  // one added
    #expect(changedLineCount(["a", "b", "c"], ["a", "c"]) == 1)  // one removed
    #expect(changedLineCount(["a", "b", "c", "d"], ["x", "b", "y", "z", "d"]) == 3)
  }

  @Test func thePortChangesAtMostThreeLinesOfTheIOSOriginal() throws {
    let original = try Self.lines("Original.swift.txt")
    let port = try Self.lines("main.swift")
    // The original is the iOS code, untouched: Apple's names and the NSErrorPointer style.
    #expect(original.contains { $0.contains("UserDefaults(suiteName: groupID)") })
    #expect(original.contains { $0.contains("error: &error") })
    #expect(!original.contains { $0.contains("GroupContainer") })
    let changed = changedLineCount(original, port)
    #expect(changed <= 3, "the port changes \(changed) lines of the iOS original")
    #expect(changed > 0)
  }

  @Test func thePortRunsToCompletionInTheGroupContainer() async throws {
    let root = try TestRoot()
    let widget = try Child([], executable: "ported-widget", environment: ["GROUP_CONTAINER_ROOT": root.path])
    #expect(await widget.exit() == 0, "stderr: \(widget.errors.text)")
    let output = widget.output
    #expect(output.contains("unread: 42, title: Groceries"), "\(output)")
    #expect(output.contains("notes: Buy milk"), "\(output)")
    #expect(!output.contains { $0.hasPrefix("coordination failed") }, "\(output)")
    // Everything landed in the group container under the root the environment named.
    let container = root.url.appendingPathComponent("group.com.example.notes", isDirectory: true)
    #expect(try String(contentsOf: container.appendingPathComponent("notes.txt"), encoding: .utf8) == "Buy milk")
    #expect(
      FileManager.default.fileExists(
        atPath: container.appendingPathComponent("Library/Preferences").path))
  }

  @Test func theErrorOverloadsReportAFailedAccessThroughTheErrorPointer() {
    let outside = FileManager.default.temporaryDirectory.appendingPathComponent("outside-\(UUID()).txt")
    var error: NSError?
    var ran = false
    NSFileCoordinator().coordinate(writingItemAt: outside, options: [], error: &error) { _ in ran = true }
    #expect(!ran)
    #expect(error?.localizedDescription.contains(outside.path) == true, "\(String(describing: error))")
    #expect(error?.localizedDescription.contains("not inside a group container") == true)
    error = nil
    NSFileCoordinator().coordinate(readingItemAt: outside, options: [], error: &error) { _ in ran = true }
    #expect(!ran)
    #expect(error?.userInfo[NSUnderlyingErrorKey] is FileCoordinatorError)
  }

  @Test func anInvalidGroupIdentifierHasNoContainerURL() {
    #expect(FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: "group.bad/../id") == nil)
    #expect(FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: "") == nil)
  }
}

/// Lines changed between `a` and `b` by a longest-common-subsequence line diff: each run of removed and added
/// lines between two common lines counts max(removed, added) (an edited line is one removal plus one addition).
func changedLineCount(_ a: [String], _ b: [String]) -> Int {
  // lcs[i][j]: length of the LCS of a[i...] and b[j...].
  var lcs = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
  for i in stride(from: a.count - 1, through: 0, by: -1) {
    for j in stride(from: b.count - 1, through: 0, by: -1) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : max(lcs[i + 1][j], lcs[i][j + 1])
    }
  }
  var (i, j, removed, added, changed) = (0, 0, 0, 0, 0)
  while i < a.count || j < b.count {
    if i < a.count, j < b.count, a[i] == b[j] {
      changed += max(removed, added)
      (removed, added) = (0, 0)
      i += 1
      j += 1
    } else if j < b.count, i == a.count || lcs[i][j + 1] >= lcs[i + 1][j] {
      added += 1
      j += 1
    } else {
      removed += 1
      i += 1
    }
  }
  return changed + max(removed, added)
}
