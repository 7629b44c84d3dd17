import ArgumentParser
import BackgroundDownloads
import Foundation
import GroupContainer
import SystemLayer

/// `groupctl downloads watch`: live progress of the container's tasks, from any process (attached or not).
/// On a terminal: one redrawn line per unfinished task (bar, percent, rate, time left), like curl or aria2c;
/// otherwise (or with --json) one JSON line per change.
struct DownloadsWatch: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "watch", abstract: "Follow the downloads' progress until interrupted (or --until-done).",
    discussion: """
      On a terminal: a progress bar per unfinished task, redrawn in place. Otherwise, or with --json: one JSON \
      object per change (the fields of list --json), starting with every task as it is.
      """)
  @OptionGroup var container: ContainerOptions
  @Option(help: "Only this session's tasks.") var session: String?
  @Flag(help: "JSON lines even on a terminal.") var json = false
  @Flag(help: "End when no task is unfinished.") var untilDone = false

  private enum Input: Sendable {
    case task(DownloadTask)
    case tick
  }

  func run() async throws {
    let group = try container.openExisting()
    let bars = !json && Terminal.isTerminal(1)
    // Seeded from a listing, so --until-done waits for tasks the stream has not reported yet.
    var known: [String: DownloadTask] = [:]
    for task in try DownloadSession.allTasks(in: group, session: session) { known[task.id] = task }
    let unfinished = { (known: [String: DownloadTask]) in known.values.contains { $0.state != .completed } }
    if untilDone && !unfinished(known) {
      if json || !bars { for task in known.values.sorted(by: Self.order) { Output.json(DownloadsCLI.json(task)) } }
      return
    }
    let updates = try DownloadSession.observe(container: group, session: session)
    let (inputs, feed) = AsyncStream<Input>.makeStream(bufferingPolicy: .unbounded)
    let forward = Task {
      for await task in updates { feed.yield(.task(task)) }
      feed.finish()
    }
    // Rates and time left move without a change of bytes (a stall): redraw twice a second.
    let ticker = Task {
      while bars && !Task.isCancelled {
        try? await Task.sleep(for: .milliseconds(500))
        feed.yield(.tick)
      }
    }
    defer {
      forward.cancel()
      ticker.cancel()
    }
    let display = bars ? ProgressDisplay(columns: Terminal.columns(1) ?? 80, started: known) : nil
    if bars {
      Interrupts.onInterrupt { ProgressDisplay.write(ProgressDisplay.showCursor) }
      ProgressDisplay.write(ProgressDisplay.hideCursor)
    }
    for await input in inputs {
      switch input {
      case .task(let task):
        known[task.id] = task
        if let display { display.update(task) } else { Output.json(DownloadsCLI.json(task)) }
      case .tick: break
      }
      display?.draw()
      if untilDone && !unfinished(known) { break }
    }
    if bars { ProgressDisplay.write(ProgressDisplay.showCursor) }
  }

  private static func order(_ a: DownloadTask, _ b: DownloadTask) -> Bool {
    (a.creationDate, a.taskIdentifier) < (b.creationDate, b.taskIdentifier)
  }
}

/// The redrawn block of progress bars. Completed tasks leave one permanent line above the block (done, or why
/// they failed); the block itself is erased and drawn again at each change: cursor up, clear to the end.
final class ProgressDisplay {
  static let hideCursor = "\u{1B}[?25l"
  static let showCursor = "\u{1B}[?25h"

  private struct Line {
    var task: DownloadTask
    /// (seconds, bytes) over the last few seconds: the rate is their slope.
    var samples: [(Double, Int64)] = []
  }

  private let columns: Int
  private var active: [String: Line] = [:]
  private var order: [String] = []
  private var finished: [String] = []
  private var drawnLines = 0
  private let clock = ContinuousClock()
  private let start: ContinuousClock.Instant
  /// Tasks that were complete when watch started: not reported again.
  private var alreadyDone: Set<String>

