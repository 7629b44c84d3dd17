import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The presenter registry's layout by path (issue #33 item 5): a process that has read nothing of the registry yet
/// — a new process, here a new registry instance over this process's container — reads, for an access, the records
/// that concern its path and nothing else, however many other items another process presents.
///
/// Mutant: `PresenterRegistry.lookup` reading every bucket (`let all = index(); return (all.records, all.damaged)`
/// at its start, the cost of the old flat directory) — the unrelated write reads 300 records and this test fails.
@Suite(.runSlot(.minutes(3))) struct PresenterLayoutTests {
  let group = "group.com.example.layout"

  @Test func aFirstAccessReadsOnlyTheRecordsOfItsPath() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let crowd = try Child(
      ["stress", "present-many", group, "--count", "300", "--root", root.path], executable: "groupctl")
    await crowd.line { $0.contains("\"ready\"") }
    let space = try container.coordinationSpace()
    func fresh() -> PresenterRegistry {
      PresenterRegistry(
        directory: space.directory + "/presenters", root: space.root, counters: space.counters,
        fileMode: space.fileMode, directoryMode: space.directoryMode)
    }
    // (The paths made first: `lookup` takes them as an autoclosure, which cannot throw.)
    let (w, f7, presented) = (
      try ContainerPath("Documents/w.txt"), try ContainerPath("Documents/presented/f7"),
      try ContainerPath("Documents/presented")
    )
    // An item nobody presents: its buckets and its ancestors' hold no record.
    let unrelated = fresh()
    #expect(unrelated.lookup([w]).records.isEmpty)
    #expect(unrelated.filesRead.load(ordering: .relaxed) == 0)
    // One presented file: its own record, one read.
    let one = fresh()
    let found = one.lookup([f7]).records
    #expect(found.map(\.item) == ["Documents/presented/f7"] && found.first?.process.pid == crowd.pid)
    #expect(one.filesRead.load(ordering: .relaxed) == 1)
    // Their directory: every presenter inside it (what a delete of the directory must tell).
    let all = fresh().lookup([presented]).records
    #expect(all.count == 300, "\(all.count)")
    // A coordinated write of the unrelated item from another process still works with the crowd there.
    let writer = try Child(
      .access(mode: .write, item: "Documents/w.txt", count: 1, holdMS: 0, log: root.path + "/w.log"),
      root: root.path, group: group)
    #expect(await writer.exit() == 0)
    crowd.kill()
  }
}
