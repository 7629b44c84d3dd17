import FileCoordination
import Foundation
import Glibc
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import SharedDefaults
import TestSupport
import Testing

/// Records planted by anyone who can write the container: in the records' suite, garbage, a truncated or huge
/// record, a value that is not data, another activity's record under a wrong key; as old record files to import, a
/// FIFO, a symlink, garbage. Readers skip them with a logged error; nothing hangs or crashes.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - The record's id not compared with its key (`ActivityStore.decode`): `plantedValuesNeitherHangNorCrash` lists
///   the good activity twice (its copy under another key too).
/// - Old record files read without `O_NONBLOCK` (SystemLayer): `plantedFilesAreNotImported` hangs on the FIFO.
@Suite(.runSlot(.minutes(3))) struct DamagedRecordTests {
  func plant(_ f: ActivityFixture) throws -> (good: Activity<ScoreboardAttributes>, ids: [String]) {
    let good = try f.request()
    let store = try ActivityStore(container: f.container)
    guard case .data(let valid)? = store.suite.value(forKey: good.id) else {
      Issue.record("no record of \(good.id)")
      return (good, [])
    }
    let ids = (0..<6).map { _ in UUID().uuidString }
    try store.suite.set(
      values: [
        ids[0]: .data(Array("garbage {".utf8)), ids[1]: .data(Array(valid.prefix(valid.count / 2))),
        ids[2]: .data([UInt8](repeating: 0x20, count: 64 * 1024)), ids[3]: .data(valid),  // another id inside
        ids[4]: .integer(7), ids[5]: .string("not json"),
      ])
    return (good, ids)
  }

  @Test func plantedValuesNeitherHangNorCrash() async throws {
    let f = try ActivityFixture()
    let (good, ids) = try plant(f)
    let listed = try Activity<ScoreboardAttributes>.activities(in: f.container)
    #expect(listed.map(\.id) == [good.id])
    for id in ids {
      guard case .damaged = try ActivityStore(container: f.container).read(id) else {
        Issue.record("\(id) was not reported damaged")
        continue
      }
    }
    // Observers start and still follow the good one.
    var contents = good.contentUpdates.makeAsyncIterator()
    try await good.update(score(1, 0))
    #expect(await contents.next()?.state.homeScore == 1)
    // groupctl lists the good one and names every damaged record on stderr.
    let list = try await f.groupctl(["list", f.container.identifier, "--json"])
    #expect(list.status == 0)
    #expect(list.out.count == 1 && list.out.first?.contains(good.id) == true)
    for id in ids { #expect(list.err.contains(id), "stderr: \(list.err)") }
  }

  /// Old record files (the version with one file per activity) that are not records: another process (groupctl)
  /// opening the activities neither hangs on the FIFO nor follows the link nor imports anything; it removes them.
  @Test func plantedFilesAreNotImported() async throws {
    let f = try ActivityFixture()
    let good = try f.request()
    let directory = f.container.path + "/.coordination/activities/"
    let ids = (0..<3).map { _ in UUID().uuidString }
    #expect(mkfifo(directory + ids[0] + ".activity", 0o600) == 0)
    let target = f.root.path + "/elsewhere.activity"
    try Data(
      ActivityRecordFormat.encode(try #require(ActivityStore(container: f.container).read(good.id).record))
    ).write(to: URL(fileURLWithPath: target))
    try FileManager.default.createSymbolicLink(atPath: directory + ids[1] + ".activity", withDestinationPath: target)
    try Data("garbage {".utf8).write(to: URL(fileURLWithPath: directory + ids[2] + ".activity"))
    let list = try await f.groupctl(["list", f.container.identifier, "--json"])
    #expect(list.status == 0)
    #expect(list.out.count == 1 && list.out.first?.contains(good.id) == true)
    for id in ids {
      #expect(list.err.contains(id), "stderr: \(list.err)")
      #expect(!FileManager.default.fileExists(atPath: directory + id + ".activity"))
    }
    #expect(FileManager.default.fileExists(atPath: target))  // the link was removed, not followed
  }

  @Test func updatingADamagedRecordFailsClearly() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try activity.store.suite.set(value: .data(Array("{}".utf8)), forKey: activity.id)
    do {
      try await activity.update(score(1, 1))
      Issue.record("an update of a damaged record succeeded")
    } catch {
      guard error.code == .damagedRecord, let path = error.path else { throw error }
      #expect(path.hasSuffix(activity.id))
    }
  }
}
