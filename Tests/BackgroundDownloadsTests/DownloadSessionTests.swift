import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

/// The client side of background downloads and the agent's process rules, with real processes.
///
/// Mutants this suite catches: the attach lock not taken (`oneProcessPerSession`); no second try of an attach lock
/// no process says it holds (`attachesThoughALockCopyLingers`); the agent lock not taken or
/// taken blocking (`theAgentIsASingleton`); the agent not watching its container (`theAgentExitsWhenItsContainer
/// IsRemoved`); a record decoder that skips a check (`damagedRecordsAreRefused`); a FIFO read with a blocking open
/// (`plantedFIFOsNeverHang`).
@Suite("Download sessions", .runSlot(.minutes(10)))
struct DownloadSessionTests {
  @Test("session identifiers name directories: the rule is checked")
  func sessionIdentifierRule() throws {
    let root = try TestRoot()
    let container = try root.container()
    for bad in ["", ".hidden", "a/b", "a b", "café", String(repeating: "x", count: 129), "..", "a\u{0}b"] {
      #expect(throws: DownloadError.self, "\(bad.debugDescription)") {
        _ = try DownloadSession(identifier: bad, container: container)
      }
    }
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    let good = try DownloadSession(
      identifier: "com.example.app.bg-1_2", container: container, configuration: configuration)
    good.invalidate()
  }

  @Test("odd schemes and destinations leaving the container are refused, and nothing is written")
  func refusedRequests() throws {
    let root = try TestRoot()
    let container = try root.container()
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    let session = try DownloadSession(identifier: "s", container: container, configuration: configuration)
    defer { session.invalidate() }
    for url in [
      "ftp://127.0.0.1/x", "file:///etc/passwd", "javascript:alert(1)", "data:text/plain,hi", "gopher://h/x",
      "http:///nohost", "mailto:a@b.c",
    ] {
      #expect(throws: DownloadError.unsupportedURL(url), "\(url)") {
        _ = try session.download(from: URL(string: url)!)
      }
    }
    for destination in ["../x", "/etc/x", ".coordination/x", "Downloads/", "", "a//b", "Downloads/../../x"] {
      #expect(throws: DownloadError.self, "\(destination)") {
        _ = try session.download(from: URL(string: "http://127.0.0.1:9/x")!, to: destination)
      }
    }
    #expect(throws: DownloadError.self) {
      _ = try session.download(from: URL(string: "http://127.0.0.1:9/x")!, expectedSHA256: "abc")
    }
    #expect(session.allTasks().isEmpty)
    let tasks = try FileManager.default.contentsOfDirectory(
      atPath: container.url.appendingPathComponent(".coordination/downloads/tasks").path)
    #expect(tasks.isEmpty)
  }

  @Test("one process per session identifier: a second gets sessionInUse naming the first", .runSlot(.minutes(3)))
  func oneProcessPerSession() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let other = try Child(.dlAttach(session: "shared", count: 1000), root: root.path, group: container.identifier)
    await other.line { $0 == "attached" }
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    #expect(throws: DownloadError.sessionInUse("shared", pid: other.process.processIdentifier)) {
      _ = try DownloadSession(identifier: "shared", container: container, configuration: configuration)
    }
    // It announced this build's event format: its events go in batch files (EventFormatHandshake).
    let store = try DownloadStore(container: container)
    #expect(store.eventFormat(for: "shared") == EventFormatHandshake.currentVersion)
    // Another identifier is free.
    try DownloadSession(identifier: "mine", container: container, configuration: configuration).invalidate()
    #expect(store.eventFormat(for: "mine") == 1)
    other.kill()
    // The kernel released the dead process's lock: the identifier is free again, its stale line not believed.
    #expect(store.eventFormat(for: "shared") == 1)
    let again = try DownloadSession(identifier: "shared", container: container, configuration: configuration)
    #expect(store.eventFormat(for: "shared") == 3)
    again.invalidate()
    #expect(store.eventFormat(for: "shared") == 1)
  }

  /// A session made again right after `invalidate()` attaches, though its attach lock stays held a moment by a
  /// descriptor it does not own: a child that another thread is spawning keeps a copy of every descriptor until it
  /// execs (the attach failed so with `sessionInUse(pid: 0)` in a CI run). Emulated by a second open of the lock,
  /// held 100 ms. Mutant: no second try (`sessionInUse` at once).
  @Test("a session attaches again at once though a copy of its lock lingers a moment")
  func attachesThoughALockCopyLingers() throws {
    let root = try TestRoot()
    let container = try root.container()
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    try DownloadSession(identifier: "s", container: container, configuration: configuration).invalidate()
    let copy = DescriptorBox(try DownloadStore(container: container).openLock(DownloadStore.attachLockPath("s")))
    #expect(try copy.fd.lock(.exclusive, nonBlocking: true))
    let releaser = Thread {
      Thread.sleep(forTimeInterval: 0.1)
      copy.fd.unlock()
    }
    releaser.start()
    let again = try DownloadSession(identifier: "s", container: container, configuration: configuration)
    again.invalidate()
  }

  @Test("records round-trip, and damaged ones are refused with a reason")
  func damagedRecordsAreRefused() throws {
    let id = DownloadRecordFormat.newTaskID()
    #expect(DownloadRecordFormat.isTaskID(id))
    let request = TaskRequest(
      id: id, session: "s", taskIdentifier: 3, url: "http://h/x", destination: "Downloads/x", created: 42,
      expectedSHA256: String(repeating: "a", count: 64), expectedLength: 10, priority: 0.75, connectionsPerHost: 2)
    #expect(try DownloadRecordFormat.decodeRequest(DownloadRecordFormat.encode(request)) == request)
    let status = TaskStatus(
      phase: .failed, resume: ResumeState(receivedBytes: 5, expectedBytes: 10, entityTag: "\"e\"", durableBytes: 4),
      attempts: 2, httpStatus: 404, error: .httpStatus(404), appliedControl: 7, eventsQueued: true, updated: 9,
      finished: 10)
    #expect(try DownloadRecordFormat.decodeStatus(DownloadRecordFormat.encode(status)) == status)
    for error in [
      DownloadError.diskFull(path: "/x"), .checksumMismatch(expected: "a", actual: "b"), .stalled(seconds: 3),
      .network("reset"), .cancelled, .lengthMismatch(expected: 1, actual: 2), .protocolViolation("p"),
    ] {
      let event = EventRecord(sequence: 1, taskID: id, kind: .completed, error: error, httpStatus: 200)
      #expect(try DownloadRecordFormat.decodeEvent(DownloadRecordFormat.encode(event)) == event)
    }
    // A finished download's events go in one file; an older reader (`decodeEvent`) sees the finish alone.
    let finished = EventRecord(sequence: 10, taskID: id, kind: .finished, location: "Downloads/x", httpStatus: 200)
    let completed = EventRecord(sequence: 11, taskID: id, kind: .completed, httpStatus: 200)
    let files = DownloadRecordFormat.eventFiles([finished, completed], combining: true)
    #expect(files.map(\.name) == [finished.fileName])
    let read = try DownloadRecordFormat.decodeEvents(files[0].bytes)
    #expect(read.map(\.id) == [finished.id, completed.id])
    #expect(read.map(\.sequence) == [10, 11])
    #expect(read.map(\.file) == [finished.fileName, finished.fileName])
    #expect(read[0].storedIn == nil && read[1].error == nil && read[1].httpStatus == 200)
    #expect(try DownloadRecordFormat.decodeEvent(files[0].bytes) == finished)
    // A failure's completion, or one unlike its finish, keeps a file of its own.
    var failed = completed
    failed.error = .httpStatus(500)
    #expect(DownloadRecordFormat.eventFiles([finished, failed], combining: true).count == 2)
    #expect(try DownloadRecordFormat.decodeEvents(DownloadRecordFormat.encode(failed)) == [failed])
    // The attach lock's announcement: an older reader takes the pid from its first line; no `events` line is 1.
    let announced = EventFormatHandshake.announcement(pid: 4242, readVersion: 2)
    #expect(String(decoding: announced, as: UTF8.self).split(separator: "\n").first == "4242")
    #expect(EventFormatHandshake.announcedVersion(announced) == 2)
    for old in ["4242\n", "", "4242\nevents x\n", "4242\nevents 0\n", "events 2\n"] {
      #expect(EventFormatHandshake.announcedVersion(Array(old.utf8)) == 1, "\(old)")
    }
    // For a reader that did not announce format 2, a file each (EventFormatHandshake).
    #expect(
      DownloadRecordFormat.eventFiles([finished, completed], combining: false).map(\.name)
        == [finished.fileName, completed.fileName])
    let bytes = DownloadRecordFormat.encode(request)
    // Every truncation is refused (never a partial record).
    for cut in stride(from: 0, to: bytes.count, by: 7) {
      #expect(throws: DownloadRecordFormat.Invalid.self) {
        _ = try DownloadRecordFormat.decodeRequest(Array(bytes[..<cut]))
      }
    }
    // Fields that would lead somewhere else are checked.
    var escaping = request
    escaping.destination = "../outside"
    #expect(throws: DownloadRecordFormat.Invalid.self) {
      _ = try DownloadRecordFormat.decodeRequest(DownloadRecordFormat.encode(escaping))
    }
    var privateDir = request
    privateDir.destination = ".coordination/x"
    #expect(throws: DownloadRecordFormat.Invalid.self) {
      _ = try DownloadRecordFormat.decodeRequest(DownloadRecordFormat.encode(privateDir))
    }
    var badSession = request
    badSession.session = "../s"
    #expect(throws: DownloadRecordFormat.Invalid.self) {
      _ = try DownloadRecordFormat.decodeRequest(DownloadRecordFormat.encode(badSession))
    }
    let relative = RelaunchRecord(executable: "bin/app", arguments: [])
    #expect(throws: DownloadRecordFormat.Invalid.self) {
      _ = try DownloadRecordFormat.decodeRelaunch(DownloadRecordFormat.encode(relative))
    }
  }

  @Test("FIFOs, directories and symlinks planted as records are damaged records, never a hang", .runSlot(.minutes(3)))
  func plantedFIFOsNeverHang() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let store = try DownloadStore(container: container)
    let tasks = container.url.appendingPathComponent(".coordination/downloads/tasks").path
    let id = DownloadRecordFormat.newTaskID()
    #expect(mkfifo(tasks + "/\(id).task", 0o600) == 0)
    let id2 = DownloadRecordFormat.newTaskID()
    try FileManager.default.createDirectory(atPath: tasks + "/\(id2).task", withIntermediateDirectories: false)
    let id3 = DownloadRecordFormat.newTaskID()
    try FileManager.default.createSymbolicLink(atPath: tasks + "/\(id3).task", withDestinationPath: "/etc/passwd")
    let found = await expectCompletes("reading planted records") {
      [store.task(id), store.task(id2), store.task(id3)].compactMap { $0 }.count + store.tasks().count
    }
    #expect(found == 0)
    // A FIFO among a session's events is dropped; the session still attaches.
    try store.makeSessionDirectories("s")
    let events = container.url.appendingPathComponent(".coordination/downloads/sessions/s/events").path
    #expect(mkfifo(events + "/00000000000000000001-\(id)-completed.event", 0o600) == 0)
    let queued = await expectCompletes("reading a planted event") { store.queuedEvents("s").count }
    #expect(queued == 0)
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    try DownloadSession(identifier: "s", container: container, configuration: configuration).invalidate()
  }

  @Test("the agent is a singleton per container: a second one exits 3", .runSlot(.minutes(3)))
  func theAgentIsASingleton() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let arguments = ["--identifier", container.identifier, "--root", root.path, "--idle", "30"]
    let first = try Child(arguments, executable: "gc-download-agent")
    let store = try DownloadStore(container: container)
    #expect(await eventually { store.isHeld(DownloadStore.agentLockPath) })
    // The holder writes its pid just after it takes the flock: a read between the two finds the file empty.
    #expect(await eventually { store.holderPID(DownloadStore.agentLockPath) == first.process.processIdentifier })
    let second = try Child(arguments, executable: "gc-download-agent")
    #expect(await second.exit() == 3)
    #expect(first.process.isRunning)
    // SIGTERM ends the first cleanly.
    await first.stop(SIGTERM)
    #expect(first.process.terminationStatus == 0)
    #expect(!store.isHeld(DownloadStore.agentLockPath))
  }

  @Test("the agent exits when idle, and when its container is removed", .runSlot(.minutes(3)))
  func theAgentExitsWhenIdleOrRemoved() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let idle = try Child(
      ["--identifier", container.identifier, "--root", root.path, "--idle", "0.3"], executable: "gc-download-agent")
    #expect(await idle.exit() == 0)
    let root2 = try TestRoot()
    let container2 = try root2.container()
    let forever = try Child(
      ["--identifier", container2.identifier, "--root", root2.path, "--idle", "600"], executable: "gc-download-agent")
    let store = try DownloadStore(container: container2)
    #expect(await eventually { store.isHeld(DownloadStore.agentLockPath) })
    try await removeTree(container2.url.path)
    // It failed now and then on a loaded machine: an agent that found agent.lock removed mid-`rm -rf` and could not
    // take the name again took itself for deposed and exited 3 (AgentLifecycleTests.anAgentWhoseContainerIsRemoved…).
    let code = await forever.exit()
    #expect(code == 0, "stderr: \(forever.errors.text)")
    if code != 0 { forever.kill() }
  }
}
