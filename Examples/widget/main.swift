// The Today widget: reads the time left and the time the host left from the shared suite, keeps counting down on
// its own, follows the host live through the change stream, and when the time is up offers to open the host with
// simpletimer://finished?source=widget.
//
// widget [--headless] [--follow]
//   --headless   a fixed script: wait for the host's save, count down, open the host at zero, exit 0 if it answered
//   --follow     the UI without keys: opens the host by itself at zero (for `make demo` without tmux)
// widget video …   the video widget (Video.swift)
// widget scoreboard …   the scoreboard Live Activity (Scoreboard.swift)
import Foundation
import GroupContainer
import SimpleTimerKit
import Synchronization

// The library's notices as whole lines of this program (before any logger is made).
ConsoleLogHandler.bootstrap(prefix: "[widget]")

// Widgets of their own, in their own files: the Timer widget below is the default.
if CommandLine.arguments.dropFirst().first == "scoreboard" {
  await ScoreboardWidget.run(Array(CommandLine.arguments.dropFirst(2)))
}
if CommandLine.arguments.dropFirst().first == "video" {
  await VideoWidgetApp.run(Array(CommandLine.arguments.dropFirst(2)))
}

let arguments = CommandLine.arguments.dropFirst()
let headless = arguments.contains("--headless")
let follow = arguments.contains("--follow")
let console = Console(prefix: "[widget]", interactive: !headless && isatty(STDOUT_FILENO) == 1)
// A widget's memory limit, as iOS gives extensions one: past 80 % of it the process gets a memory warning and its
// caches (the image cache's memory tier, idle defaults suites) give memory back.
MemoryPressure.shared.budget = 32 << 20
let timer: SimpleTimer
do { timer = try SimpleTimer() } catch {
  FileHandle.standardError.write(Data("[widget] cannot open the app group: \(error)\n".utf8))
  exit(1)
}

/// Opens the host at the end of the countdown — once, whichever of host and widget gets there first.
func finish() async -> Bool {
  guard (try? timer.claimFinish(by: "widget")) == true else {
    console.log("the host reported the end itself")
    return true
  }
  console.log("time is up: opening \(FinishedURL.url.absoluteString)")
  do {
    let opened = try await timer.container.open(FinishedURL.url)
    console.log("the host answered \(opened)")
    return opened
  } catch {
    console.log("could not open the host: \(error)")
    return false
  }
}

// Follow the host live: each save of the countdown shows up here at once.
let changes = timer.defaults.changes(forKeys: [TimerKeys.timeLeft.name, TimerKeys.savedAt.name])
let follower = Task.detached {
  for await change in changes where change.key == TimerKeys.timeLeft.name {
    let pid = change.originProcessID.map { "process \($0)" } ?? "another tool"
    console.log("the host saved \(change.newValue?.intValue ?? 0) s left (\(pid))")
  }
}

// Any process of the group can follow any session's downloads (iOS cannot): the host's alarm sound, here.
if AlarmSound.sourceURL != nil,
  let updates = try? DownloadSession.observe(
    container: timer.container, session: AlarmSound.sessionIdentifier)
{
  Task.detached {
    var lastQuarter = -1
    for await task in updates {
      if task.succeeded {
        console.log("the host's alarm sound is downloaded (\(task.countOfBytesReceived) bytes)")
        break
      }
      if let fraction = task.fractionCompleted, Int(fraction * 4) > lastQuarter {
        lastQuarter = Int(fraction * 4)
        console.log("the host's alarm sound: \(lastQuarter * 25) %")
      }
    }
  }
}

if headless {
  console.log("waiting for the host's countdown")
  while timer.remaining() == nil { usleep(20_000) }
  var shown = timer.remaining()!
  console.log("read from the suite: \(timer.defaults[TimerKeys.timeLeft]) s left when the host went away")
  console.log("time left: \(shown) s")
  while shown > 0 {
    usleep(50_000)
    let now = timer.remaining() ?? 0
    if now != shown {
      shown = now
      console.log("time left: \(shown) s")
    }
  }
  exit(await finish() ? 0 : 1)
}

let openRequested = Mutex(false)
if !follow {
  Keyboard.listen { key in
    switch key {
    case "o": openRequested.withLock { $0 = true }
    case "q":
      console.log("bye")
      exit(0)
    default: break
    }
  }
}
console.log(follow ? "Widget — follows the host's timer" : "Widget — o: open the app when finished, q: quit")
var done = false
while true {
  let left = timer.remaining()
  if let left, left == 0, !done {
    console.show("finished\(follow ? "" : " — press o to open the app")")
    if follow || openRequested.withLock({ $0 }) {
      done = true
      _ = await finish()
    }
  } else if let left, left > 0 {
    done = false
    openRequested.withLock { $0 = false }
    console.show("time left: \(left) s")
  } else if left == nil {
    console.show("no timer yet: start one in the host and send it to the background (b)")
  }
  try? await Task.sleep(for: .milliseconds(200))
}
