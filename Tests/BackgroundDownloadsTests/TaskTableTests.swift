import BackgroundDownloads
import Testing

@testable import DownloadAgent

/// The agent's one table of tasks (`TaskTable`): each task's commits and, once settled, its finish time and session.
///
/// Mutants this suite catches (made once by hand, seen failing, restored): `remove(_:)` not counting a settled task
/// out (`settledCount` kept): `settledAndCommitsLiveInOneEntry`; a key read with `HexDigits.value` (upper case
/// taken): `aKeyIsATaskIDsDigits`.
@Suite struct TaskTableTests {
  static let a = TaskKey("0123456789abcdef0123456789abcdef")!
  static let b = TaskKey("fedcba9876543210fedcba9876543210")!

  /// A key holds a task id's 32 lower-case hex digits and gives them back; anything else (upper case names another
  /// file, a wrong length, another byte) has no key, as `DownloadRecordFormat.isTaskID` says.
  @Test func aKeyIsATaskIDsDigits() {
    #expect(Self.a.id == "0123456789abcdef0123456789abcdef" && Self.b.id == "fedcba9876543210fedcba9876543210")
    for id in [
      "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdeg",
      "0123456789abcdef0123456789abcdef0",
    ] {
      #expect(TaskKey(id) == nil, "\(id)")
      #expect(!DownloadRecordFormat.isTaskID(id), "\(id)")
    }
  }

  @Test func settledAndCommitsLiveInOneEntry() {
    var table = TaskTable()
    table.append(1, for: Self.a)
    #expect(table[settled: Self.a] == nil)
    table[settled: Self.a] = Settled(finished: 5_000_000_001, session: 0)
    table[settled: Self.b] = Settled(finished: 7_000_000_000, session: 3)
    #expect(table.settledCount == 2)
    #expect(table[settled: Self.a]?.finished == 6_000_000_000)
    #expect(table[settled: Self.b]?.session == 3)
    table.append(2, for: Self.a)
    table.append(9, for: Self.a)
    table.append(1 << 40, for: Self.a)
    #expect(table.settled(where: { $0.finished > 6_500_000_000 }).map(\.key) == [Self.b])
    #expect(table.remove(Self.a) == [1, 2, 9, 1 << 40])
    #expect(table.settledCount == 1)
    #expect(table[settled: Self.a] == nil)
    #expect(table.remove(Self.a) == [])
  }

  @Test func unsettlingKeepsTheCommits() {
    var table = TaskTable()
    table.append(4, for: Self.a)
    table[settled: Self.a] = Settled(finished: 1, session: 0)
    table[settled: Self.b] = Settled(finished: 1, session: 0)
    table.unsettle { $0 == Self.a }
    #expect(table.settledCount == 1)
    #expect(table[settled: Self.a] == nil)
    #expect(table[settled: Self.b] != nil)
    // A task with no commits and no longer settled leaves the table.
    table.unsettle { _ in true }
    #expect(table.settledCount == 0)
    #expect(table.remove(Self.b) == [])
    #expect(table.remove(Self.a) == [4])
  }
}
