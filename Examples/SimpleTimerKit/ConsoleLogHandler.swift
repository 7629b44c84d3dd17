import Foundation
import Logging

/// The library's log (swift-log) as whole lines of a demo program: `[widget] notice: …`. Without it, swift-log's
/// default handler writes to stderr in the middle of the status line a pane redraws in place.
public struct ConsoleLogHandler: LogHandler {
  public var logLevel: Logger.Level
  public var metadata: Logger.Metadata = [:]
  let prefix: String

  /// Makes every logger of the process write through this handler; call it first thing in `main`. Notices,
  /// warnings and errors by default: the library's info lines are for its tests and groupctl.
  public static func bootstrap(prefix: String, level: Logger.Level = .notice) {
    LoggingSystem.bootstrap { _ in ConsoleLogHandler(logLevel: level, prefix: prefix) }
  }

  public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  public func log(event: LogEvent) {
    // On a terminal, clear the status line being drawn first; one write, so lines of threads do not interleave.
    let clear = isatty(STDERR_FILENO) == 1 ? "\r\u{1B}[2K" : ""
    FileHandle.standardError.write(Data("\(clear)\(prefix) \(event.level): \(event.message)\n".utf8))
  }
}
