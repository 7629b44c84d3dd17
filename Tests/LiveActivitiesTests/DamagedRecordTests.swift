import FileCoordination
import Foundation
import Glibc
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import TestSupport
import Testing

/// Records planted by anyone who can write the container: a FIFO, a symlink, garbage, a truncated or huge record,
/// another activity's record under a wrong name. Readers skip them with a logged error; nothing hangs or crashes.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - The record's id not compared with its file name (`ActivityStore.read`): `plantedFilesNeitherHangNorCrash` lists
///   the good activity twice (its copy under another name too).
@Suite(.runSlot(.minutes(3))) struct DamagedRecordTests {
  func plant(_ f: ActivityFixture) throws -> (good: Activity<ScoreboardAttributes>, names: [String]) {
    let good = try f.request()
    let directory = f.container.path + "/.coordination/activities/"
    let valid = try String(contentsOfFile: directory + good.id + ".activity", encoding: .utf8)
    let ids = (0..<6).map { _ in UUID().uuidString }
    #expect(mkfifo(directory + ids[0] + ".activity", 0o600) == 0)
    try FileManager.default.createSymbolicLink(
      atPath: directory + ids[1] + ".activity", withDestinationPath: directory + good.id + ".activity")
    try Data("garbage {".utf8).write(to: URL(fileURLWithPath: directory + ids[2] + ".activity"))
    try Data(valid.utf8.prefix(valid.utf8.count / 2)).write(to: URL(fileURLWithPath: directory + ids[3] + ".activity"))
    try Data(repeating: 0x20, count: 64 * 1024).write(to: URL(fileURLWithPath: directory + ids[4] + ".activity"))
    try Data(valid.utf8).write(to: URL(fileURLWithPath: directory + ids[5] + ".activity"))  // another id inside
    return (good, ids)
  }

  @Test func plantedFilesNeitherHangNorCrash() async throws {
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
    // groupctl lists the good one and names every damaged file on stderr.
    let list = try await f.groupctl(["list", f.container.identifier, "--json"])
    #expect(list.status == 0)
    #expect(list.out.count == 1 && list.out.first?.contains(good.id) == true)
    for id in ids { #expect(list.err.contains(id), "stderr: \(list.err)") }
  }

  @Test func updatingADamagedRecordFailsClearly() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try Data("{}".utf8).write(
      to: URL(fileURLWithPath: f.container.path + "/.coordination/activities/\(activity.id).activity"))
    do {
      try await activity.update(score(1, 1))
      Issue.record("an update of a damaged record succeeded")
    } catch {
      guard error.code == .damagedRecord, let path = error.path else { throw error }
      #expect(path.hasSuffix("\(activity.id).activity"))
    }
  }
}
