import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import TestSupport
import Testing

/// `groupctl activities`, run as a real binary: stdout, stderr, exit status.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - `end` ignoring `--immediate` (always `.default`): `endAndEndImmediate` fails (ended, not dismissed).
/// - `watch` started without `includeExisting`: `watchPrintsEveryChange` waits in vain for the first line.
@Suite(.runSlot(.minutes(3))) struct GroupctlActivitiesTests {
  static func object(_ line: String) -> [String: Any]? {
    try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
  }

  @Test func listAndListJSON() async throws {
    let f = try ActivityFixture()
    let a = try f.request("Lyon", "Nantes", staleDate: f.now.addingTimeInterval(60))
    try await a.update(
      ActivityContent(state: .init(homeScore: 2, awayScore: 1), staleDate: f.now.addingTimeInterval(60)))
    let b = try f.request("Lens", "Brest")
    let json = try await f.groupctl(["list", f.container.identifier, "--json"])
    #expect(json.status == 0)
    let objects = json.out.compactMap(Self.object)
    #expect(objects.count == 2)
    let first = try #require(objects.first { $0["id"] as? String == a.id })
    #expect(first["attributes_type"] as? String == "ScoreboardAttributes")
    #expect(first["state"] as? String == "active")
    #expect((first["content_state"] as? [String: Any])?["homeScore"] as? Int == 2)
    #expect(
      first["stale_date"] as? String
        == ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: ActivityFixture.start + 60)))
    #expect(objects.contains { $0["id"] as? String == b.id && $0["stale_date"] == nil })
    try f.at(61)
    let text = try await f.groupctl(["list", f.container.identifier])
    #expect(text.status == 0)
    #expect(text.out.contains { $0.hasPrefix(a.id) && $0.contains(" stale ") })
    #expect(text.out.contains { $0.hasPrefix(b.id) && $0.contains(" active ") })
  }

  @Test func endAndEndImmediate() async throws {
    let f = try ActivityFixture()
    let a = try f.request()
    let b = try f.request()
    let end = try await f.groupctl(["end", f.container.identifier, a.id])
    #expect(end.status == 0)
    #expect(end.out == ["\(a.id) ended"])
    #expect(a.activityState == .ended)
    let now = try await f.groupctl(["end", f.container.identifier, b.id, "--immediate"])
    #expect(now.out == ["\(b.id) dismissed"])
    #expect(b.activityState == .dismissed)
    let unknown = try await f.groupctl(["end", f.container.identifier, UUID().uuidString])
    #expect(unknown.status == 2)
    #expect(unknown.err.contains("no activity"))
    let malformed = try await f.groupctl(["end", f.container.identifier, "not-an-id"])
    #expect(malformed.status == 64)
    #expect(malformed.err.contains("is not an activity id"))
  }

  @Test func enableDisable() async throws {
    let f = try ActivityFixture()
    #expect(try await f.groupctl(["disable", f.container.identifier]).status == 0)
    #expect(throws: ActivityError.denied(group: f.container.identifier)) { try f.request() }
    let refused = try f.helper(.actRequest(homeTeam: "Lyon", awayTeam: "Nantes"))
    #expect(await refused.exit() != 0)
    #expect(refused.errors.text.contains("turned off"))
    #expect(try await f.groupctl(["enable", f.container.identifier]).status == 0)
    let allowed = try f.helper(.actRequest(homeTeam: "Lyon", awayTeam: "Nantes"))
    #expect(await allowed.exit() == 0)
  }

  @Test func listOfAMissingContainerCreatesNothing() async throws {
    let f = try ActivityFixture()
    let run = try await f.groupctl(["list", "group.com.example.none"])
    #expect(run.status == 1)
    #expect(!FileManager.default.fileExists(atPath: f.root.path + "/group.com.example.none"))
  }

  @Test func watchPrintsEveryChange() async throws {
    let f = try ActivityFixture()
    let a = try f.request()
    let watch = try Child(
      ["activities", "watch", f.container.identifier, "--root", f.root.path], executable: "groupctl",
      environment: f.environment)
    defer { watch.kill() }
    #expect(await watch.line { $0.contains(a.id) && $0.contains("\"revision\":1") } != nil)
    try await a.update(score(3, 0))
    #expect(await watch.line { $0.contains("\"homeScore\":3") } != nil)
    let b = try f.request("Lens", "Brest")
    #expect(await watch.line { $0.contains(b.id) } != nil)
    try await a.end(nil, dismissalPolicy: .immediate)
    #expect(await watch.line { $0.contains(a.id) && $0.contains("\"state\":\"dismissed\"") } != nil)
    #expect(watch.output.allSatisfy { Self.object($0) != nil })
  }
}
