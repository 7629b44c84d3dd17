import BackgroundDownloads
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import SystemLayer
import TestSupport
import Testing

/// The agent's group commits, watched call by call (an agent run in this process under `SyscallRecorder`): requests
/// that sessions wrote without fsync are made durable by the agent's next look in one commit file; finished tasks'
/// outcomes are made durable in group commits (a commit file fsynced, renamed, its directory fsynced), and only then
/// are their event and status files written — without fsync of their own. Each published file keeps its fsync and its
/// directory's fsync.
///
/// Mutants this suite catches (each run once and seen failing):
/// - the visible files written before the commit (`materialize` before `commit` in `DownloadAgent.commitPending`):
///   `outcomesAreCommittedInGroupsBeforeTheyAreVisible`;
/// - a commit written without fsync (`.processCrash` in `DownloadStore.commit`): the same test;
/// - the agent never committing new requests (`commitRequests` not called): the same test;
/// - an fsync per status or event file again (`.powerLoss` in `materialize`): `fewerFsyncsPerDownload`.
@Suite(.runSlot(.minutes(3)))
struct AgentDurabilityTests {
  /// Runs an agent in this process over `count` small tasks created beforehand; returns the calls it made.
  static func run(count: Int) async throws -> (
    calls: [SyscallRecorder.Entry], ids: [String], store: DownloadStore, container: GroupContainer, root: TestRoot
  ) {
    let root = try TestRoot()
    let container = try root.container()
    let server = try await FileServer.start()
    let store = try DownloadStore(container: container)
    let ids = (0..<count).map { _ in DownloadRecordFormat.newTaskID() }
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
    return (log.calls, ids, store, container, root)
  }

  @Test func outcomesAreCommittedInGroupsBeforeTheyAreVisible() async throws {
    let (calls, ids, store, container, root) = try await Self.run(count: 4)
    defer { withExtendedLifetime(root) {} }  // the container lives until the checks are done
    let downloads = container.path + "/.coordination/downloads"
    let commits = downloads + "/commits"
    let events = downloads + "/sessions/s/events"
    let tasks = downloads + "/tasks"
    func index(of call: SyscallRecorder.Call, _ path: String, after start: Int = 0) -> Int? {
      calls.indices.first { $0 >= start && calls[$0].call == call && calls[$0].path == path }
    }
    let records = store.commits()
    // The requests: all created before the agent started, so its first look commits them together.
    let requestCommits = records.filter { !$0.requests.isEmpty }
    #expect(Set(requestCommits.flatMap(\.requests).map(\.id)) == Set(ids))
    #expect(requestCommits.count == 1, "one commit for the requests the first pass found")
    for id in ids {
      // The commit holding the task's outcome: its file fsynced before its rename, its directory after.
      let record = try #require(records.first { $0.finals.contains { $0.id == id } }, "no commit holds \(id)")
      let renamed = try #require(index(of: .rename, commits + "/" + record.fileName), "\(calls)")
      // (Its temp file, staged or beside it, repeats its name.)
      #expect(
        calls[..<renamed].contains {
          $0.call == .fsync && $0.path.contains(AtomicReplace.temporaryPrefix) && $0.path.contains(record.fileName)
        }, "the commit file is fsynced before its rename")
      let directorySynced = try #require(
        index(of: .fsync, commits, after: renamed), "commits/ fsynced after the rename")
      // Nothing visible says "finished" before that.
      let firstEvent = calls.indices.first {
        calls[$0].call == .rename && calls[$0].path.hasPrefix(events + "/") && calls[$0].path.contains("-\(id)-")
      }
      let eventIndex = try #require(firstEvent, "events of \(id) written")
      #expect(eventIndex > directorySynced, "the events of \(id) are written after its commit is durable")
      let lastStatus = calls.indices.last { calls[$0].call == .rename && calls[$0].path == "\(tasks)/\(id).status" }
      #expect((lastStatus ?? 0) > directorySynced, "the final status of \(id) is written after its commit is durable")
    }
    #expect(store.queuedEvents("s").count == 2 * ids.count)
  }

  /// Syscalls per download, counted (no timing): 8 fsyncs per small download before the group commit; now the
  /// published file's 2, plus a share of the commits (at most one commit of outcomes per download, and one of
  /// requests per pass).
  @Test func fewerFsyncsPerDownload() async throws {
    let count = 8
    let (calls, _, store, container, root) = try await Self.run(count: count)
    defer { withExtendedLifetime(root) {} }
    let downloads = container.path + "/.coordination/downloads"
    let syncs = calls.filter { $0.call == .fsync }.map(\.path)
    // The published files: each partial fsynced, then the destination directory — once per file at most: files
    // renamed into it during one of its fsyncs share the next (DirectorySyncs; its rule: DirectorySyncsTests).
    #expect(syncs.filter { $0.hasSuffix(".partial") }.count == count, "\(syncs)")
    #expect((1...count).contains(syncs.filter { $0 == container.path + "/Downloads" }.count), "\(syncs)")
    // The bookkeeping: commits only (a file and its directory each); no file a client reads is fsynced on its own.
    let bookkeeping = syncs.filter { !$0.hasSuffix(".partial") && $0 != container.path + "/Downloads" }
    #expect(
      bookkeeping.allSatisfy {
        $0 == downloads + "/commits" || ($0.contains(AtomicReplace.temporaryPrefix) && $0.hasSuffix(".commit"))
      }, "\(bookkeeping)")
    let commitFiles = store.commits().count
    #expect(commitFiles <= count + 1)
    #expect(bookkeeping.count == 2 * commitFiles, "\(bookkeeping)")
    #expect(syncs.count <= 4 * count + 2, "at most 4 fsyncs per download (was 8): \(syncs.count) for \(count)")
  }
}
