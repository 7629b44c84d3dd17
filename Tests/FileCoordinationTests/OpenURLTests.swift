import Foundation
import TestSupport
import Testing

@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

@Suite(.runSlot(.minutes(3))) struct OpenURLTests {
  let group = "group.com.example.urls"

  /// The default 10 s is an app's wait; a test's limit is for a hang, and a full `make test` beside a build has seen
  /// an answer take longer (both tests failed with "did not answer" once, each handler having printed `opened`).
  static let answerLimit = Duration.seconds(120)

  @Test func aRunningHandlerAnswers() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme("gctest", launching: URL(fileURLWithPath: "/bin/false"))
    let handler = try Child(.urlHandler(scheme: "gctest"), root: root.path, group: group)
    await handler.line { $0.hasPrefix("ready") }
    #expect(try await container.open(URL(string: "gctest://finished?source=widget")!, timeout: Self.answerLimit))
    #expect(try await !container.open(URL(string: "gctest://refuse")!, timeout: Self.answerLimit))
    await handler.line { $0 == "opened gctest://finished?source=widget" }
    handler.kill()
  }

  @Test func theRegisteredAppIsLaunchedWhenNoneRuns() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme(
      "gclaunch", launching: helperExecutable,
      arguments: helperArguments(.urlHandler(scheme: "gclaunch"), root: root.path, group: group))
    #expect(try await container.open(URL(string: "gclaunch://finished")!, timeout: Self.answerLimit))
    // The launched process is now the running handler.
    let status = try container.status()
    #expect(status.processes.count >= 2)
    let handlers = try FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/handlers")
    let pid = handlers.compactMap { Int32($0.split(separator: ".")[1]) }.first
    #expect(pid != nil)
    if let pid { kill(pid, SIGKILL) }
  }

  @Test(arguments: [
    ("nobody://x", "no app handles"),
    ("gctest://" + String(repeating: "a", count: 3000), "longer than 2048"),
  ])
  func badURLsAreRefusedByOpen(url: String, rule: String) async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme("gctest", launching: URL(fileURLWithPath: "/bin/false"))
    let error = await #expect(throws: OpenURLError.self) { _ = try await container.open(URL(string: url)!) }
    #expect(error?.description.contains(rule) == true, "\(String(describing: error))")
  }

  /// Raw text as a shell or another app hands it over (`groupctl open` checks it before building a URL).
  @Test(arguments: [
    ("simple timer://x", "not allowed"),
    ("gctest://caf\u{e9}", "not allowed"),
    ("gctest://<script>", "not allowed"),
    ("gctest://x/%zz", "two hex digits"),
    ("://x", "no scheme"),
    ("1abc://x", "a scheme is a letter"),
    ("gctest://" + String(repeating: "a", count: 3000), "longer than 2048"),
  ])
  func theRuleRejectsRawText(raw: String, rule: String) {
    let error = #expect(throws: OpenURLError.self) { try GroupContainer.validateURL(raw) }
    #expect(error?.description.contains(rule) == true, "\(String(describing: error))")
  }

  @Test func theRuleAcceptsWellFormedURLs() throws {
    #expect(try GroupContainer.validateURL("SimpleTimer://finished?source=widget&x=%20#frag") == "simpletimer")
  }

  @Test func aLaunchedAppThatExitsIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try container.registerURLScheme("gcexit", launching: URL(fileURLWithPath: "/bin/true"))
    await #expect(throws: OpenURLError.self) { _ = try await container.open(URL(string: "gcexit://x")!) }
  }
}
