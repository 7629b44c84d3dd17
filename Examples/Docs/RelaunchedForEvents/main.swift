import Foundation
import GroupContainer

let container = try GroupContainer(identifier: "group.com.example.feed")
var configuration = DownloadSession.Configuration()
configuration.relaunch = .currentExecutable(arguments: ["--handle-download-events"])  // started for its events
let session = try DownloadSession(
  identifier: "com.example.feed.episodes", container: container, configuration: configuration)

if DownloadSession.launchedForEvents == nil {  // started by the user, not by the agent: start a download
  _ = try session.download(
    from: URL(string: "https://example.com/episode.mp3")!, to: "Downloads/episode.mp3",
    expectedSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
}

// The events of every task of the session, also of those an earlier process started.
for await event in session.events {
  switch event {
  case .didWriteData(_, _, let written, let expected): print("\(written) of \(expected) bytes")
  case .didFinishDownloadingTo(_, let location, _): print("ready at", location.path)  // already in place
  case .didCompleteWithError(let task, let error?, _): print("\(task.id) failed: \(error)")
  case .didCompleteWithError, .didFinishEvents: break
  }
}
