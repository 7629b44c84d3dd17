import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// `groupctl downloads`, run as a real binary: stdout, stderr, exit status and what is left in the container.
///
/// The tests without a server replace the agent by `/bin/true` (GROUPCONTAINER_DOWNLOAD_AGENT), so a task stays
/// where the test put it; the records an agent would write are written by the test through the store.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - `start` with `relaunch = .currentExecutable(arguments: [])`: groupctl registered as the session's app
///   (startRegistersNoApp).
/// - `events` without `acknowledge` after printing: the last event stays queued and `events` never ends
///   (eventsPrintsAndAcknowledges).
/// - `watch` not seeded with the listing: `--until-done` ends at once while tasks run
///   (watchUntilDoneEndsWhenEveryTaskCompleted).
/// - `wait` exiting 0 for a failed task (waitOnAFailedTaskExitsOneWithTheReason).
/// - task id validation skipped: a malformed id exits 2 "no task" instead of 64 with the rule (argumentErrors).
/// - the `checkWritable` call left out of `DownloadSession.download`: a destination in the Inbox or behind a link
///   leading out is accepted, and refused only after the whole transfer (unpublishableDestinationsAreRefusedAtStart).
@Suite(.runSlot(.minutes(3))) struct GroupctlDownloadsTests {
  let group = "group.com.example.downloads"
  /// No agent: sessions "start" /bin/true, so tasks stay queued.
  static let noAgent = ["GROUPCONTAINER_DOWNLOAD_AGENT": "/bin/true"]

  struct Run {
    var status: Int32?
    var out: [String]
    var err: String
    /// stdout's lines as JSON objects.
    var objects: [[String: Any]] {
      out.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }
  }

  func groupctl(_ arguments: [String], _ root: TestRoot, environment: [String: String] = noAgent) async throws -> Run {
    let child = try Child(
      ["downloads"] + arguments + ["--root", root.path], executable: "groupctl", environment: environment)
    let status = await child.exit()
    return Run(status: status, out: child.output, err: child.errors.text)
  }

  static func isTaskID(_ s: String) -> Bool {
    s.utf8.count == 32 && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
  }

  static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1e9) }

  /// A task as the agent would leave it: request, status and (optionally) queued events.
  @discardableResult
  func makeTask(
    _ store: DownloadStore, session: String, name: String, status: TaskStatus?, events: [EventRecord.Kind] = [],
    sequence: UInt64 = 1
  ) throws -> String {
    let id = DownloadRecordFormat.newTaskID()
    try store.create(
      TaskRequest(
        id: id, session: session, taskIdentifier: Int(sequence), url: "http://127.0.0.1:1/\(name)",
        destination: "Downloads/\(name)", created: Self.now))
    if let status { try store.write(status, for: id, durable: false) }
    for (offset, kind) in events.enumerated() {
      let error: DownloadError? = status?.error
      try store.queue(
        [
          EventRecord(
            sequence: sequence * 10 + UInt64(offset), taskID: id, kind: kind,
            location: kind == .finished ? "Downloads/\(name)" : nil, error: kind == .completed ? error : nil,
            httpStatus: status?.httpStatus)
        ], for: session)
    }
    return id
  }

  // MARK: Arguments and refusals

  @Test func argumentErrors() async throws {
    let root = try TestRoot()
    let malformed = try await groupctl(["wait", group, "xyz"], root)
    #expect(malformed.status == 64 && malformed.err.contains("is not a task id"), "\(malformed)")
    let priority = try await groupctl(["start", group, "http://127.0.0.1:1/a", "--priority", "2"], root)
    #expect(priority.status == 64 && priority.err.contains("--priority must be between 0 and 1"), "\(priority)")
    let missing = try await groupctl(["start", group], root)
    #expect(missing.status == 64 && missing.err.contains("Missing expected argument"), "\(missing)")
    let unknown = String(repeating: "ab", count: 16)
    for command in ["wait", "cancel", "suspend", "resume"] {
      let run = try await groupctl([command, group, unknown], root)
      #expect(run.status == 2 && run.err.contains("no download task '\(unknown)'"), "\(command): \(run)")
    }
    let session = try await groupctl(["start", group, "http://127.0.0.1:1/a", "--session", "a/b"], root)
    #expect(session.status == 1 && session.err.contains("session identifier 'a/b' is invalid"), "\(session)")
    let sha = try await groupctl(["start", group, "http://127.0.0.1:1/a", "--sha256", "abc"], root)
    #expect(sha.status == 1 && sha.err.contains("not a SHA-256"), "\(sha)")
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.status == 0 && list.out.isEmpty, "refused starts created tasks: \(list)")
  }

  @Test(arguments: ["ftp://127.0.0.1/x", "file:///etc/passwd", "javascript:alert(1)", "http:///nohost"])
  func oddSchemesAreRefused(url: String) async throws {
    let root = try TestRoot()
    let run = try await groupctl(["start", group, url], root)
    #expect(run.status == 1 && run.err.contains("only http and https URLs are"), "\(run)")
    #expect(run.out.isEmpty)
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.status == 0 && list.out.isEmpty, "\(list)")
    let downloads = try FileManager.default.contentsOfDirectory(atPath: try root.container(group).path + "/Downloads")
    #expect(downloads.isEmpty)
  }

  @Test(arguments: ["../x", "/etc/gc-cli-escape", ".coordination/x", "Documents/../../x", "Downloads/"])
  func escapingDestinationsAreRefused(destination: String) async throws {
    let root = try TestRoot()
    let run = try await groupctl(["start", group, "http://127.0.0.1:1/file.bin", "--to", destination], root)
    #expect(run.status == 1 && run.err.contains("download destination '\(destination)' is refused"), "\(run)")
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.status == 0 && list.out.isEmpty, "\(list)")
    let container = try root.container(group).path
    for path in [
      "/etc/gc-cli-escape", root.path + "/x", container + "/.coordination/x", container + "/Downloads/file.bin",
    ] {
      #expect(!FileManager.default.fileExists(atPath: path), "\(path) was created")
    }
  }

  // MARK: Tasks without an agent

  /// A destination the publish would refuse is refused when the task is created, with the reason, not after the
  /// whole transfer: in `Documents/Inbox/`, under a directory link leading out of the container, under a link
  /// into the Inbox. No task is created and the server is never asked.
  @Test(arguments: [
    ("Documents/Inbox/x.bin", "is in Documents/Inbox"), ("Out/x.bin", "leads outside the container"),
    ("ToInbox/x.bin", "is in Documents/Inbox"),
  ])
  func unpublishableDestinationsAreRefusedAtStart(destination: String, reason: String) async throws {
    let root = try TestRoot()
    let container = try root.container(group).path
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
    try FileManager.default.createDirectory(atPath: container + "/Documents/Inbox", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: container + "/Out", withDestinationPath: outside)
    try FileManager.default.createSymbolicLink(atPath: container + "/ToInbox", withDestinationPath: "Documents/Inbox")
    let server = try await FileServer.start()
    let target = "/gen/1000?seed=3"
    let run = try await groupctl(["start", group, server.url(target).absoluteString, "--to", destination], root)
    #expect(run.status == 1, "\(run)")
    #expect(run.err.contains("download destination '\(destination)' is refused") && run.err.contains(reason), "\(run)")
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.status == 0 && list.out.isEmpty, "\(list)")
    #expect(try await server.stats(for: target).requests == 0)
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
  }

  @Test func startRegistersNoApp() async throws {
    let root = try TestRoot()
    let started = try await groupctl(["start", group, "http://127.0.0.1:1/a.bin", "--session", "cli"], root)
    #expect(started.status == 0 && started.out.count == 1 && Self.isTaskID(started.out.first ?? ""), "\(started)")
    let session = try root.container(group).path + "/.coordination/downloads/sessions/cli"
    #expect(FileManager.default.fileExists(atPath: session + "/attach.lock"))
    #expect(!FileManager.default.fileExists(atPath: session + "/app"), "groupctl registered itself as the app")
    // Detached at exit: the session can be attached again at once.
    let again = try await groupctl(["start", group, "http://127.0.0.1:1/b.bin", "--session", "cli"], root)
    #expect(again.status == 0, "\(again)")
  }

  @Test func listShowsACreatedTask() async throws {
    let root = try TestRoot()
    let started = try await groupctl(
      [
        "start", group, "http://127.0.0.1:1/file.bin", "--to", "Documents/f.bin", "--length", "10", "--priority", "0.9",
      ],
      root)
    #expect(started.status == 0, "\(started)")
    let id = try #require(started.out.first)
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.status == 0 && list.out.count == 1, "\(list)")
    let task = try #require(list.objects.first)
    #expect(task["id"] as? String == id)
    #expect(task["session"] as? String == "groupctl")
    #expect(task["url"] as? String == "http://127.0.0.1:1/file.bin")
    #expect(task["state"] as? String == "waiting")
    #expect(task["received"] as? Int == 0)
    #expect(task["expected"] as? Int == 10)
    #expect(task["destination"] as? String == "Documents/f.bin")
    #expect(task["error"] == nil && task["http_status"] == nil)
    let table = try await groupctl(["list", group], root)
    #expect(table.status == 0 && table.out.count == 2, "\(table)")
    #expect(table.out.first?.hasPrefix("ID") == true)
    #expect(table.out.last?.contains(id) == true && table.out.last?.contains("Documents/f.bin") == true)
    let other = try await groupctl(["list", group, "--json", "--session", "other"], root)
    #expect(other.status == 0 && other.out.isEmpty, "\(other)")
  }

  @Test func controlsOfAQueuedTask() async throws {
    let root = try TestRoot()
    let id = try #require(try await groupctl(["start", group, "http://127.0.0.1:1/q.bin"], root).out.first)
    func state() async throws -> String? {
      try await groupctl(["list", group, "--json"], root).objects.first?["state"] as? String
    }
    let suspend = try await groupctl(["suspend", group, id], root)
    #expect(suspend.status == 0 && suspend.out == ["\(id) suspend requested"], "\(suspend)")
    #expect(try await state() == "suspended")
    let resume = try await groupctl(["resume", group, id], root)
    #expect(resume.status == 0, "\(resume)")
    #expect(try await state() == "waiting")
    let cancel = try await groupctl(["cancel", group, id], root)
    #expect(cancel.status == 0 && cancel.out == ["\(id) cancel requested"], "\(cancel)")
    // No agent here to apply it: the request is pending.
    #expect(try await state() == "canceling")
  }

  @Test func controlsOfACompletedTaskChangeNothing() async throws {
    let root = try TestRoot()
    let store = try DownloadStore(container: try root.container(group))
    let id = try makeTask(
      store, session: "app", name: "done.bin",
      status: TaskStatus(phase: .completed, resume: ResumeState(receivedBytes: 3, expectedBytes: 3), finished: Self.now)
    )
    let cancel = try await groupctl(["cancel", group, id], root)
    #expect(cancel.status == 0 && cancel.out.first?.contains("already completed (succeeded)") == true, "\(cancel)")
    #expect(store.control(id) == nil)
  }

  @Test func aSessionInUseIsSaidClearly() async throws {
    let root = try TestRoot()
    let holder = try Child(
      ["downloads", "events", group, "app", "--follow", "--root", root.path], executable: "groupctl",
      environment: Self.noAgent)
    await holder.line { $0.contains(#""kind":"ready""#) }
    let start = try await groupctl(["start", group, "http://127.0.0.1:1/a", "--session", "app"], root)
    #expect(start.status == 1, "\(start)")
    #expect(start.err.contains("session 'app' is attached by another live process (pid \(holder.pid))"), "\(start)")
    let list = try await groupctl(["list", group, "--json"], root)
    #expect(list.out.isEmpty, "a refused start created a task: \(list)")
    let events = try await groupctl(["events", group, "app"], root)
    #expect(events.status == 1 && events.err.contains("pid \(holder.pid)"), "\(events)")
    await holder.stop(SIGINT)
    let after = try await groupctl(["start", group, "http://127.0.0.1:1/a", "--session", "app"], root)
    #expect(after.status == 0, "the session stayed taken after its holder ended: \(after)")
  }

  // MARK: With the agent and gc-file-server

  @Test func startAndWaitDownloadFromTheServer() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let size = 300_000
    let started = try await groupctl(
      [
        "start", group, server.url("/gen/\(size)?seed=5").absoluteString, "--to", "Downloads/gen.bin", "--length",
        "\(size)",
      ], root, environment: [:])
    #expect(started.status == 0, "\(started)")
    let id = try #require(started.out.first)
    let waited = try await groupctl(["wait", group, id, "--timeout", "40"], root, environment: [:])
    let path = try root.container(group).path + "/Downloads/gen.bin"
    #expect(waited.status == 0 && waited.out == [path], "\(waited)")
    let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    #expect(bytes == FileServer.expectedBytes(size: size, seed: 5), "the file is not the generator's content")
    let task = try #require(try await groupctl(["list", group, "--json"], root).objects.first)
    #expect(task["state"] as? String == "completed" && task["error"] == nil)
    #expect(task["received"] as? Int == size && task["expected"] as? Int == size && task["http_status"] as? Int == 200)
    // The session's events, as the agent queued them: printed once, then acknowledged.
    let events = try await groupctl(["events", group, "groupctl"], root)
    #expect(events.status == 0, "\(events)")
    #expect(events.objects.map { $0["id"] as? String } == ["\(id).finished", "\(id).completed"], "\(events)")
    #expect(events.objects.first?["location"] as? String == path)
    let again = try await groupctl(["events", group, "groupctl"], root)
    #expect(again.status == 0 && again.out.isEmpty, "\(again)")
  }

  @Test func waitOnAFailedTaskExitsOneWithTheReason() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let id = try #require(
      try await groupctl(
        ["start", group, server.url("/gen/1000?seed=1&status=404").absoluteString], root, environment: [:]
      )
      .out.first)
    let waited = try await groupctl(["wait", group, id, "--timeout", "40"], root, environment: [:])
    #expect(waited.status == 1 && waited.out.isEmpty, "\(waited)")
    #expect(waited.err.contains("HTTP 404") && waited.err.contains("(HTTP status 404)"), "\(waited)")
    #expect(!FileManager.default.fileExists(atPath: try root.container(group).path + "/Downloads/1000"))
  }

  @Test func cancelStopsARunningDownload() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let target = "/gen/1000000?seed=2&stall=1000"
    let id = try #require(
      try await groupctl(
        ["start", group, server.url(target).absoluteString, "--to", "Documents/s.bin"], root,
        environment: [:]
      ).out.first)
    // Cancel once the transfer is under way (the server has counted the request).
    let deadline = Date().addingTimeInterval(Wait.condition)
    while await (try? server.stats(for: target).requests) ?? 0 == 0, Date() < deadline {
      try await Task.sleep(for: .milliseconds(50))
    }
    let cancel = try await groupctl(["cancel", group, id], root, environment: [:])
    #expect(cancel.status == 0, "\(cancel)")
    let waited = try await groupctl(["wait", group, id, "--timeout", "40"], root, environment: [:])
    // A cancel is reported as one, without the 200 the server had answered (issue #35: "failed … (HTTP 200)").
    #expect(waited.status == 1 && waited.err.contains("\(id) was cancelled"), "\(waited)")
    #expect(!waited.err.contains("failed") && !waited.err.contains("HTTP"), "\(waited)")
    let listed = try await groupctl(["list", group], root, environment: [:])
    let row = listed.out.first { $0.hasPrefix(id) } ?? ""
    #expect(row.contains(" cancelled ") && !row.contains("HTTP") && !row.contains("failed"), "\(listed)")
    #expect(!FileManager.default.fileExists(atPath: try root.container(group).path + "/Documents/s.bin"))
  }

  @Test func watchJSONUntilDoneFollowsARealDownload() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let size = 400_000
    let id = try #require(
      try await groupctl(
        ["start", group, server.url("/gen/\(size)?seed=3&rate=400000").absoluteString], root, environment: [:]
      ).out.first)
    let watch = try await groupctl(["watch", group, "--json", "--until-done"], root, environment: [:])
    #expect(watch.status == 0, "\(watch)")
    let mine = watch.objects.filter { $0["id"] as? String == id }
    #expect(mine.last?["state"] as? String == "completed" && mine.last?["received"] as? Int == size, "\(watch)")
    let received = mine.compactMap { $0["received"] as? Int }
    #expect(received == received.sorted(), "progress went backwards: \(received)")
  }

  // MARK: Events and watch, on records as the agent writes them

  @Test func eventsPrintsAndAcknowledges() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let store = try DownloadStore(container: container)
    let ok = try makeTask(
      store, session: "app", name: "ok.bin",
      status: TaskStatus(
        phase: .completed, resume: ResumeState(receivedBytes: 5, expectedBytes: 5), attempts: 1, httpStatus: 200,
        eventsQueued: true, finished: Self.now), events: [.finished, .completed], sequence: 1)
    let missing = try makeTask(
      store, session: "app", name: "missing.bin",
      status: TaskStatus(
        phase: .failed, attempts: 1, httpStatus: 404, error: .httpStatus(404), eventsQueued: true,
        finished: Self.now), events: [.completed], sequence: 2)
    // Another session's event is not ours.
    try makeTask(
      store, session: "widget", name: "w.bin", status: TaskStatus(phase: .cancelled, error: .cancelled),
      events: [.completed], sequence: 3)

    let first = try await groupctl(["events", group, "app"], root)
    #expect(first.status == 0, "\(first)")
    let events = first.objects
    #expect(events.count == 3, "\(first)")
    #expect(events.map { $0["id"] as? String } == ["\(ok).finished", "\(ok).completed", "\(missing).completed"])
    #expect(
      events.map { $0["kind"] as? String } == [
        "didFinishDownloadingTo", "didCompleteWithError", "didCompleteWithError",
      ])
    #expect((events.first?["location"] as? String) == container.path + "/Downloads/ok.bin")
    #expect(events[safe: 1]?["error"] == nil)
    #expect((events[safe: 2]?["error"] as? String)?.contains("HTTP 404") == true)
    #expect(events[safe: 2]?["http_status"] as? Int == 404)
    #expect(store.queuedEvents("app").isEmpty, "printed events were not acknowledged")
    #expect(store.queuedEvents("widget").count == 1)

    let second = try await groupctl(["events", group, "app"], root)
    #expect(second.status == 0 && second.out.isEmpty, "acknowledged events came again: \(second)")
  }

  @Test func eventsFollowPrintsNewEvents() async throws {
    let root = try TestRoot()
    let store = try DownloadStore(container: try root.container(group))
    let follower = try Child(
      ["downloads", "events", group, "app", "--follow", "--root", root.path], executable: "groupctl",
      environment: Self.noAgent)
    await follower.line { $0.contains(#""kind":"ready""#) }
    let id = try makeTask(
      store, session: "app", name: "late.bin",
      status: TaskStatus(phase: .completed, eventsQueued: true, finished: Self.now), events: [.finished])
    store.updates.post()  // as the agent does after queuing
    await follower.line { $0.contains("\(id).finished") }
    // Acknowledged after it is printed (at least once: a follower stopped in between prints it again next time).
    #expect(await eventually { store.queuedEvents("app").isEmpty }, "a printed event was never acknowledged")
    await follower.stop(SIGINT)
    #expect(follower.process.terminationStatus == 0, "\(follower.errors.text)")
  }

  @Test func watchUntilDoneEndsWhenEveryTaskCompleted() async throws {
    let root = try TestRoot()
    let store = try DownloadStore(container: try root.container(group))
    let running = TaskStatus(phase: .running, resume: ResumeState(receivedBytes: 3, expectedBytes: 10), attempts: 1)
    let a = try makeTask(store, session: "app", name: "a.bin", status: running, sequence: 1)
    let b = try makeTask(store, session: "app", name: "b.bin", status: running, sequence: 2)
    // Not a terminal (a pipe): JSON lines without --json.
    let watch = try Child(
      ["downloads", "watch", group, "--until-done", "--root", root.path], executable: "groupctl",
      environment: Self.noAgent)
    await watch.line { $0.contains(b) && $0.contains(#""state":"running""#) }
    var done = running
    done.phase = .completed
    done.resume.receivedBytes = 10
    done.finished = Self.now
    try store.write(done, for: a, durable: false)
    await watch.line { $0.contains(a) && $0.contains(#""state":"completed""#) }
    #expect(watch.process.isRunning, "watch --until-done ended while a task was unfinished")
    var progressed = running
    progressed.resume.receivedBytes = 7
    try store.write(progressed, for: b, durable: false)
    await watch.line { $0.contains(b) && $0.contains(#""received":7"#) }
    try store.write(done, for: b, durable: false)
    #expect(await watch.exit() == 0, "\(watch.errors.text)")
    let last = watch.output.last ?? ""
    #expect(last.contains(b) && last.contains(#""state":"completed""#) && last.contains(#""received":10"#), "\(last)")
  }

  @Test func watchUntilDoneWithNothingUnfinishedEndsAtOnce() async throws {
    let root = try TestRoot()
    let store = try DownloadStore(container: try root.container(group))
    let id = try makeTask(
      store, session: "app", name: "x.bin", status: TaskStatus(phase: .completed, finished: Self.now))
    let run = try await groupctl(["watch", group, "--json", "--until-done"], root)
    #expect(run.status == 0 && run.out.count == 1 && run.out.first?.contains(id) == true, "\(run)")
  }

  /// On a terminal (a pty from script(1)): bars redrawn in place, then a permanent line when the task ends.
  @Test func watchDrawsProgressBarsOnATerminal() async throws {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else {
      print("skipped: no /usr/bin/script to give watch a terminal")
      return
    }
    let root = try TestRoot()
    let store = try DownloadStore(container: try root.container(group))
    let running = TaskStatus(
      phase: .running, resume: ResumeState(receivedBytes: 512 << 10, expectedBytes: 1 << 20), attempts: 1)
    let id = try makeTask(store, session: "app", name: "big.bin", status: running)
    let groupctl = productsDirectory.appendingPathComponent("groupctl").path
    let typescript = root.path + "/typescript"
    // script(1) gives watch a pty and copies what it shows to `typescript` (its stdout, under the test runner, stayed
    // empty). Child runs products: script is reached from the products directory.
    let script = String(repeating: "../", count: productsDirectory.pathComponents.count - 1) + "usr/bin/script"
    let watch = try Child(
      ["-qfec", "\(groupctl) downloads watch \(group) --until-done --root \(root.path)", typescript],
      executable: script, environment: Self.noAgent)
    let shown = { (try? String(contentsOfFile: typescript, encoding: .utf8)) ?? "" }
    _ = await eventually { shown().contains(" 50%") || !watch.process.isRunning }
    // A frame: after the erase (ESC [J), up to the line's end.
    let frame = try #require(shown().components(separatedBy: "\u{1B}[J").first { $0.contains(" 50%") })
    let bar = try #require(frame.components(separatedBy: "\r\n").first, "\(shown().debugDescription)")
    // Half the cells filled, then percent, bytes and the name.
    let cells = bar.drop { $0 != "[" }.dropFirst().prefix { $0 != "]" }
    #expect(cells.count >= 10 && cells.filter { $0 == "#" }.count == cells.count / 2, "\(bar)")
    #expect(bar.contains("]  50% 512.0 KiB/1.0 MiB") && bar.hasSuffix("big.bin"), "\(bar)")
    var done = running
    done.phase = .completed
    done.resume.receivedBytes = 1 << 20
    done.finished = Self.now
    try store.write(done, for: id, durable: false)
    #expect(await watch.exit() == 0, "\(watch.errors.text)")
    let text = shown()
    #expect(text.contains("\u{1B}[?25l") && text.contains("\u{1B}[J"), "no cursor control: \(text.debugDescription)")
    #expect(text.contains("\(id.prefix(8)) big.bin  done  1.0 MiB"), "\(text.debugDescription)")
    #expect(!text.contains(#""state""#), "JSON on a terminal")
  }
}

extension Array {
  fileprivate subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
