// The host's video screen (`host video …`): the app side of the video widget. Kept apart from the Timer (main.swift
// only dispatches here), as a later live activity will be.
//
// host video [--headless] [--make-images DIR] [--download-events]
//   (no option)          saves the watch history and the image list to the suite, fetches the images from
//                        $VIDEO_IMAGES_URL (the demo's gc-file-server) into the shared image cache, then follows
//                        the widget's background download and shows memory warnings; m sends a memory warning to
//                        the group (as `groupctl cache pressure warning` does), q quits. While the widget is away
//                        the host attaches to the widget's session and receives the download itself.
//   --headless           the same as a script: follows the download until the group's memory warning came, then
//                        goes away before the download ends (the agent relaunches it for the events)
//   --make-images DIR    writes the demo's PNG and JPEG images into DIR (the file server serves them) and exits
//   --download-events    started by the download agent for the widget's session: handles its events, exits
import Foundation
import GroupContainer
import SimpleTimerKit
import Synchronization
import VideoWidgetKit

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

enum VideoHost {
  static func run(_ arguments: [String]) async -> Never {
    let headless = arguments.contains("--headless")
    let console = Console(prefix: "[host]", interactive: !headless && isatty(STDOUT_FILENO) == 1)
    if let i = arguments.firstIndex(of: "--make-images") {
      guard i + 1 < arguments.count else { fail(console, "--make-images needs a directory") }
      do {
        let names = try DemoImages.write(to: URL(fileURLWithPath: arguments[i + 1]))
        console.log("wrote the demo's images: \(names.joined(separator: ", "))")
        exit(0)
      } catch { fail(console, "cannot write the demo's images: \(error)") }
    }
    let video: VideoWidget
    do { video = try VideoWidget() } catch { fail(console, "cannot open the app group: \(error)") }

    if arguments.contains("--download-events") { await handleDownloadEvents(video, console) }

    // What each memory warning made this process give back (the image cache's memory tier, idle suites).
    let warnings = Locked(0)  // memory warnings sent to the group
    Task.detached {
      for await report in MemoryPressure.shared.reports {
        console.log(VideoWidget.describe(report))
        // The script waits for the group's warning (what `groupctl cache pressure` sends), not for one the kernel's
        // signals raise on a loaded machine.
        if report.source == .group { warnings.withLock { $0 += 1 } }
      }
    }

    await cacheImages(video, console)

    // Any process may follow any session's tasks: the widget's download, here, with a bar of our own.
    let progress = Locked<Double?>(nil)
    VideoDownload.follow(in: video.container, progress: progress) { task in
      console.log("following the widget's download (task \(task.id.prefix(8)))")
    } quarter: { fraction in
      if headless { console.log("the widget's episode: \(TerminalArt.progressBar(fraction))") }
    }

    if headless {
      // Until the group's memory warning arrived and the download is seen running (at most a minute).
      for _ in 0..<600 {
        let running = progress.withLock { $0.map { $0 > 0 && $0 < 1 } ?? false }
        if warnings.withLock({ $0 }) > 0 && running { break }
        try? await Task.sleep(for: .milliseconds(100))
      }
      let at = progress.withLock { $0 }.map { TerminalArt.progressBar($0) } ?? "not started"
      console.log("leaving the video screen with the widget's episode at \(at): the agent brings the host back")
      exit(0)
    }

    await interactive(video, console, progress: progress)
  }

  /// Relaunched by the agent (iOS: `handleEventsForBackgroundURLSession`): the widget's download finished while
  /// neither the widget nor the host was attached.
  static func handleDownloadEvents(_ video: VideoWidget, _ console: Console) async -> Never {
    console.log("relaunched for the video download session \(DownloadSession.launchedForEvents ?? "?")")
    do {
      let session = try VideoDownload.session(in: video.container)
      for await event in session.events {
        switch event {
        case .didFinishDownloadingTo(let task, let location, _):
          console.log(
            "the widget's episode arrived while the host was away: \(location.lastPathComponent), "
              + "\(task.countOfBytesReceived) bytes \(TerminalArt.progressBar(1))")
        case .didCompleteWithError(_, let error?, _):
          console.log("the widget's episode could not be downloaded: \(error)")
        case .didFinishEvents:
          console.log("every video download event handled")
          session.invalidate()
          exit(0)
        default: break
        }
      }
    } catch {
      fail(console, "cannot attach to the widget's session: \(error)")
    }
    exit(0)
  }

