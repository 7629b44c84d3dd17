// The Timer app: counts down; going to the background saves the time left and the time it left to the shared
// suite; opened by simpletimer://finished?source=widget, it shows that the timer finished in the widget.
//
// With $SIMPLETIMER_ASSET_URL set, it also downloads the alarm sound in a background session: the download goes on
// when the host goes away, and the download agent starts the host again (--download-events) to hand it the events.
//
// host [--headless] [--seconds N] [--background-after S] [--serve] [--download-events] [URL]
//   --headless           a fixed script instead of the terminal UI: count down S seconds, go to the background, exit
//   --serve              only handle URLs (tests)
//   --download-events    started by the download agent: handle the background session's events, then exit
//   URL                  given when open(_:) launched it: handle that URL, then exit (headless) or show the UI
// host video …           the video widget's app side (Video.swift)
// host scoreboard …      the scoreboard Live Activity's app side (Scoreboard.swift)
import Foundation
import GroupContainer
import SimpleTimerKit
import Synchronization

// The library's notices as whole lines of this program (before any logger is made).
ConsoleLogHandler.bootstrap(prefix: "[host]")

// Modes of their own, in their own files: the Timer below is the default.
if CommandLine.arguments.dropFirst().first == "video" { await VideoHost.run(Array(CommandLine.arguments.dropFirst(2))) }
if CommandLine.arguments.dropFirst().first == "scoreboard" {
  await ScoreboardHost.run(Array(CommandLine.arguments.dropFirst(2)))
}

let arguments = CommandLine.arguments.dropFirst()
@MainActor func option(_ name: String, default value: Int) -> Int {
  guard let i = arguments.firstIndex(of: name), arguments.index(after: i) < arguments.endIndex,
    let n = Int(arguments[arguments.index(after: i)])
  else { return value }
  return n
}
let headless = arguments.contains("--headless")
let serve = arguments.contains("--serve")
let seconds = option("--seconds", default: 20)
let backgroundAfter = option("--background-after", default: 2)
let launchURL = arguments.last.flatMap { $0.contains("://") ? $0 : nil }

let console = Console(prefix: "[host]", interactive: !headless && isatty(STDOUT_FILENO) == 1)
let timer: SimpleTimer
do { timer = try SimpleTimer() } catch {
  FileHandle.standardError.write(Data("[host] cannot open the app group: \(error)\n".utf8))
  exit(1)
}

// Relaunched for the background session's events (iOS: application(_:handleEventsForBackgroundURLSession:…)).
if let identifier = DownloadSession.launchedForEvents, identifier == AlarmSound.sessionIdentifier {
  console.log("relaunched for the background session \(identifier)")
  let session = try AlarmSound.session(in: timer.container, relaunchArguments: ["--download-events"])
  for await event in session.events {
    switch event {
    case .didFinishDownloadingTo(let task, let location, _):
      console.log(
        "the alarm sound arrived while the host was away: \(location.lastPathComponent), \(task.countOfBytesReceived) bytes"
      )
    case .didCompleteWithError(_, let error?, _):
      console.log("the alarm sound could not be downloaded: \(error)")
    case .didFinishEvents:
      console.log("every background event handled")
      session.invalidate()
      exit(0)
    default: break
    }
  }
  exit(0)
}

/// Starts the alarm sound's background download, unless it is there already or no source is set.
func startAlarmSoundDownload() -> DownloadSession? {
  guard let url = AlarmSound.sourceURL else { return nil }
  do {
    let session = try AlarmSound.session(in: timer.container, relaunchArguments: ["--download-events"])
    if let task = try session.downloadUnlessUnderWay(from: url, to: AlarmSound.destination) {
      console.log("downloading the alarm sound in the background (task \(task.id.prefix(8)))")
    }
    return session
  } catch {
    console.log("no alarm sound download: \(error)")
    return nil
  }
}

/// What the URL handler saw: nil until a valid finished URL arrived.
let finishedInWidget = Mutex<Bool>(false)

