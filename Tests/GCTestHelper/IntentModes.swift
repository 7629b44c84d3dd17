// The app side of the intent and hand-over tests: a host performing intents, a receiver of handed-over files.
import AppIntents
import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SystemLayer

/// Echoes its text with the pid of the process that performed it.
struct EchoIntent: AppIntent {
  static let title = "Echo"
  var text = ""
  func perform() async throws -> some IntentResult {
    .result(value: "echo:\(text) pid:\(getpid())", dialog: "echoed")
  }
}

/// Appends its text to a log file (several processes may share one log).
struct AppendIntent: AppIntent {
  static let title = "Append"
  var log = ""
  var text = ""
  func perform() async throws -> some IntentResult {
    let fd = try SystemFD.open(log, [.writeOnly, .create, .append], mode: 0o600)
    try fd.writeAll(Array("\(text) \(getpid())\n".utf8))
    return .result()
  }
}

struct Boom: Error, CustomStringConvertible { var description: String { "boom from the host" } }

/// Throws.
struct FailIntent: AppIntent {
  static let title = "Fail"
  func perform() async throws -> some IntentResult {
    throw Boom()
    return .result()
  }
}

/// Never returns.
struct HangIntent: LiveActivityIntent {
  static let title = "Hang"
  func perform() async throws -> some IntentResult {
    while true { try? await Task.sleep(for: .seconds(60)) }
    return .result()
  }
}

/// Logs that it began, then kills its own process: a host dying in the middle of a delivery.
struct CrashIntent: AppIntent {
  static let title = "Crash"
  var log = ""
  func perform() async throws -> some IntentResult {
    let fd = try SystemFD.open(log, [.writeOnly, .create, .append], mode: 0o600)
    try fd.writeAll(Array("performed \(getpid())\n".utf8))
    fd.close()
    kill(getpid(), SIGKILL)
    return .result()
  }
}

/// Runs `.intentHost` and `.inboxReceiver` (HelperCommand.swift says what they do and print). Started by the
/// library for a URL, the helper gets the URL as an appended argument: these ignore it (they receive it as a message).
func runIntentMode(_ command: HelperCommand, _ container: GroupContainer) async throws {
  switch command {
  case .intentHost(let scheme):
    try container.registerIntents(
      [EchoIntent.self, AppendIntent.self, FailIntent.self, HangIntent.self, CrashIntent.self], forScheme: scheme)
    FileHandle.standardOutput.write(Data("ready \(getpid())\n".utf8))
  case .inboxReceiver(let scheme, let log):
    try container.onOpenURL(schemes: [scheme]) { url in
      let contents = (try? String(contentsOf: url, encoding: .utf8)) ?? "<unreadable>"
      let fd = try? SystemFD.open(log, [.writeOnly, .create, .append], mode: 0o600)
      try? fd?.writeAll(Array("opened \(url.path) \(contents)\n".utf8))
      fd?.close()
      return true
    }
    FileHandle.standardOutput.write(Data("ready \(getpid())\n".utf8))
  default:
    exit(2)
  }
  while true { try? await Task.sleep(for: .seconds(60)) }
}
