import Dispatch
import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import DownloadAgent

/// The group commit of directory fsyncs (`DirectorySyncs`): callers share rounds, and a caller returns only after a
/// round that began after it asked — the rule that keeps "published" meaning "survives a power cut".
///
/// Mutants this suite catches (each run once and seen failing): the callers who asked during a round covered by
/// that round (`covers` read after the fsync instead of before it), and a round per caller (no grouping):
/// `callersDuringARoundShareTheNextRoundNeverTheRunningOne`.
@Suite(.runSlot(.minutes(1)))
struct DirectorySyncsTests {
  @Test func callersDuringARoundShareTheNextRoundNeverTheRunningOne() async throws {
    let root = try TestRoot()
    let directory = DescriptorBox(try ContainerDirectory(path: root.path).openDirectory(""))
    let events = EventLog()
    let gate = DispatchSemaphore(value: 0)
    let syncs = DirectorySyncs { _ throws(FileSystemError) in
      let round = events.entries.withLock { e -> Int in
        e.append("fsync")
        return e.filter { $0 == "fsync" }.count
      }
      if round == 1 { gate.wait() }  // the first round runs until the others have asked
    }
    let first = Task {
      try await syncs.sync(directory)
      events.entries.withLock { $0.append("returned 0") }
    }
    while events.entries.withLock({ !$0.contains("fsync") }) { try await Task.sleep(for: .milliseconds(1)) }
    let others = (1...5).map { i in
      Task {
        events.entries.withLock { $0.append("asked \(i)") }
        try await syncs.sync(directory)
        events.entries.withLock { $0.append("returned \(i)") }
      }
    }
    while syncs.waiting(in: directory) < 5 { try await Task.sleep(for: .milliseconds(1)) }
    gate.signal()
    try await first.value
    for task in others { try await task.value }

    let log = events.entries.withLock { $0 }
    let rounds = log.indices.filter { log[$0] == "fsync" }
    #expect(rounds.count == 2, "one round for the first caller, one shared by the five others: \(log)")
    guard rounds.count >= 2 else { return }
    for i in 1...5 {
      let asked = try #require(log.firstIndex(of: "asked \(i)"))
      let returned = try #require(log.firstIndex(of: "returned \(i)"))
      #expect(asked < rounds[1] && rounds[1] < returned, "caller \(i) covered by a round begun after it: \(log)")
    }
  }

  @Test func aFailedRoundFailsEveryCallerItCovered() async throws {
    let root = try TestRoot()
    let directory = DescriptorBox(try ContainerDirectory(path: root.path).openDirectory(""))
    let syncs = DirectorySyncs { box throws(FileSystemError) in
      throw FileSystemError("fsync", box.fd.path, .ioError)
    }
    await #expect(throws: FileSystemError.self) { try await syncs.sync(directory) }
    // The group is gone with its last caller: the next one leads a round of its own (and fails too).
    await #expect(throws: FileSystemError.self) { try await syncs.sync(directory) }
    #expect(syncs.waiting(in: directory) == 0)
  }
}

/// What the callers and the rounds did, in order.
private final class EventLog: Sendable {
  let entries = Mutex<[String]>([])
}
