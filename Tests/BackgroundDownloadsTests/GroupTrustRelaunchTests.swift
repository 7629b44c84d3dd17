import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

/// Issue 33 item 1, the download agent's side: a session's relaunch registration (`sessions/<sid>/app`) names the
/// program the agent starts, as the agent's user, when the session's events wait with nobody attached. In a
/// group-shared container member B must not get its program started by member A's agent. Two real users in one
/// group (`GroupMembers`); the agent runs as A (not root: root is a trusted owner) with `setpriv`. Each program
/// leaves a marker file: no marker, nothing ran.
///
/// A's registration is written by this (root) process through `DownloadStore.register` and given to A: the file the
/// library writes, owned by A, as A's app would leave it.
///
/// Mutants this suite catches (OwnerOnlyWritable.problem, SystemLayer): without the owner check (`.replace`),
/// without the link-count check (`.secondLinkToAsFile`), without the mode check (`.groupWritableThenEdited`); the
/// registration written with the container's 0660 again (`anInPlaceEditIsDeniedAndAsAppIsRelaunched`).
@Suite(.runSlot(.minutes(8)), .enabled(if: GroupMembers.available, "needs root, setpriv, useradd and groupadd"))
struct GroupTrustRelaunchTests {
  struct World {
    let users: GroupMembers
    let root: TestRoot
    let container: GroupContainer
    let ownMarker: String
    let plantedMarker: String
    let plantedSource: String
    let session = "s"
    var registration: String { container.path + "/" + DownloadStore.sessionPath(session) + "/app" }

    init() async throws {
      users = try await GroupMembers.make()
      root = try TestRoot()
      container = try users.container(in: root, "group.com.example.trust-downloads")
      let markers = try users.markers(in: root)
      ownMarker = markers + "/own"
      plantedMarker = markers + "/planted"
      plantedSource = root.path + "/planted-app"
      let store = try DownloadStore(container: container)
      let events = container.path + "/" + DownloadStore.sessionPath(session) + "/events"
      // A's app: leaves its marker and handles the waiting events (removes them), so the agent goes idle.
      try store.register(
        RelaunchRecord(
          executable: "/bin/sh", arguments: ["-c", #"touch "$0"; rm -f "$1"/*.event"#, ownMarker, events]),
        for: session)
      #expect(chown(registration, users.a, users.group) == 0)
      let planted = RelaunchRecord(executable: "/bin/sh", arguments: ["-c", #"touch "$0""#, plantedMarker])
      try Data(DownloadRecordFormat.encode(planted)).write(to: URL(fileURLWithPath: plantedSource))
      #expect(chmod(plantedSource, 0o644) == 0)
      // An event waits and nobody is attached: the agent relaunches the session's app, if it trusts it.
      try store.queue(
        [EventRecord(sequence: 2, taskID: DownloadRecordFormat.newTaskID(), kind: .completed, error: .cancelled)],
        for: session)
    }

    /// The download agent of the group container, run as A until it goes idle.
    func runAgent() async throws -> (status: Int32?, out: String, err: String) {
      let agent = productsDirectory.appendingPathComponent("gc-download-agent").path
      return try await users.run(
        as: users.a, agent,
        ["--identifier", container.identifier, "--root", root.path, "--idle", "1.5", "--group-shared"])
    }
  }

  @Test("the agent, as A, relaunches A's own app; another member cannot edit A's registration in place")
  func anInPlaceEditIsDeniedAndAsAppIsRelaunched() async throws {
    let world = try await World()
    var st = stat()
    #expect(lstat(world.registration, &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o640 && st.st_nlink == 1, "written with mode \(String(st.st_mode, radix: 8))")
    let b = try await world.users.shell(
      as: world.users.b, #"cat "$1" > "$2""#, [world.plantedSource, world.registration])
    #expect(b.status != 0 && b.err.contains("Permission denied"), "\(b)")
    let agent = try await world.runAgent()
    #expect(agent.status == 0, "\(agent)")
    #expect(GroupMembers.owner(world.ownMarker) == world.users.a, "A's app was not relaunched as A: \(agent.err)")
    #expect(!FileManager.default.fileExists(atPath: world.plantedMarker))
  }

  @Test(
    "B's program is never started by A's agent, and the agent's log says which file is wrong and how to fix it",
    arguments: TrustAttack.allCases)
  func bCannotMakeAsAgentRunItsProgram(attack: TrustAttack) async throws {
    let world = try await World()
    try await attack.perform(
      on: world.registration, from: world.plantedSource, users: world.users, scratch: world.root.path)
    let agent = try await world.runAgent()
    #expect(agent.status == 0, "\(agent)")
    for expected in [world.registration, "is not started", "Start the session again"] + attack.problem(world.users) {
      #expect(agent.err.contains(expected), "missing '\(expected)' in: \(agent.err)")
    }
    #expect(!FileManager.default.fileExists(atPath: world.plantedMarker), "B's program ran as A")
    #expect(!FileManager.default.fileExists(atPath: world.ownMarker), "a refused registration still started something")
  }
}
