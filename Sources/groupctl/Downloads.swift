import ArgumentParser
import BackgroundDownloads
import DownloadAgent
import Foundation
import GroupContainer
import Logging

/// `groupctl downloads …`: the group's background downloads from the shell. Creating and steering tasks here;
/// following them in DownloadsWatch.swift, a session's queued events in DownloadsEvents.swift.
///
/// Exit status: 0 success, 1 a refused request or a failed download (the reason on stderr), 2 no such task or a
/// `wait` that timed out, 64 a malformed argument.
struct Downloads: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "downloads",
    abstract: "Start, follow and steer the group's background downloads.",
    discussion: """
      Downloads are run by the download agent (gc-download-agent), a process of its own started on demand: \
      they go on after groupctl returns. Destinations are relative to the container (default Downloads/<name>).
      """,
    subcommands: [
      DownloadsStart.self, DownloadsWait.self, DownloadsList.self, DownloadsWatch.self, DownloadsCancel.self,
      DownloadsSuspend.self, DownloadsResume.self, DownloadsEvents.self, DownloadsAgent.self,
    ])
}

/// What every downloads command shares: finding a task, the JSON of a task, failing with a status.
enum DownloadsCLI {
  /// `groupctl downloads start`'s session when `--session` is not given.
  static let defaultSession = "groupctl"

  /// Prints `message` on stderr and ends the command with `status`.
  static func fail(_ message: String, status: Int32) -> ExitCode {
    FileHandle.standardError.write(Data(("groupctl: " + message + "\n").utf8))
    return ExitCode(status)
  }

  /// Attaches to `session` as groupctl: never registered as the app to relaunch for the session's events. A
  /// session attached by another live process fails with `inUse(pid)` and exit status 1.
  static func attach(_ session: String, _ group: GroupContainer, inUse: (Int32) -> String) throws -> DownloadSession {
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    do { return try DownloadSession(identifier: session, container: group, configuration: configuration) } catch {
      if error.code == .sessionInUse, let pid = error.processID { throw fail(inUse(pid), status: 1) }
      throw error
    }
  }

  /// The task `id` of any session of `group`; exit status 2 when there is none.
  static func task(_ id: String, in group: GroupContainer) throws -> DownloadTask {
    guard let task = try DownloadSession.allTasks(in: group).first(where: { $0.id == id }) else {
      throw fail(DownloadError.unknownTask(id).description + " (groupctl downloads list shows the ids)", status: 2)
    }
    return task
  }

  /// One line of `list --json` and `watch --json`.
  static func json(_ task: DownloadTask) -> [String: JSONScalar?] {
    [
      "id": .string(task.id), "session": .string(task.sessionIdentifier),
      "url": .string(task.originalURL.absoluteString),
      "state": .string(task.state.rawValue), "received": .int(Int(task.countOfBytesReceived)),
      // Unknown length: left out (Apple's -1 means nothing to a JSON reader).
      "expected": task.countOfBytesExpectedToReceive >= 0 ? .int(Int(task.countOfBytesExpectedToReceive)) : nil,
      "destination": .string(task.destination), "error": task.error.map { .string($0.description) },
      "http_status": task.httpStatus.map { .int($0) },
    ]
  }

  /// What a task that did not succeed says: "was cancelled", or the error and the HTTP status the server answered.
  static func failure(_ task: DownloadTask) -> String {
    if isCancelled(task) { return "download \(task.id) was cancelled" }
    let reason = task.error?.description ?? "unknown error"
    let status = task.httpStatus.map { " (HTTP status \($0))" } ?? ""
    return "download \(task.id) failed: \(reason)\(status)"
  }

  /// A cancel is not a failure: the server's status (a 200 for a transfer cancelled midway) explains nothing.
  static func isCancelled(_ task: DownloadTask) -> Bool {
    if task.error?.code == .cancelled { return true }
    return false
  }
}

/// A task id argument, checked before anything is opened.
struct TaskIDArgument: ParsableArguments {
  @Argument(help: "The task id (32 hex digits, as start and list print it).") var taskID: String

  func validate() throws {
    guard DownloadRecordFormat.isTaskID(taskID)
    else { throw ValidationError("'\(taskID)' is not a task id: task ids are 32 lower-case hex digits") }
  }
}

