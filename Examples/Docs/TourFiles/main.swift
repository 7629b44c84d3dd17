import Foundation
import GroupContainer

// A presenter (Apple's NSFilePresenter) hears about changes made by any process, coordinated or not.
// Its methods run on its queue; this one passes what it hears to a stream.
final class TimerPresenter: FilePresenter {
  let presentedItemURL: URL?
  let presentedItemOperationQueue = OperationQueue()
  let heard: AsyncStream<String>.Continuation
  init(url: URL, heard: AsyncStream<String>.Continuation) {
    presentedItemURL = url
    self.heard = heard
  }
  func presentedItemDidChange() {
    let origin = ChangeOrigin.current!  // who caused it: a process id, coordinated or not
    heard.yield("changed by process \(origin.processID ?? 0), coordinated: \(origin.isCoordinated)")
  }
}

// An error ends the program with its message and status 1 (a top-level `try` would crash with a stack dump).
do {
  let container = try GroupContainer(identifier: "group.com.example.timer")
  let url = container.documentsURL.appendingPathComponent("timer.json")

  let (heard, continuation) = AsyncStream.makeStream(of: String.self)
  let presenter = TimerPresenter(url: url, heard: continuation)
  try FileCoordinator.addFilePresenter(presenter)

  // Coordinated access: readers share, writers exclude, in every process of the group.
  try FileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
    try container.write(Data(#"{"timeLeft": 60}"#.utf8), to: url)  // atomic replace: no reader sees half a file
  }
  for await line in heard {
    print("presenter: \(line)")
    break
  }
  let data = try FileCoordinator().coordinate(readingItemAt: url) { url in try container.contents(of: url) }
  print("read: \(String(decoding: data, as: UTF8.self))")
  FileCoordinator.removeFilePresenter(presenter)

  // Opening an app by URL (CFBundleURLTypes + onOpenURL): the handler runs in the app's process. A real widget
  // calls open(_:) from its own process; a host that is not running is started with the URL.
  try container.registerURLScheme("simpletimer", launching: Bundle.main.executableURL!)
  try container.onOpenURL(schemes: ["simpletimer"]) { url in
    print("handler: \(url.absoluteString)")
    return url.host == "finished"  // take only the URLs you expect
  }
  let opened = try await container.open(URL(string: "simpletimer://finished?source=widget")!)
  print("opened: \(opened)")
} catch {
  FileHandle.standardError.write(Data("tour-files: \(error)\n".utf8))
  exit(1)
}
