import ArgumentParser
import BackgroundDownloads
import Foundation
import GroupContainer
import SystemLayer

/// `groupctl downloads events <group-id> <session>`: attaches to a session as its app would and prints the events
/// queued for it, acknowledging each once printed (a second run prints none).
struct DownloadsEvents: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "events", abstract: "Print (and acknowledge) a session's queued events as JSON lines.",
    discussion: """
      One object per event: id (stable across deliveries), kind (didFinishDownloadingTo or didCompleteWithError), \
      task, location (the file's path) or error and http_status. An event is removed once printed. Without \
      --follow, exits when no event is left queued; with it, prints {"kind":"ready","pid":N} once attached, then \
      new events until interrupted. \
      Fails (exit 1) while another process is attached to the session.
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The session identifier.") var session: String
  @Flag(help: "Stay attached and print new events until interrupted.") var follow = false

  func run() async throws {
    let group = try container.open()
    let session = session
    let attached = try DownloadsCLI.attach(session, group) { pid in
      "session '\(session)' is attached by another live process (pid \(pid)): its events go to that process"
    }
    defer { attached.invalidate() }
    // What is queued on disk decides the end without --follow: once it is empty, every event that was queued has
    // been printed and acknowledged by us (the one attached process).
    let store = try DownloadStore(container: group)
    // An event whose task the session cannot read is never handed out: it does not hold the command open.
    let backlogLeft = {
      store.queuedEvents(session).contains { store.task($0.taskID)?.sessionIdentifier == session }
    }
    if follow {
      Interrupts.onInterrupt { attached.invalidate() }
      Output.json(["kind": .string("ready"), "pid": .int(Int(CurrentProcess.id))])  // attached: for scripts and tests
    } else if !backlogLeft() {
      return
    }
    for await event in attached.events {
      switch event {
      case .didWriteData: continue  // live progress is watch's business
      case .didFinishEvents:
        if follow { Output.json(["kind": .string("didFinishEvents")]) }
        continue
      case .didFinishDownloadingTo(let task, let location, let id):
        Output.json([
          "id": .string(id), "kind": .string("didFinishDownloadingTo"), "task": .string(task.id),
          "location": .string(location.path), "destination": .string(task.destination),
        ])
      case .didCompleteWithError(let task, let error, let id):
        Output.json([
          "id": .string(id), "kind": .string("didCompleteWithError"), "task": .string(task.id),
          "error": error.map { .string($0.description) }, "http_status": task.httpStatus.map { .int($0) },
        ])
      }
      attached.acknowledge(event)
      if !follow && !backlogLeft() { break }
    }
  }
}