struct DownloadsStart: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "start", abstract: "Start a download; print its task id and return at once.",
    discussion: """
      groupctl attaches to the session only while it creates the task (one process per session identifier): \
      when another live process is attached to it, start fails; pick another --session.
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The http or https URL.") var url: String
  @Option(help: "Destination, relative to the container (default Downloads/<last path component>).") var to: String?
  @Option(help: "The session identifier.") var session = DownloadsCLI.defaultSession
  @Option(help: "The file's SHA-256 (64 hex digits): a file that differs fails the task.") var sha256: String?
  @Option(help: "The file's length in bytes: a file that differs fails the task.") var length: Int64?
  @Option(help: "Priority among queued tasks, 0 (lowest) to 1 (highest).") var priority: Float = 0.5

  func validate() throws {
    guard (0...1).contains(priority) else { throw ValidationError("--priority must be between 0 and 1") }
    if let length, length < 0 { throw ValidationError("--length must be a number of bytes, 0 or more") }
  }

  func run() throws {
    let group = try container.open()
    // Refused before attaching: a URL that cannot be parsed at all never creates anything.
    guard let parsed = URL(string: url) else { throw DownloadError.unsupportedURL(url) }
    let attached = try DownloadsCLI.attach(session, group) { pid in
      "session '\(session)' is attached by another live process (pid \(pid)); one process per session "
        + "identifier: use --session to pick another, or stop that process"
    }
    defer { attached.invalidate() }
    let task = try attached.download(
      from: parsed, to: to, expectedSHA256: sha256, expectedLength: length, priority: priority)
    Output.line(task.id)
  }
}

struct DownloadsWait: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "wait", abstract: "Wait until a task completes; print its file's path.",
    discussion: """
      While the task is unfinished and no download agent runs, wait starts one (as iOS restarts its download \
      daemon). Exit status 0 when it succeeded, 1 when it failed (the reason on stderr), 2 on timeout or no such task.
      """)
  @OptionGroup var container: ContainerOptions
  @OptionGroup var task: TaskIDArgument
  @Option(help: "Give up after this many seconds (default: never).") var timeout: Double?

  func validate() throws {
    if let timeout, !(timeout > 0) { throw ValidationError("--timeout must be a positive number of seconds") }
  }

  private enum Outcome: Sendable {
    case completed(DownloadTask)
    case vanished
    case timedOut
  }

  func run() async throws {
    let id = task.taskID
    let group: GroupContainer
    do { group = try container.openExisting() } catch let missing as CommandFailure {
      // No container, so no such task: the documented status 2 for an unknown task, and nothing created.
      throw DownloadsCLI.fail(DownloadError.unknownTask(id).description + " (\(missing))", status: 2)
    }
    let first = try DownloadsCLI.task(id, in: group)
    var outcome = Outcome.completed(first)
    if first.state != .completed {
      let updates = try DownloadSession.observe(container: group, session: first.sessionIdentifier)
      let timeout = timeout
      outcome = await withTaskGroup(of: Outcome?.self) { waiting in
        waiting.addTask {
          for await task in updates where task.id == id && task.state == .completed { return .completed(task) }
          return nil
        }
        // The agent forgets a task only long after it completed; a task gone before we saw it end is "unknown".
        // While it is unfinished, an agent that died (killed, crashed) is started again, at once and every second.
        let store = try? DownloadStore(container: group)
        waiting.addTask {
          while !Task.isCancelled {
            let tasks = try? DownloadSession.allTasks(in: group, session: first.sessionIdentifier)
            if let tasks, !tasks.contains(where: { $0.id == id }) { return .vanished }
            if let store, tasks?.first(where: { $0.id == id })?.state != .completed {
              try? AgentLauncher.ensureRunning(
                store: store, executable: nil, idleTimeout: DownloadSession.Configuration().agentIdleTimeout)
            }
            try? await Task.sleep(for: .seconds(1))
          }
          return nil
        }
        if let timeout {
          waiting.addTask {
            try? await Task.sleep(for: .milliseconds(Int64(timeout * 1000)))
            return Task.isCancelled ? nil : .timedOut
          }
        }
        var result = Outcome.timedOut
        for await next in waiting {
          guard let next else { continue }
          result = next
          break
        }
        waiting.cancelAll()
        return result
      }
    }
    switch outcome {
    case .completed(let task) where task.succeeded:
      Output.line(task.destinationURL.path)
    case .completed(let task):
      throw DownloadsCLI.fail(DownloadsCLI.failure(task), status: 1)
    case .vanished:
      throw DownloadsCLI.fail(DownloadError.unknownTask(id).description + " (it was removed)", status: 2)
    case .timedOut:
      throw DownloadsCLI.fail(
        "download \(id) did not complete within \(timeout.map { "\($0)" } ?? "?") s; it goes on (groupctl "
          + "downloads list shows it)", status: 2)
    }
  }
}

struct DownloadsList: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "list", abstract: "List the download tasks of the container, oldest first.",
    discussion: """
      --json prints one object per line: id, session, url, state, received, expected (left out when unknown), \
      destination, error and http_status (left out when none).
      """)
  @OptionGroup var container: ContainerOptions
  @Flag(help: "One JSON object per line.") var json = false
  @Option(help: "Only this session's tasks.") var session: String?

  func run() throws {
    let tasks = try DownloadSession.allTasks(in: try container.openExisting(), session: session)
    if json {
      for task in tasks { Output.json(DownloadsCLI.json(task)) }
      return
    }
    guard !tasks.isEmpty else { return }
    let rows =
      [["ID", "SESSION", "STATE", "RECEIVED", "DESTINATION", "URL"]]
      + tasks.map { task in
        var state = task.state.rawValue
        if task.state == .completed {
          state = task.succeeded ? "done" : DownloadsCLI.isCancelled(task) ? "cancelled" : "failed"
        }
        let size =
          task.countOfBytesExpectedToReceive >= 0
          ? "\(task.countOfBytesReceived)/\(task.countOfBytesExpectedToReceive)" : "\(task.countOfBytesReceived)/?"
        return [task.id, task.sessionIdentifier, state, size, task.destination, task.originalURL.absoluteString]
      }
    let widths = (0..<rows[0].count).map { column in rows.map { $0[column].count }.max() ?? 0 }
    for (index, row) in rows.enumerated() {
      var line = zip(row.dropLast(), widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }
        .joined(separator: "  ")
      line += "  " + row[row.count - 1]
      if index > 0, let error = tasks[index - 1].error, !DownloadsCLI.isCancelled(tasks[index - 1]) {
        line += "  (" + error.description + (tasks[index - 1].httpStatus.map { ", HTTP \($0)" } ?? "") + ")"
      }
      Output.line(line)
    }
  }
}

/// `cancel`, `suspend`, `resume`: a request the agent applies (DownloadTask's controls).
struct TaskControlCommand {
  static func run(
    _ container: ContainerOptions, _ id: String, verb: String, _ request: (DownloadTask) throws -> Void
  ) throws {
    let task = try DownloadsCLI.task(id, in: try container.open())
    guard task.state != .completed else {
      Output.line("\(id) already completed (\(task.succeeded ? "succeeded" : "failed")): nothing to \(verb)")
      return
    }
    try request(task)
    Output.line("\(id) \(verb) requested")
  }
}

struct DownloadsCancel: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "cancel", abstract: "Cancel a task: it completes with the error 'cancelled', nothing is saved.")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var task: TaskIDArgument

  func run() throws { try TaskControlCommand.run(container, task.taskID, verb: "cancel") { try $0.cancel() } }
}

struct DownloadsSuspend: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "suspend", abstract: "Pause a task, keeping what it received.")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var task: TaskIDArgument

  func run() throws { try TaskControlCommand.run(container, task.taskID, verb: "suspend") { try $0.suspend() } }
}

struct DownloadsResume: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "resume", abstract: "Continue a suspended task (with a range request when the server allows).")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var task: TaskIDArgument

  func run() throws { try TaskControlCommand.run(container, task.taskID, verb: "resume") { try $0.resume() } }
}

struct DownloadsAgent: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "agent", abstract: "Run the download agent of the container in the foreground (logs on stderr).",
    discussion: """
      Exit status 3 when another agent already runs for the container, or took over after agent.lock was removed.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "Exit after this many seconds with nothing to do (default: run until interrupted).") var idle: Double?
  @Flag(help: "Log at debug level.") var verbose = false

  func validate() throws {
    if let idle, !(idle >= 0) { throw ValidationError("--idle must be a number of seconds, 0 or more") }
  }

  func run() async throws {
    let verbose = verbose
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = verbose ? .debug : .info
      return handler
    }
    let group = try container.open()
    let status = try await DownloadAgentMain.run(
      container: group, idleTimeout: idle.map { .milliseconds(Int64($0 * 1000)) })
    if status == 3 {
      throw DownloadsCLI.fail("another download agent already runs for container \(group.url.path)", status: 3)
    }
    if status != 0 { throw ExitCode(status) }
  }
}
