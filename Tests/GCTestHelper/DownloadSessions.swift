// Download sessions as "the other process": a process that starts downloads and dies, one that re-attaches and
// prints its events, and the app the agent relaunches.
import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand

/// Every event as one line: `event <kind> <task id> <event id or -> <error or ->`.
func describe(_ event: DownloadEvent) -> String {
  switch event {
  case .didWriteData(let t, _, let total, let expected): "progress \(t.id) \(total) \(expected)"
  case .didFinishDownloadingTo(let t, let location, let id): "event finished \(t.id) \(id) \(location.path)"
  case .didCompleteWithError(let t, let error, let id):
    "event completed \(t.id) \(id) \(error.map { "\($0)".replacingOccurrences(of: " ", with: "_") } ?? "-")"
  case .didFinishEvents: "event didFinishEvents - - -"
  }
}

/// Runs `.dlStart`, `.dlAttach` and `.dlRelaunched` (HelperCommand.swift says what each does and prints).
func runDownloadSessionMode(_ invocation: HelperInvocation, _ container: GroupContainer) async throws {
  var configuration = DownloadSession.Configuration()
  configuration.agentIdleTimeout = .seconds(2)
  switch invocation.command {
  case .dlStart(let session, let url, let destination, let relaunchLog):
    if let relaunchLog {
      let relaunched = HelperInvocation(
        root: invocation.root, group: invocation.group, command: .dlRelaunched(log: relaunchLog))
      configuration.relaunch = .currentExecutable(arguments: relaunched.arguments)
    } else {
      configuration.relaunch = .none
    }
    let s = try DownloadSession(identifier: session, container: container, configuration: configuration)
    let task = try s.download(from: url, to: destination)
    await say("task \(task.id)")
    while true { try? await Task.sleep(for: .seconds(60)) }

  case .dlAttach(let session, let wanted, let download):
    configuration.relaunch = .none
    let s = try DownloadSession(identifier: session, container: container, configuration: configuration)
    await say("attached")
    var filesSaid = download == nil
    if let download { await say("task \(try s.download(from: download).id)") }
    var seen = 0
    for await event in s.events {
      if case .didWriteData = event { continue }
      await say(describe(event))
      if !filesSaid, case .didFinishDownloadingTo = event {
        // Handed out and not acknowledged: every file of the task's events is still queued.
        let names = try DownloadStore(container: container).names(in: DownloadStore.sessionPath(session) + "/events")
          .filter { $0.hasSuffix(".event") }
        await say("event-files \(names.count)")
        filesSaid = true
      }
      if event.id != nil { seen += 1 }
      if wanted > 0 && seen >= wanted {
        s.acknowledge(event)
        break
      }
      if wanted == 0, case .didFinishEvents = event { break }
    }
    s.invalidate()
    exit(0)

  case .dlLaunchRace:
    let store = try DownloadStore(container: container)
    let pause = (ProcessInfo.processInfo.environment["GROUPCONTAINER_PAUSE_DIR"] ?? "") + "/agents.launch"
    let first = Thread {
      _ = try? AgentLauncher.ensureRunning(store: store, executable: nil, idleTimeout: .seconds(2))
    }
    first.start()
    while !FileManager.default.fileExists(atPath: pause) { try? await Task.sleep(for: .milliseconds(5)) }
    await say("paused")
    try AgentLauncher.ensureRunning(store: store, executable: nil, idleTimeout: .seconds(2))
    await say("second returned")
    exit(0)

  case .dlRelaunched(let log):
    guard let session = DownloadSession.launchedForEvents else {
      FileHandle.standardError.write(Data("dl-relaunched: not started for a session\n".utf8))
      exit(2)
    }
    configuration.relaunch = .none
    let s = try DownloadSession(identifier: session, container: container, configuration: configuration)
    // The agent's malloc tunables (AgentLauncher.mallocTunables) are its own: an app it starts has none of them.
    let tunables = ProcessInfo.processInfo.environment["GLIBC_TUNABLES"] ?? "-"
    await logLine(log, "relaunched \(session) \(getpid()) tunables \(tunables)")
    for await event in s.events {
      if case .didWriteData = event { continue }
      await logLine(log, describe(event))
      if case .didFinishEvents = event { break }
    }
    s.invalidate()
    exit(0)

  default:
    exit(2)
  }
}

@MainActor func logLine(_ file: String, _ line: String) { log(file, line) }
