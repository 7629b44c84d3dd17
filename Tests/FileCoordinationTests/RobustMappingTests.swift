import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// Shared mappings truncated by another program while processes use them (`.coordination/counters`, a process's
/// `.acks` board): every process that touches one notices the SIGBUS the guard caught, restores the file's size,
/// maps it again and carries on — with real processes on both sides.
///
/// Mutants this suite catches:
/// - no healing (`MappedCounters.healed()` always false): the writer reads its private zero page for good and never
///   messages the presenter registered later; the board's acks land on zero pages and the handshake times out;
/// - no new epoch on restore (`newEpoch()` does nothing): `aWriterNoticesACountersFileRestoredByAnotherProcess`,
///   where the generation counted up again after the reset equals the one the writer cached.
@Suite(.runSlot(.minutes(3))) struct RobustMappingTests {
  let group = "group.com.example.tests"

  func presenter(_ root: TestRoot, _ path: String) async throws -> Child {
    let child = try Child(.present(item: path), root: root.path, group: group)
    await child.line { $0.hasPrefix("ready") }
    return child
  }

  func size(_ path: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? -1 }

  @Test func aWriterMessagesPresentersRegisteredAfterTheCountersFileWasTruncated() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("counted.txt")
    try container.write(Data("v0".utf8), to: url)
    // One presenter registered and gone: the writer caches generation 2 (register, unregister).
    let early = try await presenter(root, "Documents/other.txt")
    early.kill()
    let coordinator = FileCoordinator()
    let write = { (i: Int) in
      try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v\(i)".utf8), to: $0) }
    }
    try write(1)
    let counters = container.url.appendingPathComponent(".coordination/counters").path
    #expect(truncate(counters, 0) == 0)
    try write(2)  // touches the truncated mapping: the guard catches the SIGBUS
    #expect(size(counters) == 4096, "the counters file was not given its size back")
    let late = try await presenter(root, "Documents/counted.txt")
    try write(3)
    #expect(
      await late.line { $0.hasPrefix("relinquishToWriter") } != nil, "the presenter registered later was not asked")
    #expect(await late.line { $0.hasPrefix("didChange") } != nil)
    late.kill()
  }

  /// The writer never touches the file while it is short (no SIGBUS here): the process that registers next gives
  /// it its size back and counts the generation up to the very value the writer cached.
  @Test func aWriterNoticesACountersFileRestoredByAnotherProcess() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("epoch.txt")
    try container.write(Data("v0".utf8), to: url)
    let first = try await presenter(root, "Documents/other.txt")  // generation 1, and it stays
    let coordinator = FileCoordinator()
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v1".utf8), to: $0) }  // caches 1
    let counters = container.url.appendingPathComponent(".coordination/counters").path
    #expect(truncate(counters, 0) == 0)
    let late = try await presenter(root, "Documents/epoch.txt")  // restores the file: generation 0, then 1 again
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v2".utf8), to: $0) }
    #expect(
      await late.line { $0.hasPrefix("relinquishToWriter") } != nil, "the presenter registered later was not asked")
    late.kill()
    first.kill()
  }

  @Test func aHandshakeAfterTheAckBoardWasTruncatedGetsItsAck() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("acked.txt")
    try container.write(Data("v0".utf8), to: url)
    let child = try await presenter(root, "Documents/acked.txt")
    // Generous, and fatal: an ack that never arrives fails the access instead of being skipped.
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .seconds(20)
    coordinator.presenterTimeoutPolicy = .fail
    try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v1".utf8), to: $0) }
    let inbox = container.url.appendingPathComponent(".coordination/inbox")
    let mine = try FileManager.default.contentsOfDirectory(atPath: inbox.path).filter { $0.hasPrefix("\(getpid()).") }
    #expect(mine.count == 1)
    let board = inbox.appendingPathComponent(mine.first ?? "?").appendingPathComponent(".acks").path
    #expect(truncate(board, 0) == 0)
    for i in 2...3 {
      do {
        try coordinator.coordinate(writingItemAt: url) { try container.write(Data("v\(i)".utf8), to: $0) }
      } catch {
        Issue.record("handshake \(i) after the board was truncated: \(error)")
        break
      }
    }
    #expect(size(board) == 4096, "the ack board was not given its size back")
    #expect(await PresenterSemanticsTests.waitFor("relinquishToWriter", 3, child))
    child.kill()
  }
}