  /// The history and the image list to the suite, then each image from the file server into the shared cache.
  static func cacheImages(_ video: VideoWidget, _ console: Console) async {
    let base = ProcessInfo.processInfo.environment["VIDEO_IMAGES_URL"].flatMap { URL(string: $0) }
    let names = DemoImages.catalog.map(\.name) + [DemoImages.missing]
    let urls = names.map { name in base.map { $0.appendingPathComponent(name).absoluteString } ?? "demo:\(name)" }
    do {
      try video.save(history: DemoImages.history, imageURLs: urls)
      console.log("saved the watch history (\(DemoImages.history.count) titles) and \(urls.count) image URLs")
    } catch { fail(console, "cannot save to the suite: \(error)") }
    guard base != nil else {
      console.log("no VIDEO_IMAGES_URL: no image fetched (the widget shows placeholders)")
      return
    }
    var cached = 0
    for url in urls.compactMap(URL.init(string:)) {
      do {
        let (data, response) = try await URLSession.shared.data(from: url)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        // A 404 body is not an image (FoundationNetworking would hand it over as one).
        guard status == 200 else {
          console.log("could not fetch \(url.lastPathComponent): HTTP \(status) (the widget shows a placeholder)")
          continue
        }
        try await video.cache.store(data, forKey: url.absoluteString)
        // Read back: in this process's memory tier too, which a memory warning trims.
        let image = try await video.cache.image(forKey: url.absoluteString)
        cached += 1
        console.log(
          "cached \(url.lastPathComponent) (\(image.map { "\($0.pixelWidth)x\($0.pixelHeight) \($0.format)" } ?? "?"), "
            + "\(TerminalArt.bytes(data.count)))")
      } catch {
        console.log("could not cache \(url.lastPathComponent): \(error)")
      }
    }
    console.log("images cached: \(cached) of \(urls.count) in the shared cache '\(VideoWidget.cacheName)'")
  }

  /// The screen: the download's bar on the status line; attaches to the widget's session once the widget has let
  /// it go, to receive the finished download itself.
  static func interactive(_ video: VideoWidget, _ console: Console, progress: Locked<Double?>) async -> Never {
    Keyboard.listen { key in
      switch key {
      case "m":
        do {
          try MemoryPressure.send(.warning, to: video.container)
          console.log("sent a memory warning to the group")
        } catch { console.log("cannot send a memory warning: \(error)") }
      case "q":
        console.log("bye")
        exit(0)
      default: break
      }
    }
    console.log(
      "Video — m: memory warning to the group (or: groupctl cache pressure warning \(SimpleTimer.groupIdentifier)), q: quit"
    )
    let attached = Locked(false)
    while true {
      let fraction = progress.withLock { $0 }
      if let fraction, fraction < 1, !attached.withLock({ $0 }),
        let session = try? VideoDownload.session(in: video.container)
      {
        attached.withLock { $0 = true }
        console.log("attached to the widget's download session (the widget has gone)")
        Task.detached {
          for await event in session.events {
            if case .didFinishDownloadingTo(let task, let location, _) = event {
              console.log(
                "the widget's episode arrived: \(location.lastPathComponent), \(task.countOfBytesReceived) bytes")
            } else if case .didCompleteWithError(_, let error?, _) = event {
              console.log("the widget's episode could not be downloaded: \(error)")
            }
          }
        }
      }
      console.show("widget's episode \(fraction.map { TerminalArt.progressBar($0) } ?? "not started")")
      try? await Task.sleep(for: .milliseconds(250))
    }
  }

  static func fail(_ console: Console, _ message: String) -> Never {
    FileHandle.standardError.write(Data("[host] \(message)\n".utf8))
    exit(1)
  }
}
