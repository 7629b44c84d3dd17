import BackgroundDownloads
import DownloadAgent
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// The agent's HTTP client shut down when idle (`IdleClient`, issue #37 item 2), across real processes: an agent
/// whose idle delay the test hook shortens to a fraction of a second (`GROUP_CONTAINER_AGENT_CLIENT_IDLE_MS`) runs a
/// task after its client was shut down, and a transfer that lasts many idle delays to its end on one request.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - `shutDownIfIdle` without its lease guard (`s.leases == 0`): both tests — the client is shut under the running
///   transfer, whose attempts then all fail with `HTTPClientError.alreadyShutdown` (the engine keeps the client it
///   was given), and nothing is published.
@Suite(.runSlot(.minutes(4))) struct AgentIdleClientTests {
  static let group = "group.com.example.idleclient"

  static func agent(_ root: TestRoot, clientIdleMilliseconds: Int) throws -> Child {
    try Child(
      ["--identifier", group, "--root", root.path, "--idle", "600"], executable: "gc-download-agent",
      environment: [IdleClient.idleDelayVariable: String(clientIdleMilliseconds)])
  }

  static func create(_ store: DownloadStore, _ url: URL, _ destination: String, _ number: Int) throws -> String {
    let id = DownloadRecordFormat.newTaskID()
    try store.create(
      TaskRequest(
        id: id, session: "s", taskIdentifier: number, url: url.absoluteString, destination: destination,
        created: Int64(Date().timeIntervalSince1970 * 1e9)))
    return id
  }

  static func content(_ container: GroupContainer, _ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: container.url.appendingPathComponent(path).path).map { [UInt8]($0) }
  }

  /// A task, then the client shut down (the agent says so), then a second task: it is run on a new client and its
  /// file delivered; the agent still ends gracefully on SIGTERM.
  @Test func aTaskAfterTheClientWasShutDownIsDelivered() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let store = try DownloadStore(container: container)
    let server = try await FileServer.start()
    let agent = try Self.agent(root, clientIdleMilliseconds: 200)
    let first = try Self.create(store, server.url("/gen/1024?seed=1"), "Downloads/first", 1)
    #expect(await eventually { store.status(first)?.phase == .completed }, "stderr: \(agent.errors.text)")
    #expect(
      await eventually { agent.errors.text.contains("HTTP client shut down") },
      "the idle client was never shut down; stderr: \(agent.errors.text)")
    let second = try Self.create(store, server.url("/gen/2048?seed=2"), "Downloads/second", 2)
    #expect(await eventually { store.status(second)?.phase == .completed }, "stderr: \(agent.errors.text)")
    #expect(FileServer.mismatch(Self.content(container, "Downloads/first"), size: 1024, seed: 1) == nil)
    #expect(FileServer.mismatch(Self.content(container, "Downloads/second"), size: 2048, seed: 2) == nil)
    #expect(await agent.stop(SIGTERM) == 0, "stderr: \(agent.errors.text)")
  }

  /// A transfer throttled to last ~2 s, twenty idle delays of its client: it ends published, on the one request it
  /// started with (a client shut under it cuts it).
  @Test func aTransferLongerThanTheIdleDelayIsNotCut() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let store = try DownloadStore(container: container)
    let server = try await FileServer.start()
    let agent = try Self.agent(root, clientIdleMilliseconds: 100)
    let target = "/gen/65536?seed=3&rate=32768"
    let id = try Self.create(store, server.url(target), "Downloads/slow", 1)
    #expect(await eventually { store.status(id)?.phase.isFinal == true }, "stderr: \(agent.errors.text)")
    #expect(store.status(id)?.phase == .completed, "stderr: \(agent.errors.text)")
    #expect(try await server.stats(for: target).requests == 1, "stderr: \(agent.errors.text)")
    #expect(FileServer.mismatch(Self.content(container, "Downloads/slow"), size: 65536, seed: 3) == nil)
    // And the client goes once the transfer ended.
    #expect(await eventually { agent.errors.text.contains("HTTP client shut down") }, "stderr: \(agent.errors.text)")
    #expect(await agent.stop(SIGTERM) == 0, "stderr: \(agent.errors.text)")
  }
}
