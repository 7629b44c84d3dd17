import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import TestSupport
import Testing

/// A test's container with its own activity clock: a file the test rewrites to move time, which helper processes
/// read too (GROUPCONTAINER_ACTIVITY_CLOCK_FILE), so the 8 and 4 hour rules are checked without sleeping.
final class ActivityFixture: Sendable {
  static let start: Double = 1_800_000_000
  let root: TestRoot
  let container: GroupContainer
  let clockPath: String

  init() throws {
    root = try TestRoot()
    container = try root.container("group.com.example.activities")
    clockPath = root.path + "/clock"
    try set(Self.start)
    ActivityClock.use(.file(at: clockPath), for: container)
  }

  /// Sets every process's time to `seconds` since 1970 (an atomic replace of the clock file).
  func set(_ seconds: Double) throws {
    try String(seconds).write(toFile: clockPath, atomically: true, encoding: .utf8)
  }

  /// Moves the clock to `start + offset`.
  func at(_ offset: TimeInterval) throws { try set(Self.start + offset) }

  var now: Date { ActivityClock.clock(for: container).now }

  /// The environment of helper processes: the same clock.
  var environment: [String: String] { [ActivityClock.environmentVariable: clockPath] }

  /// gc-test-helper's `command` on this container.
  func helper(_ command: HelperCommand) throws -> Child {
    try Child(command, root: root.path, group: container.identifier, environment: environment)
  }

  /// groupctl `activities …` on this container's root.
  func groupctl(_ arguments: [String]) async throws -> (status: Int32?, out: [String], err: String) {
    let child = try Child(
      ["activities"] + arguments + ["--root", root.path], executable: "groupctl", environment: environment)
    let status = await child.exit()
    return (status, child.output, child.errors.text)
  }

  func request(_ home: String = "Lyon", _ away: String = "Nantes", staleDate: Date? = nil) throws
    -> Activity<ScoreboardAttributes>
  {
    try Activity.request(
      attributes: ScoreboardAttributes(homeTeam: home, awayTeam: away),
      content: ActivityContent(state: .init(), staleDate: staleDate), in: container)
  }

  deinit { ActivityClock.use(nil, for: container) }
}

func score(_ home: Int, _ away: Int) -> ActivityContent<ScoreboardAttributes.ContentState> {
  ActivityContent(state: .init(homeScore: home, awayScore: away), staleDate: nil)
}
