import BackgroundDownloads
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

/// The download agent's lock and its idle exit, across real processes (issue #33 items 3 and 9): one agent per
/// container even when `agent.lock` is removed under it, a dead agent restarted by `groupctl downloads wait`, a task
/// created as the agent goes idle still run, and nothing done by an agent that has released its lock.
///
/// The idle windows are hit exactly with pause points (`FaultPoint.pause`, `GROUPCONTAINER_PAUSE_POINT`), not by
/// chance. Mutants this suite catches (each made once by hand, seen failing, restored) are named on each test.
@Suite(.runSlot(.minutes(6))) struct AgentLifecycleTests {
  static let group = "group.com.example.agent"

  static func agent(_ root: TestRoot, idle: String, pause: String? = nil, pauses: String? = nil) throws -> Child {
    var environment: [String: String] = [:]
    if let pause, let pauses {
      environment["GROUPCONTAINER_PAUSE_POINT"] = pause
      environment["GROUPCONTAINER_PAUSE_DIR"] = pauses
    }
    return try Child(
      ["--identifier", group, "--root", root.path, "--idle", idle], executable: "gc-download-agent",
      environment: environment)
  }

  static func content(_ container: GroupContainer, _ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: container.url.appendingPathComponent(path).path).map { [UInt8]($0) }
  }

  /// A SIGTERM while a group commit is being written (pause point `downloads.agent.commit`: the transfer is done,
  /// its outcome queued) ends the agent only once that commit and its visible files are written: the task is final
  /// when the agent has exited. Mutant: `stopAll` not waiting for `commits` — the agent exited at once, the task's
  /// outcome unwritten (its status still `running`).
  @Test func aShutdownWaitsForTheGroupCommitInFlight() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let task = TaskRequest(
      id: DownloadRecordFormat.newTaskID(), session: "s", taskIdentifier: 1,
      url: server.url("/gen/1000?seed=7").absoluteString, destination: "Downloads/c",
      created: Int64(Date().timeIntervalSince1970 * 1e9))
    try store.create(task)
    let agent = try Self.agent(root, idle: "600", pause: "downloads.agent.commit", pauses: pauses)
    let paused = pauses + "/downloads.agent.commit"
    #expect(await eventually { FileManager.default.fileExists(atPath: paused) }, "stderr: \(agent.errors.text)")
    agent.process.signal(SIGTERM)
    // Room for a build that does not wait to exit now (2 s); this one stays until its commit is written.
    _ = await eventually(within: 2) { !agent.process.isRunning }
    #expect(agent.process.isRunning, "the agent exited with a group commit still to write")
    try FileManager.default.removeItem(atPath: paused)
    #expect(await agent.exit() == 0, "stderr: \(agent.errors.text)")
    let status = store.status(task.id)
    #expect(status?.phase == .completed && status?.eventsQueued == true, "\(String(describing: status))")
    #expect(FileServer.mismatch(Self.content(container, "Downloads/c"), size: 1000, seed: 7) == nil)
  }

  /// A start that finds another thread's start pending returns only once that one has spawned its agent: a process
  /// that exits next cannot take an agent that was never started with it (`groupctl downloads start` did, when its
  /// session's first poll was starting the agent: no agent ran). The helper holds its first start between decision
  /// and spawn (pause point `agents.launch`), then asks from its main thread; the test lets the first go 0.3 s after
  /// it paused. Mutant: no `launching` lock (the second call returned while the first was held).
  @Test func aPendingStartIsWaitedForNotSkipped() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: true)
    let helper = try Child(
      .dlLaunchRace, root: root.path, group: Self.group,
      environment: ["GROUPCONTAINER_PAUSE_POINT": "agents.launch", "GROUPCONTAINER_PAUSE_DIR": pauses])
    defer { helper.kill() }
    #expect(await helper.line { $0 == "paused" } != nil)
    try await Task.sleep(for: .milliseconds(300))  // the second call's chance to return early: a mutant's
    #expect(!helper.output.contains("second returned"), "the second start returned before the first spawned")
    try FileManager.default.removeItem(atPath: pauses + "/agents.launch")
    #expect(await helper.line { $0 == "second returned" } != nil)
    // The agent the first start spawned runs (it exits 2 s after its first pass, nothing to do).
    let by = MonotonicClock.nanoseconds() + UInt64(Wait.condition * 1e9)
    var log = ""
    while !log.contains("download agent") && MonotonicClock.nanoseconds() < by {
      try await Task.sleep(for: .milliseconds(20))
      let path = container.url.path + "/.coordination/downloads/agent.log"
      log = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
    #expect(log.contains("download agent"), "no agent started: agent.log '\(log)'")
  }

  /// `rm agent.lock` while an agent runs, then a second agent (`groupctl downloads agent`): moments later exactly
  /// one runs, and it holds the name. Either the first took the name again before the second came (the second
  /// exits 3), or the second locked the new file and the first, seeing its file lost its name, exits 3.
  /// Mutant: `stillTheAgent()` always true (no look at the name): both agents run on.
  @Test func aRemovedLockLeavesOneAgent() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let store = try DownloadStore(container: container)
    let first = try Self.agent(root, idle: "600")
    #expect(await eventually { store.isHeld(DownloadStore.agentLockPath) })
    // The holder writes its pid just after it takes the flock: a read between the two finds the file empty.
    #expect(await eventually { store.holderPID(DownloadStore.agentLockPath) == first.pid })
    try FileManager.default.removeItem(atPath: container.path + "/" + DownloadStore.agentLockPath)
    let second = try Child(
      ["downloads", "agent", Self.group, "--root", root.path], executable: "groupctl")
    #expect(await eventually { !first.process.isRunning || !second.process.isRunning })
    let (loser, survivor) = first.process.isRunning ? (second, first) : (first, second)
    #expect(await loser.exit() == 3, "stderr: \(loser.errors.text)")
    #expect(survivor.process.isRunning)
    #expect(store.isHeld(DownloadStore.agentLockPath))
    #expect(await eventually { store.holderPID(DownloadStore.agentLockPath) == survivor.pid })
    #expect(await survivor.stop(SIGTERM) == 0)
  }

  /// `rm -rf` of the container while its agent runs: the agent sees `agent.lock` lost its name (the pause point
  /// `downloads.agent.lost` holds it there while the test removes the rest of the tree), cannot take the name again
  /// — its directory is gone — and exits 0 as its container is gone. Not deposed: nobody else holds the name.
  /// Mutant: the old `retake` (any failure taken for another agent's lock): it exits 3, "another agent locked the
  /// new one" (seen as an intermittent failure of DownloadSessionTests on loaded CI runs).
  @Test func anAgentWhoseContainerIsRemovedExitsCleanly() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let store = try DownloadStore(container: container)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: false)
    let agent = try Self.agent(root, idle: "600", pause: "downloads.agent.lost", pauses: pauses)
    #expect(await eventually { store.isHeld(DownloadStore.agentLockPath) })
    try FileManager.default.removeItem(atPath: container.path + "/" + DownloadStore.agentLockPath)
    let paused = pauses + "/downloads.agent.lost"
    #expect(await eventually { FileManager.default.fileExists(atPath: paused) }, "the agent never saw its lock lost")
    try await removeTree(container.path)
    try FileManager.default.removeItem(atPath: paused)
    #expect(await agent.exit() == 0, "stderr: \(agent.errors.text)")
  }

  /// The starter (`groupctl downloads start`) is gone and the agent is killed mid-download: `groupctl downloads
  /// wait` starts a new agent, which resumes the download, and wait prints the file.
  /// Mutant: wait without `AgentLauncher.ensureRunning` (as before): nothing runs the task; wait ends at its
  /// --timeout with status 2.
  @Test func waitRestartsAKilledAgent() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let size = 2_000_000
    // The first answer stalls after 600 kB, whatever the machine's load: the agent is killed there.
    let target = "/gen/\(size)?seed=31&stall=600000&faults=1"
    let start = try Child(
      [
        "downloads", "start", Self.group, server.url(target).absoluteString, "--to", "Downloads/w.bin", "--root",
        root.path,
      ], executable: "groupctl")
    #expect(await start.exit() == 0, "\(start.errors.text)")
    let id = try #require(start.output.first)
    let store = try DownloadStore(container: container)
    #expect(await eventually { (store.task(id)?.countOfBytesReceived ?? 0) >= 600_000 })
    let pid = try #require(store.holderPID(DownloadStore.agentLockPath))
    #expect(kill(pid, SIGKILL) == 0)
    #expect(await eventually { !store.isHeld(DownloadStore.agentLockPath) })
    let wait = try Child(
      ["downloads", "wait", Self.group, id, "--root", root.path, "--timeout", "240"], executable: "groupctl")
    #expect(await wait.exit() == 0, "stderr: \(wait.errors.text)")
    #expect(wait.output == [container.path + "/Downloads/w.bin"])
    #expect(FileServer.mismatch(Self.content(container, "Downloads/w.bin"), size: size, seed: 31) == nil)
    #expect(store.holderPID(DownloadStore.agentLockPath) != pid)
  }

  /// The agent has decided it is idle and is stopped there (pause point `downloads.agent.idle`, its lock still
  /// held); `groupctl downloads start` creates a task meanwhile, sees the lock held and starts no agent (and the
  /// one it would start is /bin/true). Let go, the agent releases its lock, looks once more, takes the lock again
  /// and runs the task before it exits: the task is not left for the next start.
  /// Mutant: the idle exit without its final look (`break` instead of `if !hasWork() { break }`): the agent exits
  /// with the task still waiting.
  @Test func aTaskCreatedAsTheAgentGoesIdleIsRun() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: false)
    let agent = try Self.agent(root, idle: "0.3", pause: "downloads.agent.idle", pauses: pauses)
    let paused = pauses + "/downloads.agent.idle"
    #expect(await eventually { FileManager.default.fileExists(atPath: paused) })
    let start = try Child(
      [
        "downloads", "start", Self.group, server.url("/gen/300000?seed=41").absoluteString, "--to", "Downloads/i.bin",
        "--root", root.path,
      ], executable: "groupctl", environment: ["GROUPCONTAINER_DOWNLOAD_AGENT": "/bin/true"])
    #expect(await start.exit() == 0, "\(start.errors.text)")
    let id = try #require(start.output.first)
    try FileManager.default.removeItem(atPath: paused)
    #expect(await agent.exit() == 0, "stderr: \(agent.errors.text)")
    let store = try DownloadStore(container: container)
    #expect(store.task(id)?.state == .completed, "\(String(describing: store.task(id)))")
    #expect(store.task(id)?.succeeded == true)
    #expect(FileServer.mismatch(Self.content(container, "Downloads/i.bin"), size: 300_000, seed: 41) == nil)
  }

  /// A task created while the agent is up with nothing to do is started at the session's post, not by a listing of
  /// `tasks/` that would find it anyway (an idle agent lists only every 30 s: at 10,000 finished tasks, every 2 s cost
  /// 15–20 ms of CPU a second). The agent runs without those listings (`GROUP_CONTAINER_AGENT_NO_FALLBACK_LISTING`):
  /// the first task is found by its start-up scan, the second only by its post.
  /// Mutant: scans and listings that ignore the requests' sequence (`listedSequence != sequence` dropped from
  /// `scanDue` and `activeTaskIDs`): the second task is never started.
  @Test func aTaskPostedToAnIdleAgentIsRun() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    func request(_ n: Int) -> TaskRequest {
      TaskRequest(
        id: DownloadRecordFormat.newTaskID(), session: "s", taskIdentifier: n,
        url: server.url("/gen/1000?seed=\(50 + n)").absoluteString, destination: "Downloads/p\(n)",
        created: Int64(Date().timeIntervalSince1970 * 1e9))
    }
    func finished(_ id: String) -> Bool { store.status(id).map { $0.phase.isFinal && $0.eventsQueued } ?? false }
    let first = request(1)
    try store.create(first)
    let agent = try Child(
      ["--identifier", Self.group, "--root", root.path, "--idle", "600"], executable: "gc-download-agent",
      environment: [DownloadAgent.noFallbackListingVariable: "1"])
    #expect(await eventually { finished(first.id) }, "stderr: \(agent.errors.text)")
    let second = request(2)
    try store.create(second)
    #expect(await eventually { finished(second.id) }, "stderr: \(agent.errors.text)")
    #expect(FileServer.mismatch(Self.content(container, "Downloads/p2"), size: 1000, seed: 52) == nil)
    #expect(await agent.stop(SIGTERM) == 0)
  }

  /// The launcher starts the agent with its malloc tunables (`AgentLauncher.mallocTunables`: no per-thread caches of
  /// freed blocks, which glibc reads only at a program's start), unless the environment has tunables of its own: the
  /// "agent" here is a script that writes its environment into the container's parent. That the apps the agent
  /// relaunches start without them: `BackgroundSessionTests.relaunchesTheRegisteredApp`.
  /// Mutant: the launcher without the tunables: the environment lacks them.
  @Test func theLauncherStartsTheAgentWithItsMallocTunables() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let store = try DownloadStore(container: container)
    let script = root.path + "/fake-agent"
    let dump = root.path + "/agent-environment"
    try writeScript("#!/bin/sh\nenv > '\(dump).part' && mv '\(dump).part' '\(dump)'\n", to: script)
    try AgentLauncher.ensureRunning(store: store, executable: URL(fileURLWithPath: script), idleTimeout: .seconds(1))
    #expect(await eventually { FileManager.default.fileExists(atPath: dump) })
    let lines = try String(contentsOfFile: dump, encoding: .utf8).split(separator: "\n").map(String.init)
    let expected = ProcessInfo.processInfo.environment["GLIBC_TUNABLES"] ?? AgentLauncher.mallocTunables
    #expect(lines.filter { $0.hasPrefix("GLIBC_TUNABLES=") } == ["GLIBC_TUNABLES=\(expected)"])
  }

  /// After its idle release an agent acts on nothing: another agent may hold the lock by then. The agent is
  /// stopped just after releasing (pause point `downloads.agent.released`); the test takes the lock, as another
  /// agent would, and writes a task. Let go, the agent sees work, cannot take the lock and exits without touching
  /// the task: no status written, no request sent.
  /// Mutant: the old idle exit — `pass()` after the release instead of the read-only `hasWork()`, with `record`
  /// not refusing while released (`stillTheAgent` true when `.released`): the released agent starts the task.
  @Test func anAgentThatReleasedItsLockActsOnNothing() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let pauses = root.path + "/pauses"
    try FileManager.default.createDirectory(atPath: pauses, withIntermediateDirectories: false)
    let agent = try Self.agent(root, idle: "0.3", pause: "downloads.agent.released", pauses: pauses)
    let paused = pauses + "/downloads.agent.released"
    #expect(await eventually { FileManager.default.fileExists(atPath: paused) })
    let lock = try store.openLock(DownloadStore.agentLockPath)
    #expect(try lock.lock(.exclusive, nonBlocking: true))
    let target = "/gen/1000?seed=43"
    let id = DownloadRecordFormat.newTaskID()
    try store.create(
      TaskRequest(
        id: id, session: "s", taskIdentifier: 1, url: server.url(target).absoluteString, destination: "Downloads/r",
        created: Int64(Date().timeIntervalSince1970 * 1e9)))
    try FileManager.default.removeItem(atPath: paused)
    #expect(await agent.exit() == 0, "stderr: \(agent.errors.text)")
    #expect(store.status(id) == nil)
    #expect(try await server.stats(for: target).requests == 0)
  }

  /// A running agent reads a task's status file when its listing of `tasks/` shows one, and spares a missing-file
  /// read per task when it shows none (a burst's new tasks): a task that arrives with a status already written (here
  /// `suspended`) keeps it. A task created after it, and finished, proves the agent looked. Mutant: the status of a
  /// task not remembered taken as none once a listing exists (`DownloadAgent.status` ignoring the listing) — the
  /// suspended task was downloaded.
  @Test func aListedStatusIsReadAndAnUnlistedOneIsNot() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let now = Int64(Date().timeIntervalSince1970 * 1e9)
    func request(_ i: Int, _ target: String) -> TaskRequest {
      TaskRequest(
        id: DownloadRecordFormat.newTaskID(), session: "s", taskIdentifier: i, url: server.url(target).absoluteString,
        destination: "Downloads/\(i)", created: now)
    }
    let agent = try Self.agent(root, idle: "600")
    defer { agent.kill() }
    let first = request(1, "/gen/1000?seed=1")
    try store.create(first)
    #expect(await eventually { store.status(first.id)?.phase == .completed }, "stderr: \(agent.errors.text)")
    // The agent has listed `tasks/` and runs on: a task arrives with its status written first.
    let held = request(2, "/gen/1000?seed=2")
    try store.write(TaskStatus(phase: .suspended, updated: now), for: held.id, durable: false)
    try store.create(held)
    let last = request(3, "/gen/1000?seed=3")
    try store.create(last)
    #expect(await eventually { store.status(last.id)?.phase == .completed }, "stderr: \(agent.errors.text)")
    #expect(try await server.stats(for: "/gen/1000?seed=2").requests == 0)
    #expect(store.status(held.id)?.phase == .suspended)
  }
}
