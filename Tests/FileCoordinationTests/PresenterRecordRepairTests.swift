import Foundation
import Glibc
import TestSupport
import Testing

@testable import FileCoordination

/// A presenter's record damaged or removed by someone else (issue #33 item 4), with a presenter in a real process.
@Suite(.runSlot(.minutes(3))) struct PresenterRecordRepairTests {
  let group = "group.com.example.records"

  /// The presenter directory of the container under `root`.
  func presenters(_ root: TestRoot) -> String { root.path + "/" + group + "/.coordination/presenters" }

  /// The record names of process `pid` (`<pid>.<start>.<n>`).
  func records(of pid: Int32, _ root: TestRoot) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: presenters(root))) ?? []).filter {
      $0.hasPrefix("\(pid).")
    }
  }

  /// Whether the file `name` is a valid record presenting `item`.
  func isRecord(_ name: String, presenting item: String, _ root: TestRoot) -> Bool {
    guard let data = FileManager.default.contents(atPath: presenters(root) + "/" + name),
      let record = try? PresenterRecord.decode(Array(data), fileName: name)
    else { return false }
    return record.item == item
  }

  /// `truncate -s 0` and then `rm` of a live presenter's record: its process notices and writes the record again,
  /// and a coordinated write from this process still asks the presenter to relinquish.
  ///
  /// Mutant: `PresenterHost.keepRecord` returning at once (the owner never writes its record again) — the record
  /// stays truncated, and this test fails.
  @Test func aTruncatedOrRemovedRecordIsWrittenAgainByItsOwner() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("doc.txt")
    try container.write(Data("v1".utf8), to: url)
    let presenter = try Child(.present(item: "Documents/doc.txt"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    let names = records(of: presenter.pid, root)
    try #require(names.count == 1, "\(names)")
    let name = names[0]

    #expect(truncate(presenters(root) + "/" + name, 0) == 0)
    try #require(await eventually { isRecord(name, presenting: "Documents/doc.txt", root) }, "never written again")
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("v2".utf8), to: $0) }
    await presenter.line { $0.hasPrefix("relinquishToWriter coordinated \(getpid())") }

    try FileManager.default.removeItem(atPath: presenters(root) + "/" + name)
    try #require(await eventually { isRecord(name, presenting: "Documents/doc.txt", root) }, "never written again")
    #expect(try container.status().presenters.map(\.pid) == [presenter.pid])
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("v3".utf8), to: $0) }
    let asked = "relinquishToWriter coordinated \(getpid())"
    #expect(await eventually { presenter.output.filter { $0.hasPrefix(asked) }.count == 2 }, "\(presenter.output)")
    presenter.kill()
  }

  /// A record nobody repairs — junk, and a FIFO, under the name of a live process — is a presenter that cannot be
  /// asked: `status` lists it, an access under `.fail` fails naming it, under `.skip` goes on (the registry logs
  /// it as an error). Never "no presenter".
  ///
  /// Mutants: `CoordinatedAccess.cannotAsk` returning at once — the `.fail` access runs and this test fails;
  /// `PresenterRegistry.index()` dropping damaged files (as before) — `status` shows none and the test fails.
  @Test func aDamagedRecordIsAPresenterThatCannotBeAsked() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("other.txt")
    // A live process of the container (its liveness lock names it) that has no presenter of these ids.
    let owner = try Child(.present(item: "Documents/own.txt"), root: root.path, group: group)
    await owner.line { $0.hasPrefix("ready") }
    let lockName = try #require(
      try FileManager.default.contentsOfDirectory(atPath: root.path + "/" + group + "/.coordination/processes")
        .first { $0.hasPrefix("\(owner.pid).") && $0.hasSuffix(".lock") })
    let process = String(lockName.dropLast(5))
    let junk = "\(process).901"
    let fifo = "\(process).902"
    try Data("{\"version\":1,\"id\":".utf8).write(to: URL(fileURLWithPath: presenters(root) + "/" + junk))
    #expect(mkfifo(presenters(root) + "/" + fifo, 0o600) == 0)

    let status = try container.status()
    #expect(Set(status.damagedPresenters.map(\.record)) == [junk, fifo], "\(status.damagedPresenters)")
    #expect(status.damagedPresenters.allSatisfy { $0.pid == owner.pid })

    let strict = FileCoordinator()
    strict.presenterTimeoutPolicy = .fail
    var ran = false
    let error = #expect(throws: FileCoordinatorError.self) {
      try strict.coordinate(writingItemAt: url) { _ in ran = true }
    }
    #expect(!ran)
    guard case .presenterUnreachable(_, let record, let pid, _) = error else {
      Issue.record("not presenterUnreachable: \(String(describing: error))")
      return
    }
    #expect([junk, fifo].contains(record) && pid == owner.pid)

    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("x".utf8), to: $0) }
    #expect(try container.contents(of: url) == Data("x".utf8))

    let text = try await groupctl(["status", group, "--root", root.path])
    #expect(text.out.contains("damaged presenter records (2)"), "\(text.out)")
    owner.kill()
  }
}
