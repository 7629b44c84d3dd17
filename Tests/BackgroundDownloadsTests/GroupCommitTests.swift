import BackgroundDownloads
import Crypto
import FileCoordination
import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The agent's group commit across real processes (issue #37): the agent is killed (SIGKILL by its own fault point)
/// just before a group commit of finished tasks, or just after it is durable and before its task and event files are
/// written; then an attached session starts a new agent and receives everything.
///
/// Checked at the kill: every task anything visible calls finished (a final status, a queued event) is in a durable
/// commit, and every task of a durable commit has its file published with the right SHA-256. Checked at the end:
/// every task completed once, its file right, exactly one `finished` and one `completed` event each (nothing lost,
/// nothing doubled), and a task whose outcome was committed was not fetched again.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - the visible files written before the commit (`store.materialize` before `store.commit` in
///   `DownloadAgent.commitPending`): `aKilledGroupCommitLosesAndDoublesNothing("downloads.agent.committed")` —
///   finished tasks visible with no commit at the kill;
/// - no replay at the agent's start (`replayCommits` returning 0 at once): the same test — the committed tasks are
///   fetched a second time.
@Suite(.runSlot(.minutes(4)))
struct GroupCommitTests {
  static let group = "group.com.example.commit"

  static func sha256(_ bytes: [UInt8]) -> String {
    SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
  }

  static func content(_ container: GroupContainer, _ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: container.url.appendingPathComponent(path).path).map { [UInt8]($0) }
  }

  @Test(arguments: ["downloads.agent.before-commit", "downloads.agent.committed"])
  func aKilledGroupCommitLosesAndDoublesNothing(point: String) async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let count = 12
    let size = 40_000
    var expected: [String: (target: String, destination: String, sha: String, seed: UInt64)] = [:]
    for i in 0..<count {
      let id = DownloadRecordFormat.newTaskID()
      let seed = UInt64(500 + i)
      // Throttled: while the first tasks finish, others are still transferring when the agent dies.
      let target = "/gen/\(size)?seed=\(seed)&rate=\(100_000 + 20_000 * i)"
      let sha = Self.sha256(FileServer.expectedBytes(size: size, seed: seed))
      try store.create(
        TaskRequest(
          id: id, session: "s", taskIdentifier: i + 1, url: server.url(target).absoluteString,
          destination: "Downloads/\(i)", created: Int64(Date().timeIntervalSince1970 * 1e9), expectedSHA256: sha))
      expected[id] = (target, "Downloads/\(i)", sha, seed)
    }

    // The agent dies at its first group commit of finished tasks.
    let agent = try Child(
      ["--identifier", Self.group, "--root", root.path, "--idle", "30"], executable: "gc-download-agent",
      environment: ["GROUPCONTAINER_FAULT_POINT": point])
    _ = await agent.exit()
    #expect(agent.process.terminationReason == .uncaughtSignal, "stderr: \(agent.errors.text)")

    let committed = Dictionary(
      store.commits().flatMap(\.finals).map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
    if point == "downloads.agent.committed" {
      #expect(!committed.isEmpty, "the agent died after its first commit of outcomes: one is durable")
    } else {
      #expect(committed.isEmpty)
    }
    let queued = store.queuedEvents("s")
    for (id, task) in expected {
      let visible = store.status(id)?.phase.isFinal == true || queued.contains { $0.taskID == id }
      if visible {
        #expect(committed[id] != nil, "task \(id) is visible as finished, but no durable commit holds it")
      }
      if committed[id] != nil {
        let bytes = Self.content(container, task.destination)
        #expect(bytes.map(Self.sha256) == task.sha, "the committed task \(id) has its file published")
      }
    }

    // An attached session starts a new agent: it writes what the commit promised and runs the rest.
    var configuration = DownloadSession.Configuration()
    configuration.agentIdleTimeout = .seconds(2)
    let session = try DownloadSession(identifier: "s", container: container, configuration: configuration)
    defer { session.invalidate() }
    let received = Mutex<[String]>([])
    let collector = Task {
      for await event in session.events {
        switch event {
        case .didFinishDownloadingTo(let task, _, _): received.withLock { $0.append("finished \(task.id)") }
        case .didCompleteWithError(let task, let error, _):
          received.withLock { $0.append("completed \(task.id) \(error.map { "\($0)" } ?? "-")") }
        default: break
        }
      }
    }
    #expect(await eventually { received.withLock { $0.filter { $0.hasPrefix("completed ") }.count } >= count })
    // Until the agent has exited idle: a second event for any task would have been queued by then.
    #expect(await eventually { !store.isHeld(DownloadStore.agentLockPath) })
    #expect(await eventually { store.queuedEvents("s").isEmpty })
    session.invalidate()
    collector.cancel()
    let events = received.withLock { $0 }
    for (id, task) in expected {
      #expect(events.filter { $0 == "finished \(id)" }.count == 1, "one finished event for \(id): \(events)")
      #expect(events.filter { $0 == "completed \(id) -" }.count == 1, "one completed event for \(id): \(events)")
      #expect(store.task(id)?.succeeded == true)
      #expect(FileServer.mismatch(Self.content(container, task.destination), size: size, seed: task.seed) == nil)
      #expect(Self.content(container, task.destination).map(Self.sha256) == task.sha)
      if committed[id] != nil {
        let stats = try await server.stats(for: task.target)
        #expect(stats.requests == 1, "task \(id) was committed before the kill: not fetched again")
      }
    }
    #expect(events.count == 2 * count, "\(events)")
  }
}