// Said before the handler is installed: the URL it was launched for may arrive the moment it is (the demo's check
// wants this line before the handler's).
if let launchURL { console.log("launched by \(launchURL)") }

// CFBundleURLTypes: this executable opens simpletimer: URLs, started the same way it runs now.
let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
try timer.container.registerURLScheme(
  SimpleTimer.urlScheme, launching: executable, arguments: headless ? ["--headless"] : [])
try timer.container.onOpenURL(schemes: [SimpleTimer.urlScheme]) { url in
  guard FinishedURL.isValid(url) else {
    console.log("refused \(url.absoluteString): not a URL this app opens")
    return false
  }
  finishedInWidget.withLock { $0 = true }
  console.log("the timer finished in the widget (\(url.absoluteString))")
  return true
}

if serve {
  console.log("ready \(getpid())")
  while true { sleep(60) }
}

if launchURL != nil && headless {
  // The URL arrives through the handler just installed.
  for _ in 0..<1000 where !finishedInWidget.withLock({ $0 }) { usleep(10_000) }
  await timer.container.waitForOpenURLAnswers()
  exit(finishedInWidget.withLock { $0 } ? 0 : 1)
}

if headless {
  var left = seconds
  console.log("countdown started: \(left) s")
  let downloads = startAlarmSoundDownload()
  for _ in 0..<min(backgroundAfter, seconds) {
    sleep(1)
    left -= 1
    console.log("time left: \(left) s")
  }
  try timer.saveForBackground(timeLeft: left)
  console.log("going to the background with \(left) s left (saved to the suite)")
  // Suspended: a URL for this app now launches a new host; the download's events wait for a relaunch.
  timer.container.removeOpenURLHandler()
  downloads?.invalidate()
  exit(0)
}

// The terminal UI.
struct Model {
  var left: Int
  var running = false
  var background = false
  var lastTick = Date()
}
let model = Mutex(Model(left: seconds))
Keyboard.listen { key in
  switch key {
  case "s":
    model.withLock { m in
      m.running.toggle()
      m.lastTick = Date()
    }
  case "b":
    let (left, background) = model.withLock { m in
      m.background.toggle()
      m.running = m.background ? false : m.running
      return (m.left, m.background)
    }
    if background {
      // Still running (suspended, on iOS): a URL for the app reaches this process and brings it back.
      try? timer.saveForBackground(timeLeft: left)
      console.log("in the background with \(left) s left: the widget counts on (b to come back)")
    } else {
      // Back in the foreground: take the countdown back from the suite.
      let remaining = timer.remaining() ?? left
      model.withLock {
        $0.left = remaining; $0.running = remaining > 0; $0.lastTick = Date()
      }
    }
  case "q":
    console.log("bye")
    exit(0)
  default: break
  }
}
console.log("Timer — s: start/stop, b: background/foreground, q: quit")
// In the foreground the host is attached to its session and hears the download itself.
if let session = startAlarmSoundDownload() {
  Task.detached {
    for await event in session.events {
      if case .didFinishDownloadingTo(let task, let location, _) = event {
        console.log("the alarm sound arrived: \(location.lastPathComponent), \(task.countOfBytesReceived) bytes")
      } else if case .didCompleteWithError(_, let error?, _) = event {
        console.log("the alarm sound could not be downloaded: \(error)")
      }
    }
  }
}
while true {
  let status = model.withLock { m -> String in
    if m.running, Date().timeIntervalSince(m.lastTick) >= 1 {
      m.left = max(0, m.left - 1)
      m.lastTick = Date()
      if m.left == 0 { m.running = false }
    }
    if finishedInWidget.withLock({ $0 }) {
      m.background = false
      return "finished (in the widget)"
    }
    if m.left == 0 { return "finished" }
    return "time left: \(m.left) s \(m.background ? "[background]" : m.running ? "[running]" : "[stopped]")"
  }
  if status == "finished", (try? timer.claimFinish(by: "host")) == true { console.log("the timer finished in the app") }
  console.show(status)
  usleep(100_000)
}
