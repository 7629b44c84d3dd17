import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// A FIFO planted anywhere in `.coordination/` never hangs anyone: every open is `O_NONBLOCK`, every read `fstat`s
/// first, and what is not a regular file is dropped (logged). Each test runs the victims as real processes and
/// bounds them: a hang is a failure naming the place, never a stuck suite.
///
/// Mutants this suite catches:
/// - `SystemFD.rawFlags` without `O_NONBLOCK`: groupctl blocks in `open` of the presenters/ FIFO, a new process in
///   `open` of processes/<pid>.<start>.lock, the presenter's watcher thread on its inbox FIFO (each test then
///   fails on its bound, and the time limit ends the rest).
/// - `LockTable.openLockFile` without the `fstat` check: the write through a FIFO lock file succeeds.
@Suite(.runSlot(.minutes(10))) struct HostileFilesTests {
  static let group = "group.com.example.hostile"

  /// Runs a product with stdin closed; fails the test (and kills it) if it runs longer than `timeout` seconds.
  func run(_ executable: String, _ arguments: [String], timeout: Double = 20) async throws -> (
    status: Int32?, err: String
  ) {
    let run = try await runToEnd(
      productsDirectory.appendingPathComponent(executable).path, arguments, input: "x", timeout: timeout)
    return (run.status, run.errors)
  }

  func fifo(_ path: String) throws {
    guard mkfifo(path, 0o600) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
  }

  @Test(.runSlot(.minutes(3))) func groupctlWriteAndStatusIgnoreAFIFOInPresenters() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try fifo(container.path + "/.coordination/presenters/1.2.3")
    let write = try await run("groupctl", ["write", Self.group, "Documents/a.txt", "--root", root.path])
    #expect(write.status == 0, "\(write.err)")
    let status = try await run("groupctl", ["status", Self.group, "--root", root.path])
    #expect(status.status == 0, "\(status.err)")
    #expect(try container.contents(of: container.documentsURL.appendingPathComponent("a.txt")) == Data("x".utf8))
  }

  @Test(.runSlot(.minutes(3))) func aNewProcessOpensTheContainerPastAFIFOLivenessLock() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let planted = container.path + "/.coordination/processes/99999.12345.lock"
    try fifo(planted)
    let log = root.path + "/log"
    let child = try Child(
      .access(mode: .write, item: "Documents/b.txt", count: 1, holdMS: 0, log: log), root: root.path, group: Self.group)
    await child.line() { $0 == "done" }
    #expect(await child.exit() == 0)
    // Dropped: a FIFO is nobody's liveness lock.
    #expect(!FileManager.default.fileExists(atPath: planted))
  }

  @Test(.runSlot(.minutes(3))) func aFIFOInAPresentersInboxDoesNotSilenceIt() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let presenter = try Child(.present(item: "Documents/p.txt"), root: root.path, group: Self.group)
    defer { presenter.kill() }
    await presenter.line { $0.hasPrefix("ready") }
    let inboxes = container.path + "/.coordination/inbox"
    let inbox = try #require(
      try FileManager.default.contentsOfDirectory(atPath: inboxes).first { $0.hasPrefix("\(presenter.pid).") })
    // Made outside, then renamed in: the presenter's watcher sees a new entry and opens it.
    try fifo(root.path + "/evil")
    try FileManager.default.moveItem(atPath: root.path + "/evil", toPath: "\(inboxes)/\(inbox)/1.1.1.prepare")
    let url = container.documentsURL.appendingPathComponent("p.txt")
    for round in 1...3 {
      try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("\(round)".utf8), to: $0) }
    }
    // Its watcher thread is not stuck: every coordinated write reached it.
    await presenter.line() { _ in
      presenter.output.filter { $0.hasPrefix("didChange coordinated") }.count == 3
    }
    #expect(presenter.output.filter { $0.hasPrefix("relinquishToWriter") }.count == 3)
    #expect(!FileManager.default.fileExists(atPath: "\(inboxes)/\(inbox)/1.1.1.prepare"))
  }

  @Test(.runSlot(.minutes(3))) func aFIFOLockFileIsRefusedWithAClearError() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let key = LockOrder.Key(path: try ContainerPath("Documents/c.txt"), kind: .item)
    try fifo(container.path + "/.coordination/locks/" + key.fileName)
    let write = try await run("groupctl", ["write", Self.group, "Documents/c.txt", "--root", root.path])
    #expect(write.status != nil && write.status != 0)
    #expect(write.err.contains("not a regular file"), "\(write.err)")
  }

  @Test(.runSlot(.minutes(3))) func aFIFOSchemeRegistrationIsRefused() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try fifo(container.path + "/.coordination/schemes/evil")
    await #expect(throws: OpenURLError.self) {
      _ = try await container.open(URL(string: "evil://x")!, timeout: .seconds(5))
    }
  }
}

/// A URL scheme registration runs a program as the opener: only the opener's own (or root's) are followed.
///
/// Mutants this suite catches:
/// - `URLHandlers.registration(for:)` without the owner check: the program of another user's registration runs
///   (`anotherUsersRegistrationIsNotFollowed`).
@Suite(.runSlot(.minutes(10))) struct SchemeOwnerTests {
  @Test(.runSlot(.minutes(3)), .enabled(if: geteuid() == 0, "needs root to give a file to another user"))
  func anotherUsersRegistrationIsNotFollowed() async throws {
    let root = try TestRoot()
    let container = try root.container(HostileFilesTests.group)
    let marker = root.path + "/ran"
    try container.registerURLScheme("gcowner", launching: URL(fileURLWithPath: "/usr/bin/touch"), arguments: [marker])
    let registration = container.path + "/.coordination/schemes/gcowner"
    #expect(chown(registration, 65534, 65534) == 0)
    do {
      _ = try await container.open(URL(string: "gcowner://x")!, timeout: .seconds(5))
      Issue.record("open followed another user's registration")
    } catch let error as OpenURLError {
      guard error.code == .untrustedRegistration, let owner = error.registrationOwner else {
        Issue.record("unexpected error \(error)")
        return
      }
      #expect(error.subject == "gcowner" && owner == 65534)
      #expect(error.description.contains("belongs to uid 65534"))
    }
    #expect(!FileManager.default.fileExists(atPath: marker), "the untrusted program ran")
    // Control: once the file is ours again, the registration is followed (touch runs, then installs no handler).
    #expect(chown(registration, geteuid(), getegid()) == 0)
    await #expect(throws: OpenURLError.self) {
      _ = try await container.open(URL(string: "gcowner://x")!, timeout: .seconds(5))
    }
    #expect(FileManager.default.fileExists(atPath: marker))
  }
}
