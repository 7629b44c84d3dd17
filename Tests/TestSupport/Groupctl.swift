import Foundation
import Synchronization
import Testing

/// What one run of the `groupctl` binary printed and how it ended.
public struct ToolRun: Sendable, CustomStringConvertible {
  /// The exit status (nil: it did not exit in time and was killed; the test already failed).
  public var status: Int32?
  /// Standard output.
  public var out: String
  /// Standard error.
  public var err: String

  public var description: String { "status \(status.map(String.init) ?? "none"), stdout \(out), stderr \(err)" }
}

/// Runs the built `groupctl` with `arguments` (stdin /dev/null) until it exits, for the CLI tests that compare
/// stdout (every byte), stderr and the exit status. A run that does not end within 45 s is killed and fails the
/// test (a hang detector, not a timing check).
public func groupctl(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> ToolRun {
  let out = ByteSink(), err = ByteSink()
  let process = try SpawnedProcess(
    executable: productsDirectory.appendingPathComponent("groupctl").path, arguments: arguments,
    output: .pipe { out.append($0) }, error: .pipe { err.append($0) })
  let deadline = Date().addingTimeInterval(45)
  while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
  var status: Int32?
  if process.isRunning {
    Issue.record("groupctl \(arguments) did not exit within 45 s", sourceLocation: sourceLocation)
    process.signal(SIGKILL)
    process.waitUntilExit()
  } else {
    process.waitForOutput()
    status = process.terminationStatus
  }
  return ToolRun(status: status, out: out.text, err: err.text)
}

/// A pipe's bytes, decoded once at the end (a chunk may end inside a UTF-8 sequence).
private final class ByteSink: Sendable {
  private let bytes = Mutex<[UInt8]>([])
  func append(_ chunk: [UInt8]) { bytes.withLock { $0 += chunk } }
  var text: String { bytes.withLock { String(decoding: $0, as: UTF8.self) } }
}
