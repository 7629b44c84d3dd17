import Foundation
import Glibc
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// A presenter's record damaged or removed by someone else (issue #33 item 4), with a presenter in a real process.
@Suite(.runSlot(.minutes(3))) struct PresenterRecordRepairTests {
  let group = "group.com.example.records"

  /// The directory of the records presenting `item` (its bucket) in the container under `root`.
  func bucket(_ root: TestRoot, _ item: String) throws -> String {
    root.path + "/" + group + "/.coordination/presenters/"
      + PresenterRegistry.bucketName(try ContainerPath(item).bytesHash)
  }

  /// The record names of process `pid` (`<pid>.<start>.<n>`) presenting `item`.
  func records(of pid: Int32, presenting item: String, _ root: TestRoot) throws -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: try bucket(root, item))) ?? []).filter {
      $0.hasPrefix("\(pid).")
    }
  }

  /// Whether the file `name` in `item`'s bucket is a valid record presenting `item`.
  func isRecord(_ name: String, presenting item: String, _ root: TestRoot) -> Bool {
    guard let directory = try? bucket(root, item),
      let data = FileManager.default.contents(atPath: directory + "/" + name),
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
    let names = try records(of: presenter.pid, presenting: "Documents/doc.txt", root)
    try #require(names.count == 1, "\(names)")
    let name = names[0]
    let file = try bucket(root, "Documents/doc.txt") + "/" + name

    #expect(truncate(file, 0) == 0)
    try #require(await eventually { isRecord(name, presenting: "Documents/doc.txt", root) }, "never written again")
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("v2".utf8), to: $0) }
    await presenter.line { $0.hasPrefix("relinquishToWriter coordinated \(getpid())") }

    try FileManager.default.removeItem(atPath: file)
    try #require(await eventually { isRecord(name, presenting: "Documents/doc.txt", root) }, "never written again")
    #expect(try container.status().presenters.map(\.pid) == [presenter.pid])
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("v3".utf8), to: $0) }
    let asked = "relinquishToWriter coordinated \(getpid())"
    #expect(await eventually { presenter.output.filter { $0.hasPrefix(asked) }.count == 2 }, "\(presenter.output)")
    presenter.kill()
  }

  /// A record nobody repairs — junk, and a FIFO, under the name of a live process, in the bucket of the item written
  /// — is a presenter that cannot be asked: `status` lists it, an access under `.fail` fails naming it, under
  /// `.skip` goes on (the registry logs it as an error). Never "no presenter".
  ///
  /// Mutants: `CoordinatedAccess.cannotAsk` returning at once — the `.fail` access runs and this test fails;
  /// `PresenterRegistry.listing` dropping damaged files (as before) — the `.fail` access runs and the test fails.
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
    let directory = try bucket(root, "Documents/other.txt")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try Data("{\"version\":1,\"id\":".utf8).write(to: URL(fileURLWithPath: directory + "/" + junk))
    #expect(mkfifo(directory + "/" + fifo, 0o600) == 0)

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
    guard let failure = error, failure.code == .presenterUnreachable, let record = failure.record else {
      Issue.record("not presenterUnreachable: \(String(describing: error))")
      return
    }
    #expect([junk, fifo].contains(record) && failure.processID == owner.pid)

    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("x".utf8), to: $0) }
    #expect(try container.contents(of: url) == Data("x".utf8))

    let text = try await groupctl(["status", group, "--root", root.path])
    #expect(text.out.contains("damaged presenter records (2)"), "\(text.out)")
    owner.kill()
  }
}
