import Foundation
import TestSupport
import Testing

@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// File hand-over into the receiver's `Documents/Inbox/` (FileHandOver.swift) and the Inbox rule
/// (InboxRule.swift), with the receiver a real second process (gc-test-helper `.inboxReceiver`).
///
/// Mutants seen failing (each made by hand once, then reverted):
/// - the copy by path (`FileManager.copyItem` to `<container>/Documents/Inbox/<name>`, no temp file, no rename
///   beneath the descriptor): `aSymlinkedInboxOrDocumentsDoesNotLetTheCopyEscape` finds the file outside.
/// (Opening the Inbox with `openDirectory("Documents/Inbox")`, which follows links that stay inside, is no
/// mutant: `makeDirectory("Inbox")` before it already refuses a link there. The check lives in both.)
/// - publishing with `renameat` (replacing) instead of `RENAME_NOREPLACE`: `aNameCollisionGetsANumberedName`
///   finds the first file replaced.
/// - no Inbox refusal (`InboxRule.check` returning at once): `writesIntoTheInboxAreRefused` fails.
@Suite(.runSlot(.minutes(3))) struct FileHandOverTests {
  /// How long a send waits for the receiver's answer: the API's 10 s, on a loaded machine (`make test-under-load`),
  /// ran out before a receiver answered. A limit for a hang, not for slowness.
  static let answer = Duration.seconds(60)

  let group = "group.com.example.handover"

  func source(_ root: TestRoot, _ name: String, _ text: String) throws -> URL {
    let dir = root.url.appendingPathComponent("outside-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let url = dir.appendingPathComponent(name)
    try Data(text.utf8).write(to: url)
    return url
  }

  func inbox(_ container: GroupContainer) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: container.path + "/Documents/Inbox")) ?? []).sorted()
  }

  func logLines(_ path: String) -> [String] {
    ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
  }

  func runningReceiver(_ root: TestRoot, _ scheme: String, log: String) async throws -> (GroupContainer, Child) {
    let container = try root.container(group)
    try container.registerURLScheme(scheme, launching: URL(fileURLWithPath: "/bin/false"))
    let receiver = try Child(.inboxReceiver(scheme: scheme, log: log), root: root.path, group: group)
    await receiver.line { $0.hasPrefix("ready ") }
    return (container, receiver)
  }

  @Test func aSentFileLandsInTheInboxAndTheReceiverOpensIt() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let copy = try await container.send(
      file: try source(root, "report.pdf", "quarterly"), toScheme: "docs", timeout: Self.answer)
    #expect(copy.path == container.path + "/Documents/Inbox/report.pdf")
    #expect(try String(contentsOf: copy, encoding: .utf8) == "quarterly")
    #expect(logLines(log) == ["opened \(copy.path) quarterly"])
    // A name that the URL percent-encodes.
    let spaced = try await container.send(
      file: try source(root, "my notes é.txt", "spaced"), toScheme: "docs", timeout: Self.answer)
    #expect(spaced.lastPathComponent == "my notes é.txt")
    #expect(logLines(log).last == "opened \(spaced.path) spaced")
    #expect(inbox(container) == ["my notes é.txt", "report.pdf"])  // no temp file left
  }

  @Test func aReceiverThatIsNotRunningIsStartedAndGetsTheFile() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let log = root.path + "/opened.log"
    try container.registerURLScheme(
      "gcdocs", launching: helperExecutable,
      arguments: helperArguments(.inboxReceiver(scheme: "gcdocs", log: log), root: root.path, group: group))
    let copy = try await container.send(
      file: try source(root, "notes.txt", "hello"), toScheme: "gcdocs", timeout: Self.answer)
    #expect(logLines(log) == ["opened \(copy.path) hello"])
    let handlers = try FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/handlers")
    for pid in handlers.compactMap({ Int32($0.split(separator: ".")[1]) }) { kill(pid, SIGKILL) }
  }

  @Test func aNameCollisionGetsANumberedName() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let first = try await container.send(
      file: try source(root, "report.pdf", "one"), toScheme: "docs", timeout: Self.answer)
    let second = try await container.send(
      file: try source(root, "report.pdf", "two"), toScheme: "docs", timeout: Self.answer)
    let third = try await container.send(
      file: try source(root, "README", "three"), toScheme: "docs", timeout: Self.answer)
    let fourth = try await container.send(
      file: try source(root, "README", "four"), toScheme: "docs", timeout: Self.answer)
    #expect(
      [first, second, third, fourth].map(\.lastPathComponent) == ["report.pdf", "report-1.pdf", "README", "README-1"])
    #expect(try String(contentsOf: first, encoding: .utf8) == "one")
    #expect(try String(contentsOf: second, encoding: .utf8) == "two")
    #expect(inbox(container) == ["README", "README-1", "report-1.pdf", "report.pdf"])
  }

  @Test func aFIFODirectoryOrMissingSourceIsRefused() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let fifo = root.path + "/pipe"
    #expect(mkfifo(fifo, 0o600) == 0)
    let fifoError = await #expect(throws: FileHandOverError.self) {
      try await container.send(file: URL(fileURLWithPath: fifo), toScheme: "docs")
    }
    #expect(fifoError == .notARegularFile(fifo, kind: "a FIFO, socket or device"))
    let directoryError = await #expect(throws: FileHandOverError.self) {
      try await container.send(file: root.url, toScheme: "docs")
    }
    #expect(directoryError == .notARegularFile(root.path, kind: "a directory"))
    let missing = await #expect(throws: FileHandOverError.self) {
      try await container.send(file: URL(fileURLWithPath: root.path + "/nope.txt"), toScheme: "docs")
    }
    guard missing?.code == .unreadableSource else { Issue.record("\(String(describing: missing))"); return }
    // Nothing sent to an unknown scheme either, and nothing is left in the Inbox.
    await #expect(throws: OpenURLError.unknownScheme("nobody")) {
      try await container.send(file: try source(root, "a.txt", "a"), toScheme: "nobody")
    }
    #expect(inbox(container).isEmpty)
    #expect(logLines(log).isEmpty)
  }

  @Test func writesIntoTheInboxAreRefused() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let copy = try await container.send(
      file: try source(root, "a.txt", "original"), toScheme: "docs", timeout: Self.answer)
    let coordinator = FileCoordinator()
    for options: FileCoordinator.WritingOptions in [[], .forReplacing, .forMerging] {
      let error = #expect(throws: FileCoordinatorError.self) {
        try coordinator.coordinate(writingItemAt: copy, options: options) { url in
          try Data("changed".utf8).write(to: url)
        }
      }
      guard error?.containerError == .inboxIsReadOnly("Documents/Inbox/a.txt") else {
        Issue.record("\(String(describing: error))")
        continue
      }
    }
    #expect(throws: GroupContainerError.inboxIsReadOnly("Documents/Inbox/a.txt")) {
      try container.write(Data("changed".utf8), to: copy)
    }
    #expect(throws: GroupContainerError.inboxIsReadOnly("Documents/Inbox/new.txt")) {
      try container.write(Data("new".utf8), to: container.documentsURL.appendingPathComponent("Inbox/new.txt"))
    }
    // Replacing the Inbox itself, or writing through a link to it.
    #expect(throws: FileCoordinatorError.self) {
      try coordinator.coordinate(
        writingItemAt: container.documentsURL.appendingPathComponent("Inbox"), options: .forReplacing
      ) { _ in }
    }
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/Alias", withDestinationPath: "Inbox")
    #expect(throws: GroupContainerError.inboxIsReadOnly("Documents/Alias/a.txt")) {
      try container.write(Data("changed".utf8), to: container.documentsURL.appendingPathComponent("Alias/a.txt"))
    }
    #expect(throws: FileCoordinatorError.self) {
      try coordinator.coordinate(writingItemAt: container.documentsURL.appendingPathComponent("Alias/a.txt")) { _ in }
    }
    #expect(try String(contentsOf: copy, encoding: .utf8) == "original")
  }

  @Test func readingDeletingAndMovingOutAreAllowed() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let first = try await container.send(
      file: try source(root, "a.txt", "keep me"), toScheme: "docs", timeout: Self.answer)
    let second = try await container.send(
      file: try source(root, "b.txt", "delete me"), toScheme: "docs", timeout: Self.answer)
    let coordinator = FileCoordinator()
    let text = try coordinator.coordinate(readingItemAt: first) { try String(contentsOf: $0, encoding: .utf8) }
    #expect(text == "keep me")
    #expect(try container.contents(of: first) == Data("keep me".utf8))
    let destination = container.documentsURL.appendingPathComponent("a.txt")
    try coordinator.coordinate(
      writingItemAt: first, options: .forMoving, writingItemAt: destination, options: .forReplacing
    ) {
      source, target in
      try FileManager.default.moveItem(at: source, to: target)
      coordinator.item(at: source, didMoveTo: target)
    }
    try container.write(Data("edited".utf8), to: destination)  // out of the Inbox, it can be changed
    try coordinator.coordinate(writingItemAt: second, options: .forDeleting) {
      try FileManager.default.removeItem(at: $0)
    }
    #expect(inbox(container).isEmpty)
    #expect(try String(contentsOf: destination, encoding: .utf8) == "edited")
  }

  @Test func aSymlinkedInboxOrDocumentsDoesNotLetTheCopyEscape() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let outside = root.path + "/outside-target"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    let inboxPath = container.path + "/Documents/Inbox"
    try? FileManager.default.removeItem(atPath: inboxPath)
    // An absolute link out, a relative link out, a relative link that stays inside (never followed either).
    for target in [outside, "../../../outside-target", "../Library"] {
      try? FileManager.default.removeItem(atPath: inboxPath)
      try FileManager.default.createSymbolicLink(atPath: inboxPath, withDestinationPath: target)
      let error = await #expect(throws: FileHandOverError.self) {
        try await container.send(file: try source(root, "secret.txt", "x"), toScheme: "docs")
      }
      guard error?.code == .inboxUnusable else { Issue.record("\(target): \(String(describing: error))"); continue }
    }
    try FileManager.default.removeItem(atPath: inboxPath)
    // Documents itself a link out.
    try FileManager.default.moveItem(atPath: container.path + "/Documents", toPath: root.path + "/documents-away")
    try FileManager.default.createSymbolicLink(atPath: container.path + "/Documents", withDestinationPath: outside)
    await #expect(throws: FileHandOverError.self) {
      try await container.send(file: try source(root, "secret.txt", "x"), toScheme: "docs")
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
    #expect(!FileManager.default.fileExists(atPath: container.path + "/Library/secret.txt"))
    #expect(logLines(log).isEmpty)
  }

  @Test func groupctlSendsAFile() async throws {
    let root = try TestRoot()
    let log = root.path + "/opened.log"
    let (container, receiver) = try await runningReceiver(root, "docs", log: log)
    defer { receiver.kill() }
    let file = try source(root, "cli.txt", "from the shell")
    let sent = try await groupctl(["send", group, file.path, "docs", "--root", root.path])
    #expect(sent.status == 0, "\(sent.err)")
    #expect(sent.out == container.path + "/Documents/Inbox/cli.txt\n")
    #expect(logLines(log) == ["opened \(container.path)/Documents/Inbox/cli.txt from the shell"])
    let refused = try await groupctl(["send", group, root.path, "docs", "--root", root.path])
    #expect(refused.status == 1)
    #expect(refused.err.contains("a directory, not a regular file"))
  }
}