  init(columns: Int, started: [String: DownloadTask]) {
    self.columns = max(columns, 40)
    start = clock.now
    alreadyDone = Set(started.values.filter { $0.state == .completed }.map(\.id))
  }

  static func write(_ text: String) { FileHandle.standardOutput.write(Data(text.utf8)) }

  private var seconds: Double {
    let d = clock.now - start
    return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
  }

  func update(_ task: DownloadTask) {
    if task.state == .completed {
      guard !alreadyDone.contains(task.id) else { return }
      alreadyDone.insert(task.id)
      active[task.id] = nil
      order.removeAll { $0 == task.id }
      finished.append(summary(task))
      return
    }
    var line = active[task.id] ?? Line(task: task)
    if active[task.id] == nil { order.append(task.id) }
    line.task = task
    let now = seconds
    line.samples.append((now, task.countOfBytesReceived))
    line.samples.removeAll { now - $0.0 > 5 }
    active[task.id] = line
  }

  /// Erases the block drawn last, prints the new permanent lines, draws the block again (one write).
  func draw() {
    var text = drawnLines > 0 ? "\r\u{1B}[\(drawnLines)A\u{1B}[J" : "\r\u{1B}[J"
    for line in finished { text += clip(line) + "\n" }
    finished.removeAll()
    for id in order {
      guard let line = active[id] else { continue }
      text += clip(bar(line)) + "\n"
    }
    drawnLines = order.count
    Self.write(text)
  }

  private func clip(_ line: String) -> String {
    line.count <= columns - 1 ? line : String(line.prefix(columns - 2)) + "…"
  }

  private func name(_ task: DownloadTask) -> String {
    (task.destination as NSString).lastPathComponent
  }

  private func summary(_ task: DownloadTask) -> String {
    let head = "\(task.id.prefix(8)) \(name(task))"
    guard task.succeeded else {
      if DownloadsCLI.isCancelled(task) { return head + "  cancelled" }
      return head + "  failed: " + (task.error?.description ?? "unknown error")
        + (task.httpStatus.map { " (HTTP \($0))" } ?? "")
    }
    return head + "  done  " + Self.size(task.countOfBytesReceived)
  }

  private func bar(_ line: Line) -> String {
    let task = line.task
    let head = "\(task.id.prefix(8)) "
    var rate: Double?
    if let first = line.samples.first, let last = line.samples.last, last.0 - first.0 >= 0.5 {
      rate = Double(last.1 - first.1) / (last.0 - first.0)
    }
    let received = task.countOfBytesReceived
    let expected = task.countOfBytesExpectedToReceive
    var tail = expected >= 0 ? " \(Self.size(received))/\(Self.size(expected))" : " \(Self.size(received))"
    switch task.state {
    case .running:
      tail += rate.map { "  \(Self.size(Int64($0)))/s" } ?? "  --/s"
      if let rate, rate > 0, expected > received {
        tail += "  " + Self.duration(Double(expected - received) / rate) + " left"
      } else if rate == 0 {
        tail += "  stalled"
      }
    default: tail += "  \(task.state.rawValue)"
    }
    tail += "  " + name(task)
    let percent = expected > 0 ? min(100, Int(Double(received) * 100 / Double(expected))) : nil
    let label = percent.map { String(format: "%3d%%", $0) } ?? "  ?%"
    // The bar takes what the text leaves, between 10 and 40 cells.
    let cells = min(40, max(10, columns - 1 - head.count - label.count - tail.count - 3))
    let filled = percent.map { $0 * cells / 100 } ?? 0
    let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: cells - filled)
    return head + "[" + bar + "] " + label + tail
  }

  static func size(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
      value /= 1024
      unit += 1
    }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f", value) + " " + units[unit]
  }

  static func duration(_ seconds: Double) -> String {
    guard seconds.isFinite, seconds < 360_000 else { return "--:--" }
    let s = Int(seconds.rounded(.up))
    return s >= 3600
      ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : String(format: "%d:%02d", s / 60, s % 60)
  }
}
