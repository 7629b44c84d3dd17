// Download sessions as "the other process": a process that starts downloads and dies, one that re-attaches and
// prints its events, and the app the agent relaunches.
import BackgroundDownloads
import FileCoordination
import Foundation

let downloadSessionModes: Set<String> = ["dl-start", "dl-attach", "dl-relaunched"]

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

func runDownloadSessionMode(_ command: String, _ args: [String], _ container: GroupContainer) async throws {
  var configuration = DownloadSession.Configuration()
  configuration.agentIdleTimeout = .seconds(2)
  switch command {
  case "dl-start":
    // dl-start <root> <group> <session> <url> [destination|-] [relaunch-log]: starts a download, prints its id, and
    // stays until killed. With a relaunch log, registers this helper as the app to relaunch (mode dl-relaunched).
    let session = args[4]
    if args.count > 7 {
      configuration.relaunch = .currentExecutable(arguments: ["dl-relaunched", args[2], args[3], args[7]])
    } else {
      configuration.relaunch = .none
    }
    let s = try DownloadSession(identifier: session, container: container, configuration: configuration)
    let destination = args.count > 6 && args[6] != "-" ? args[6] : nil
    let task = try s.download(from: URL(string: args[5])!, to: destination)
    await say("task \(task.id)")
    while true { try? await Task.sleep(for: .seconds(60)) }

  case "dl-attach":
    // dl-attach <root> <group> <session> <count>: attaches, prints `attached`, then each queued event and
    // didFinishEvents, acknowledging each; exits after <count> queued events (0: after the backlog's didFinishEvents).
    configuration.relaunch = .none
    let s = try DownloadSession(identifier: args[4], container: container, configuration: configuration)
    await say("attached")
    let wanted = Int(args[5]) ?? 0
    var seen = 0
    for await event in s.events {
      if case .didWriteData = event { continue }
      await say(describe(event))
      if event.id != nil { seen += 1 }
      if wanted > 0 && seen >= wanted {
        s.acknowledge(event)
        break
      }
      if wanted == 0, case .didFinishEvents = event { break }
    }
    s.invalidate()
    exit(0)

  case "dl-relaunched":
    // Started by the agent: attaches to the session it names and logs its events until didFinishEvents.
    let log = args[4]
    guard let session = DownloadSession.launchedForEvents else {
      FileHandle.standardError.write(Data("dl-relaunched: not started for a session\n".utf8))
      exit(2)
    }
    configuration.relaunch = .none
    let s = try DownloadSession(identifier: session, container: container, configuration: configuration)
    await logLine(log, "relaunched \(session) \(getpid())")
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
