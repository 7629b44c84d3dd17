// The app side of the intent and hand-over tests: a host performing intents, a receiver of handed-over files.
import AppIntents
import FileCoordination
import Foundation
import SystemLayer

let intentModes: Set<String> = ["intent-host", "inbox-receiver"]

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
    defer { fd.close() }
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

func runIntentMode(_ command: String, _ args: [String], _ container: GroupContainer) async throws {
  switch command {
  case "intent-host":
    // intent-host <root> <group> <scheme>: performs the intents above for <scheme>; prints "ready <pid>".
    try container.registerIntents(
      [EchoIntent.self, AppendIntent.self, FailIntent.self, HangIntent.self, CrashIntent.self], forScheme: args[4])
    FileHandle.standardOutput.write(Data("ready \(getpid())\n".utf8))
  case "inbox-receiver":
    // inbox-receiver <root> <group> <scheme> <log>: handles <scheme> (and handed-over file) URLs; appends
    // "opened <path> <contents>" to <log> for each file URL (launched receivers' output reaches no test).
    let log = args[5]
    try container.onOpenURL(schemes: [args[4]]) { url in
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
