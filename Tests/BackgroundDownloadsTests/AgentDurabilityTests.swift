import BackgroundDownloads
import FileCoordination
import Foundation
import Logging
import SystemLayer
import TestSupport
import Testing

import DownloadAgent

/// The agent's group commits, watched call by call (an agent run in this process under `SyscallRecorder`): requests
/// that sessions wrote without fsync are made durable by the agent's next look, one directory fsync for all of
/// them; a task's events are each fsynced, then their directory once.
///
/// Mutants this suite catches (each run once and seen failing):
/// - the agent never fsyncs new requests (`makeDurable` not called): `newRequestsAndEventsAreMadeDurableInGroups`;
/// - the events' directory fsync left out of `DownloadStore.queue`: the same test;
/// - `.powerLossOnceDirectorySynced` not fsyncing the file (AtomicReplace): the same test.
///
/// It also caught, in a loaded run, a pass queueing a task's events a second time while `finish` was still
/// writing them (8 event fsyncs instead of 6): the pass now leaves finishing tasks alone. That race is timing
/// dependent: the test fails only when it hits.
@Suite(.runSlot(.minutes(3)))
struct AgentDurabilityTests {
  @Test func newRequestsAndEventsAreMadeDurableInGroups() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let ids = (0..<3).map { _ in (0..<32).map { _ in String("0123456789abcdef".randomElement()!) }.joined() }
    for (i, id) in ids.enumerated() {
      try store.create(
        TaskRequest(
          id: id, session: "s", taskIdentifier: i + 1, url: server.url("/gen/1000?seed=\(i)").absoluteString,
          destination: "Downloads/\(i)", created: Int64(Date().timeIntervalSince1970 * 1e9)))
    }
    var settings = DownloadAgent.Settings()
    settings.idleTimeout = .milliseconds(300)
    let agent = try DownloadAgent(container: container, settings: settings, logger: Logger(label: "agent-test"))
    let log = SyscallRecorder.Log()
    let exit = await SyscallRecorder.$current.withValue(log) { await agent.run() }
    #expect(exit == 0)
    for id in ids { #expect(store.status(id)?.phase == .completed) }

    let syncs = log.calls.filter { $0.call == .fsync }.map(\.path)
    let tasks = container.path + "/.coordination/downloads/tasks"
    let requestSyncs = ids.map { syncs.firstIndex(of: "\(tasks)/\($0).task") }
    #expect(requestSyncs.allSatisfy { $0 != nil }, "every new request fsynced by the agent: \(syncs)")
    if let last = requestSyncs.compactMap({ $0 }).max() {
      #expect(syncs[last...].contains(tasks), "the tasks directory fsynced after the requests: \(syncs)")
    }

    // Events: per task two files (finished, completed), each fsynced, then the directory once.
    let events = container.path + "/.coordination/downloads/sessions/s/events"
    let eventFileSyncs = syncs.indices.filter { syncs[$0].hasPrefix(events + "/") }
    let eventDirectorySyncs = syncs.indices.filter { syncs[$0] == events }
    #expect(eventFileSyncs.count == 2 * ids.count, "\(syncs)")
    #expect(eventDirectorySyncs.count == ids.count, "one events-directory fsync per task: \(syncs)")
    if let lastFile = eventFileSyncs.max(), let lastDirectory = eventDirectorySyncs.max() {
      #expect(lastFile < lastDirectory, "the directory is fsynced after the files: \(syncs)")
    }
    #expect(store.queuedEvents("s").count == 2 * ids.count)
  }
}
