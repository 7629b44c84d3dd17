// SimpleTimerKit: the timer logic the host app and its widget share (the walkthrough's embedded framework).
// It uses only the public GroupContainer API.
import Foundation
import GroupContainer
import Synchronization

/// The shared state of the timer, in the group's defaults suite.
public enum TimerKeys {
  /// Seconds left when the host last saved (going to the background).
  public static let timeLeft = DefaultsKey("timeLeft", default: 0)
  /// When it saved them.
  public static let savedAt = DefaultsKey("savedAt", default: Date.distantPast)
  /// Who reported the end first ("host" or "widget"): claimed with an atomic update, so exactly once.
  public static let finishedBy = DefaultsKey("finishedBy", default: "")
}

/// One app group shared by the host and the widget.
public struct SimpleTimer: Sendable {
  public static let groupIdentifier = "group.com.example.simpletimer"
  public static let urlScheme = "simpletimer"

  public let container: GroupContainer
  public let defaults: SharedDefaults

  /// Opens the group container (by default from `GROUP_CONTAINER_ROOT`, else the XDG default).
  public init(container: GroupContainer? = nil) throws {
    self.container = try container ?? GroupContainer(identifier: Self.groupIdentifier)
    defaults = try SharedDefaults(container: self.container)
  }

  /// The host goes to the background: time left and the time it left, in one commit.
  public func saveForBackground(timeLeft: Int, at date: Date = Date()) throws {
    try defaults.set(values: [
      TimerKeys.timeLeft.name: timeLeft.propertyListValue,
      TimerKeys.savedAt.name: date.propertyListValue,
      TimerKeys.finishedBy.name: "".propertyListValue,
    ])
  }

  /// Seconds left now, counting down from what the host saved (nil when nothing was saved).
  public func remaining(now: Date = Date()) -> Int? {
    let savedAt = defaults[TimerKeys.savedAt]
    guard savedAt != .distantPast else { return nil }
    let left = Double(defaults[TimerKeys.timeLeft]) - now.timeIntervalSince(savedAt)
    return max(0, Int(left.rounded(.up)))
  }

  /// Claims the end of the countdown for `who`; true only for the first claimant, in any process.
  public func claimFinish(by who: String) throws -> Bool {
    var claimed = false
    try defaults.update(TimerKeys.finishedBy) { current in
      claimed = current.isEmpty
      return claimed ? who : current
    }
    return claimed
  }
}

/// `simpletimer://finished?source=widget`: the only URL the host accepts.
public enum FinishedURL {
  public static let url = URL(string: "\(SimpleTimer.urlScheme)://finished?source=widget")!

  /// Validates an incoming URL as Apple's app programming guide advises: accept only what you expect (scheme,
  /// host, no path, exactly the known query items with known values) and reject everything else.
  public static func isValid(_ url: URL) -> Bool {
    guard let parts = URLComponents(url: url, resolvingAgainstBaseURL: false),
      parts.scheme?.lowercased() == SimpleTimer.urlScheme, parts.host == "finished",
      parts.path.isEmpty || parts.path == "/", parts.user == nil, parts.password == nil, parts.port == nil,
      parts.fragment == nil, let items = parts.queryItems, items.count == 1
    else { return false }
    return items[0].name == "source" && items[0].value == "widget"
  }
}

/// Lines with a process prefix, written unbuffered (each reaches a pipe at once).
public final class Console: Sendable {
  public let prefix: String
  public let interactive: Bool
  private let lastShown = Mutex<String?>(nil)

  public init(prefix: String, interactive: Bool) {
    self.prefix = prefix
    self.interactive = interactive
  }

  /// The status: redrawn in place on a terminal; elsewhere one line each time it changes.
  public func show(_ text: String) {
    if interactive {
      write("\r\u{1B}[2K\(prefix) \(text)")
    } else if lastShown.withLock({ last in
      defer { last = text }; return last != text
    }) {
      write("\(prefix) \(text)\n")
    }
  }

  /// A line that stays (on a terminal: above the status line).
  public func log(_ text: String) {
    write(interactive ? "\r\u{1B}[2K\(prefix) \(text)\r\n" : "\(prefix) \(text)\n")
  }

  private func write(_ text: String) { FileHandle.standardOutput.write(Data(text.utf8)) }
}

/// Single keys from the terminal, without waiting for Return (raw mode restored at exit).
public enum Keyboard {
  nonisolated(unsafe) private static var original = termios()

  /// Calls `handler` on a background thread with each key pressed. Returns false when stdin is not a terminal.
  @discardableResult
  public static func listen(_ handler: @escaping @Sendable (Character) -> Void) -> Bool {
    guard isatty(STDIN_FILENO) == 1 else { return false }
    tcgetattr(STDIN_FILENO, &original)
    var raw = original
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
    tcsetattr(STDIN_FILENO, TCSANOW, &raw)
    atexit { tcsetattr(STDIN_FILENO, TCSANOW, &Keyboard.original) }
    Thread.detachNewThread {
      var byte: UInt8 = 0
      while read(STDIN_FILENO, &byte, 1) == 1 { handler(Character(UnicodeScalar(byte))) }
    }
    return true
  }
}
