// The video widget (`widget video …`): rotates the host's images from the shared image cache, shows the watch
// history, starts a background download that outlives it, and shows what memory warnings made it give back.
// Kept apart from the Timer widget (main.swift only dispatches here).
//
// widget video [--headless] [--interval S]
//   (no option)    the screen: the image as 24-bit half blocks when stdout is a terminal (words otherwise), one
//                  every S seconds (5 by default); l lets the download go (the widget detaches from its session,
//                  as when it is gone: the host receives the file), d downloads the episode again, q quits
//   --headless     a script: one full rotation in words, the peak resident memory after it, then waits for the
//                  group's memory warning and leaves while the download goes on
import Foundation
import GroupContainer
import SimpleTimerKit
import Synchronization
import VideoWidgetKit

enum VideoWidgetApp {
  static func run(_ arguments: [String]) async -> Never {
    let headless = arguments.contains("--headless")
    let terminal = !headless && isatty(STDOUT_FILENO) == 1
    let console = Console(prefix: "[widget]", interactive: terminal)
    let interval: Duration =
      arguments.firstIndex(of: "--interval").flatMap {
        $0 + 1 < arguments.count ? Double(arguments[$0 + 1]) : nil
      }.map { .milliseconds(Int($0 * 1000)) } ?? VideoWidget.rotationInterval
    // iOS gives an extension a memory limit; past 80 % of it the process gets a memory warning.
    MemoryPressure.shared.budget = 32 << 20
    let video: VideoWidget
    do { video = try VideoWidget() } catch {
      FileHandle.standardError.write(Data("[widget] cannot open the app group: \(error)\n".utf8))
      exit(1)
    }

    let screen = Locked(Screen())
    let warnings = Locked(0)  // memory warnings sent to the group
    Task.detached {
      for await report in MemoryPressure.shared.reports {
        let line = VideoWidget.describe(report)
        if terminal { screen.withLock { $0.memory = line } } else { console.log(line) }
        // The script waits for the group's warning (what `groupctl cache pressure` sends), not for one the kernel's
        // signals raise on a loaded machine.
        if report.source == .group { warnings.withLock { $0 += 1 } }
      }
    }

    let download = Locked<DownloadSession?>(startDownload(video, console))
    let progress = Locked<Double?>(nil)
    VideoDownload.follow(in: video.container, progress: progress) { fraction in
      if !terminal { console.log("episode download: \(TerminalArt.progressBar(fraction))") }
    }

    if terminal {
      Keyboard.listen { key in
        switch key {
        case "l":
          // As if the widget were gone: the session is free for the host, which attaches and gets the file.
          download.withLock {
            $0?.invalidate(); $0 = nil
          }
          screen.withLock { $0.download = "left the download to the app" }
        case "d":
          let session = download.withLock { $0 } ?? (try? VideoDownload.session(in: video.container))
          guard let session, let url = VideoDownload.sourceURL else {
            screen.withLock { $0.download = "cannot download: the host holds the session, or no source is set" }
            return
          }
          download.withLock { $0 = session }
          if !session.allTasks().contains(where: { $0.state != .completed }) {
            _ = try? session.download(from: url, to: VideoDownload.destination)
            screen.withLock { $0.download = "downloading the episode again" }
          }
        case "q":
          // The download goes on without us; the host gets it.
          download.withLock { $0?.invalidate() }
          FileHandle.standardOutput.write(Data("\u{1B}[0m\r\n".utf8))
          exit(0)
        default: break
        }
      }
    }

    // The host lists the images; wait for it (the widget may be on screen first).
    var waited = 0
    while video.imageURLs.isEmpty {
      if waited == 0 { console.show("no images yet: start the host's video screen (host video)") }
      waited += 1
      if headless && waited > 600 {
        console.log("the host listed no image within a minute")
        exit(1)
      }
      try? await Task.sleep(for: .milliseconds(100))
    }

    var index = 0
    while true {
      let count = video.imageURLs.count
      guard let slide = video.slide(at: index) else {
        // The host emptied the list meanwhile: wait for a new one, without spinning.
        try? await Task.sleep(for: interval)
        continue
      }
      let position = index % count + 1
      if terminal {
        let frame = video.frame(slide, position: position, count: count, terminal: true)
        let (notes, bar) = (screen.withLock { $0 }, progress.withLock { $0 })
        var lines = frame
        lines.append(
          "Episode download \(bar.map { TerminalArt.progressBar($0, width: 16) } ?? "not started")"
            + (notes.download.map { " — \($0)" } ?? ""))
        lines += [notes.memory, notes.peak].compactMap { $0 }
        lines.append("l: leave the download to the app · d: download again · q: quit")
        // Home, clear, draw: one write, so the picture does not tear.
        FileHandle.standardOutput.write(Data(("\u{1B}[H\u{1B}[2J" + lines.joined(separator: "\r\n")).utf8))
      } else {
        switch slide {
        case .image(_, let thumbnail):
          console.log("showing \(position)/\(count): \(slide.name) — image \(TerminalArt.describe(thumbnail))")
        case .placeholder(_, let reason):
          console.log("showing \(position)/\(count): \(slide.name) — placeholder (\(reason))")
        }
        if index == 0 {
          let history = video.history().map {
            "\($0.title) \(TerminalArt.progressBar(Double($0.percent) / 100, width: 10))"
          }
          console.log("history: \(history.joined(separator: "; "))")
        }
      }
      index += 1
      if index == count {
        let peak = VideoWidget.peakResidentBytes() ?? 0
        let line =
          "peak memory after a full rotation: VmHWM " + String(format: "%.1f MiB", Double(peak) / 1_048_576)
          + " of the 32 MiB budget"
        if terminal { screen.withLock { $0.peak = line } } else { console.log(line) }
        if headless { await leave(console, download.withLock { $0 }, warnings: warnings, progress: progress) }
      }
      try? await Task.sleep(for: interval)
    }
  }

  /// The lines under the picture.
  struct Screen {
    var download: String?
    var memory: String?
    var peak: String?
  }

  /// Starts the episode's background download in the widget's session, unless one is under way or no source set.
  static func startDownload(_ video: VideoWidget, _ console: Console) -> DownloadSession? {
    guard let url = VideoDownload.sourceURL else { return nil }
    do {
      let session = try VideoDownload.session(in: video.container)
      if let task = try session.downloadUnlessUnderWay(from: url, to: VideoDownload.destination) {
        console.log("downloading the episode in the background (task \(task.id.prefix(8)))")
      }
      return session
    } catch {
      console.log("no episode download: \(error)")
      return nil
    }
  }

  /// Headless: after the group's memory warning (at most a minute), the widget goes away, the download goes on.
  static func leave(
    _ console: Console, _ download: DownloadSession?, warnings: Locked<Int>, progress: Locked<Double?>
  ) async -> Never {
    for _ in 0..<600 where warnings.withLock({ $0 }) == 0 { try? await Task.sleep(for: .milliseconds(100)) }
    let fraction = progress.withLock { $0 }
    download?.invalidate()
    if VideoDownload.sourceURL == nil {
      console.log("leaving (no episode to download)")
      exit(warnings.withLock { $0 } > 0 ? 0 : 1)
    }
    if let fraction, fraction < 1 {
      console.log(
        "leaving with the episode at \(TerminalArt.progressBar(fraction)): the host gets it in the background")
      exit(warnings.withLock { $0 } > 0 ? 0 : 1)
    }
    console.log("leaving: the episode is \(fraction == nil ? "not started" : "already downloaded")")
    exit(1)
  }
}
