import Foundation
import GroupContainer

// Background downloads: URLSessionConfiguration.background(withIdentifier:) with the group as shared container.
// The download agent (gc-download-agent, a process per container, started on demand) runs the transfers: they go
// on after this process exits, and the events wait in the container for the next process of the session.
// The file comes from gc-file-server (`gc-file-server --port 8080`) unless TOUR_DOWNLOAD_URL names another.
// An error ends the program with its message and status 1 (a top-level `try` would crash with a stack dump).
do {
  let source = ProcessInfo.processInfo.environment["TOUR_DOWNLOAD_URL"] ?? "http://127.0.0.1:8080/gen/65536?seed=1"
  let container = try GroupContainer(identifier: "group.com.example.timer")
  let session = try DownloadSession(identifier: "com.example.timer.assets", container: container)
  let task = try session.download(from: URL(string: source)!, to: "Downloads/alarm.caf")
  print("downloading \(source)")

  Task {  // the agent keeps trying a server that does not answer; the tour does not wait for ever
    try await Task.sleep(for: .seconds(30))
    print("no answer in 30 s: is gc-file-server running? The agent goes on trying in the background.")
    exit(1)
  }
  for await event in session.events {  // or a DownloadSessionDelegate with Apple's method names
    guard event.task?.id == task.id else { continue }
    if case .didFinishDownloadingTo(let task, let location, _) = event {
      print("finished: \(location.lastPathComponent), \(task.countOfBytesReceived) bytes")  // already in place
    }
    if case .didCompleteWithError(_, let error, _) = event {
      session.acknowledge(event)  // handled: the loop stops before asking for the next event
      print(error.map { "failed: \($0)" } ?? "completed")
      exit(error == nil ? 0 : 1)
    }
  }
} catch {
  FileHandle.standardError.write(Data("tour-downloads: \(error)\n".utf8))
  exit(1)
}
