import Foundation
import TestSupport
import Testing

@testable import AppIntents
@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

// The widget's copies of the test host's intents (Tests/GCTestHelper/IntentModes.swift): the same type names,
// so the same identifiers and parameters.
struct EchoIntent: AppIntent {
  static let title = "Echo"
  var text = ""
  init() {}
  init(text: String) { self.text = text }
  func perform() async throws -> some IntentResult { .result() }
}

struct AppendIntent: AppIntent {
  static let title = "Append"
  var log = ""
  var text = ""
  func perform() async throws -> some IntentResult { .result() }
}

struct FailIntent: AppIntent {
  static let title = "Fail"
  func perform() async throws -> some IntentResult { .result() }
}

struct HangIntent: LiveActivityIntent {
  static let title = "Hang"
  func perform() async throws -> some IntentResult { .result() }
}

struct CrashIntent: AppIntent {
  static let title = "Crash"
  var log = ""
  func perform() async throws -> some IntentResult { .result() }
}

/// Intents performed in the host's process (a real second process, gc-test-helper `.intentHost`), delivered over
/// the URL-opening machinery.
///
/// Mutants seen failing (each made by hand once, then reverted):
/// - no dedupe of delivery ids (`DeliveryLedger.claim` always `.claimed`):
///   `aHostKilledMidDeliveryDoesNotPerformItTwice` logs two performs and gets `hostDied`, not `interrupted`.
/// - no retry after the receiver died (`URLHandlers.request` one attempt): the same test gets `hostDied`.
/// - the request's size not checked by the receiver (`IntentWire.decodeRequest` without the size guard):
///   `theWireRefusesGarbage` fails on the oversized request.
@Suite(.runSlot(.minutes(3))) struct IntentDeliveryTests {
  let group = "group.com.example.intents"

  /// The pids of the live processes performing intents for `scheme` (their markers in `handlers/`).
  func hostPIDs(_ container: GroupContainer, _ scheme: String) -> [Int32] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/handlers")) ?? []
    return names.filter { $0.hasPrefix("@requests.\(scheme).") }.compactMap {
      Int32($0.dropFirst("@requests.\(scheme).".count).split(separator: ".")[0])
    }
  }

  func runningHost(_ root: TestRoot, _ scheme: String) async throws -> (GroupContainer, Child, Int32) {
    let container = try root.container(group)
    try container.registerURLScheme(scheme, launching: URL(fileURLWithPath: "/bin/false"))
    let host = try Child(.intentHost(scheme: scheme), root: root.path, group: group)
    let ready = await host.line { $0.hasPrefix("ready ") }
    return (container, host, Int32(ready?.dropFirst(6) ?? "") ?? -1)
  }

  @Test func aRunningHostPerformsTheIntentInItsProcess() async throws {
    let root = try TestRoot()
    let (container, host, pid) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    let response = try await container.perform(EchoIntent(text: "like"), inAppWithScheme: "scoreboard")
    #expect(try response.value(as: String.self) == "echo:like pid:\(pid)")
    #expect(pid != getpid())
    #expect(response.dialog == "echoed")
  }

  @Test func aHostThatIsNotRunningIsStartedAndPerformsIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme(
      "gclaunch", launching: helperExecutable,
      arguments: helperArguments(.intentHost(scheme: "gclaunch"), root: root.path, group: group))
    let log = root.path + "/append.log"
    defer { for pid in hostPIDs(container, "gclaunch") { kill(pid, SIGKILL) } }
    var intent = AppendIntent()
    intent.log = log
    intent.text = "goal"
    try await container.perform(intent, inAppWithScheme: "gclaunch")
    let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
    let launched = hostPIDs(container, "gclaunch")
    #expect(launched.count == 1)
    #expect(lines == ["goal \(launched.first ?? -1)"])
  }

  @Test func anUnknownIntentTypeIsReported() async throws {
    let root = try TestRoot()
    let (container, host, _) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    let error = await #expect(throws: IntentError.self) {
      try await container.performIntent(withIdentifier: "NoSuchIntent", inAppWithScheme: "scoreboard")
    }
    #expect(error == .unknownIntentType("NoSuchIntent", scheme: "scoreboard"))
  }

  @Test func aPerformThatThrowsIsReported() async throws {
    let root = try TestRoot()
    let (container, host, _) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    let error = await #expect(throws: IntentError.self) {
      try await container.perform(FailIntent(), inAppWithScheme: "scoreboard")
    }
    #expect(error == .performFailed("FailIntent", message: "boom from the host"))
  }

  @Test func aHostThatNeverAnswersTimesOut() async throws {
    let root = try TestRoot()
    let (container, host, _) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    let error = await #expect(throws: IntentError.self) {
      try await container.perform(HangIntent(), inAppWithScheme: "scoreboard", timeout: .seconds(1))
    }
    #expect(error == .timedOut("HangIntent", scheme: "scoreboard", seconds: 1))
  }

  @Test func anUnknownSchemeIsADeliveryError() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let error = await #expect(throws: IntentError.self) {
      try await container.perform(EchoIntent(), inAppWithScheme: "nobody")
    }
    #expect(error == .delivery(.unknownScheme("nobody")))
  }

  /// At most once: the host dies while performing; the sender starts it again and delivers the same id; the
  /// second host finds the id claimed and answers "interrupted" instead of performing it again.
  @Test func aHostKilledMidDeliveryDoesNotPerformItTwice() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme(
      "gccrash", launching: helperExecutable,
      arguments: helperArguments(.intentHost(scheme: "gccrash"), root: root.path, group: group))
    defer { for pid in hostPIDs(container, "gccrash") { kill(pid, SIGKILL) } }
    let log = root.path + "/crash.log"
    var intent = CrashIntent()
    intent.log = log
    let error = await #expect(throws: IntentError.self) {
      try await container.perform(intent, inAppWithScheme: "gccrash")
    }
    guard error?.code == .interrupted, error?.intentType == "CrashIntent" else {
      Issue.record("expected interrupted, got \(String(describing: error))")
      return
    }
    let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
    #expect(lines.count == 1, "performed \(lines.count) times: \(lines)")
    // The second host is alive and still performs other intents.
    let response = try await container.perform(EchoIntent(text: "after"), inAppWithScheme: "gccrash")
    #expect(try response.value(as: String.self).hasPrefix("echo:after"))
  }

  /// Bad payloads reach a live host and are refused with a reason; planted garbage in its inbox is dropped; the
  /// host keeps performing.
  @Test func garbageRequestsAndFilesAreRefusedWithoutCrashingTheHost() async throws {
    let root = try TestRoot()
    let (container, host, pid) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    // Parameters that are not the intent's.
    let wrong = await #expect(throws: IntentError.self) {
      try await container.performIntent(
        withIdentifier: "EchoIntent", parameters: Data("[1,2".utf8), inAppWithScheme: "scoreboard")
    }
    guard let refusal = wrong, refusal.code == .hostRefused, refusal.intentType == "EchoIntent",
      refusal.scheme == "scoreboard", let reason = refusal.reason
    else {
      Issue.record("\(String(describing: wrong))")
      return
    }
    #expect(reason.contains("did not decode"))
    // A request that is not an intent request at all (raw bytes through the delivery).
    let answer = try await container.sendRequest(
      Array("garbage".utf8), deliveryID: "garbage-1", toScheme: "scoreboard", timeout: .seconds(10))
    guard case .replied(let bytes) = answer else {
      Issue.record("\(answer)")
      return
    }
    #expect(try IntentWire.decodeReply(bytes, type: "x").status == .invalidRequest)
    // Oversized parameters are refused before sending.
    let big = await #expect(throws: IntentError.self) {
      try await container.performIntent(
        withIdentifier: "EchoIntent",
        parameters: Data(("{\"text\":\"" + String(repeating: "a", count: 70_000) + "\"}").utf8),
        inAppWithScheme: "scoreboard")
    }
    guard big?.code == .invalidIntent else {
      Issue.record("\(String(describing: big))")
      return
    }
    // Garbage files planted in the host's inbox: junk, a FIFO, a request with an invalid delivery id.
    let inbox = try #require(
      try FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/inbox")
        .first { $0.hasPrefix("\(pid).") })
    let dir = container.path + "/.coordination/inbox/" + inbox
    let me = ProcessName.current
    // Each made under a hidden name and renamed in, as messages arrive (the host's watcher wakes on the rename).
    func plant(_ name: String, _ make: (String) throws -> Void) throws {
      try make("\(dir)/.planted")
      #expect(rename("\(dir)/.planted", "\(dir)/\(name)") == 0)
    }
    try plant("\(me).900.request") { try Data("{not json".utf8).write(to: URL(fileURLWithPath: $0)) }
    try plant("\(me).901.request") { _ = mkfifo($0, 0o600) }
    let bad =
      #"{"version":1,"id":"\#(me).902","kind":"request","sender":"\#(me)","item":"","needsAck":true,"#
      + #""events":[],"scheme":"scoreboard","request":"AAAA","deliveryID":"../../x"}"#
    try plant("\(me).902.request") { try Data(bad.utf8).write(to: URL(fileURLWithPath: $0)) }
    let response = try await container.perform(EchoIntent(text: "still"), inAppWithScheme: "scoreboard")
    #expect(try response.value(as: String.self) == "echo:still pid:\(pid)")
    #expect(host.process.isRunning)
  }

  @Test func theWireRefusesGarbage() throws {
    // Well-formed but over the limit: refused for its size alone.
    let oversized = Array(
      #"{"version":1,"type":"A","parameters":"\#(Data(count: 70_000).base64EncodedString())"}"#.utf8)
    for bytes: [UInt8] in [
      oversized,
      [], Array("null".utf8), Array(#"{"version":2,"type":"A","parameters":""}"#.utf8),
      Array(#"{"version":1,"type":"","parameters":""}"#.utf8), [UInt8](repeating: 0x7B, count: 70_000),
      Array(#"{"version":1,"type":"A","parameters":"not base64!"}"#.utf8),
    ] {
      guard case .failure(let reply) = IntentWire.decodeRequest(bytes) else {
        Issue.record("accepted \(bytes.prefix(40))")
        continue
      }
      #expect(reply.status == .invalidRequest)
    }
    #expect(throws: IntentError.self) { try IntentWire.decodeReply(Array("{}".utf8), type: "A") }
  }

  @Test func theLedgerClaimsAnIdOnce() throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let ledger = DeliveryLedger(space: try container.messagingSpace())
    #expect(ledger.claim("abc-1") == .claimed)
    #expect(ledger.claim("abc-1") == .interrupted)
    ledger.record([1, 2, 3], for: "abc-1")
    #expect(ledger.claim("abc-1") == .performed([1, 2, 3]))
    #expect(!DeliveryID.isValid("../x"))
    #expect(!DeliveryID.isValid(String(repeating: "a", count: 65)))
  }

  @Test func groupctlPerformsAnIntent() async throws {
    let root = try TestRoot()
    let (_, host, pid) = try await runningHost(root, "scoreboard")
    defer { host.kill() }
    let ok = try await groupctl([
      "intent", group, "scoreboard", "EchoIntent", "--json", #"{"text":"cli"}"#, "--root", root.path,
    ])
    #expect(ok.status == 0, "\(ok.err)")
    #expect(ok.out == "\"echo:cli pid:\(pid)\"\nechoed\n")
    let failed = try await groupctl(["intent", group, "scoreboard", "FailIntent", "--root", root.path])
    #expect(failed.status == 1)
    #expect(failed.err.contains("boom from the host"))
  }
}
