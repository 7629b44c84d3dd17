import Dispatch
import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import DownloadAgent

/// The group commit of published files' fsyncs (`DataSyncs`): files finishing during a round share the next one —
/// one `syncfs` when enough wait, on the descriptor opened first — and a caller returns only after a flush that
/// began after it asked; a failed flush fails its whole round.
///
/// Mutants this suite catches (each run once and seen failing): the waiters of a round told before its flush ends
/// (`callersDuringARoundShareTheNextRoundNeverTheRunningOne`), the `syncfs` on another descriptor than the one
/// opened first (`aRoundOfManyIsOneSyncOfTheFileSystemOnTheFirstOpened`).
@Suite(.runSlot(.minutes(1)))
struct DataSyncsTests {
  /// `count` files beneath a fresh root, opened for writing, each with a distinct (increasing) open time.
  static func files(_ count: Int, in root: TestRoot) throws -> [(box: DescriptorBox, opened: UInt64)] {
    let directory = try ContainerDirectory(path: root.path)
    return try (0..<count).map { i in
      (DescriptorBox(try directory.openFile("f\(i)", [.readWrite, .create], mode: 0o600)), UInt64(1000 + i))
    }
  }

  @Test func callersDuringARoundShareTheNextRoundNeverTheRunningOne() async throws {
    let root = try TestRoot()
    let files = try Self.files(6, in: root)
    let events = EventLog()
    let gate = DispatchSemaphore(value: 0)
    let syncs = DataSyncs(
      fileSystemFrom: 4,
      syncFile: { fd throws(FileSystemError) in
        let first = events.entries.withLock { e -> Bool in
          e.append("fsync \(fd.path)")
          return e.count == 1
        }
        if first { gate.wait() }  // the first round runs until the others have asked
      },
      syncFileSystem: { fd throws(FileSystemError) in events.entries.withLock { $0.append("syncfs \(fd.path)") } })
    let device = try files[0].box.fd.status().device
    let first = Task {
      try await syncs.sync(files[0].box.fd, opened: files[0].opened)
      events.entries.withLock { $0.append("returned 0") }
    }
    while events.entries.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(1)) }
    // The others ask in reverse order of opening: the round's syncfs must still go to the one opened first (f1).
    let others = (1...5).reversed().map { i in
      Task {
        events.entries.withLock { $0.append("asked \(i)") }
        try await syncs.sync(files[i].box.fd, opened: files[i].opened)
        events.entries.withLock { $0.append("returned \(i)") }
      }
    }
    while syncs.waiting(onDevice: device) < 5 { try await Task.sleep(for: .milliseconds(1)) }
    gate.signal()
    try await first.value
    for task in others { try await task.value }

    let log = events.entries.withLock { $0 }
    let flushes = log.indices.filter { log[$0].hasPrefix("fsync") || log[$0].hasPrefix("syncfs") }
    #expect(flushes.count == 2, "one round for the first caller, one shared by the five others: \(log)")
    guard flushes.count == 2 else { return }
    #expect(log[flushes[0]].hasPrefix("fsync") && log[flushes[0]].hasSuffix("/f0"), "\(log)")
    #expect(log[flushes[1]] == "syncfs " + files[1].box.fd.path, "one syncfs, on the file opened first: \(log)")
    for i in 1...5 {
      let asked = try #require(log.firstIndex(of: "asked \(i)"))
      let returned = try #require(log.firstIndex(of: "returned \(i)"))
      #expect(asked < flushes[1] && flushes[1] < returned, "caller \(i) covered by a round begun after it: \(log)")
      #expect(flushes[0] < asked, "\(log)")
    }
  }

  @Test func aRoundOfFewIsAnFsyncOfEachFile() async throws {
    let root = try TestRoot()
    let files = try Self.files(3, in: root)
    let synced = Mutex<[String]>([])
    let syncs = DataSyncs(
      fileSystemFrom: 4,
      syncFile: { fd throws(FileSystemError) in synced.withLock { $0.append(fd.path) } },
      syncFileSystem: { _ throws(FileSystemError) in Issue.record("no syncfs for fewer than 4 files") })
    try await withThrowingTaskGroup(of: Void.self) { group in
      for file in files { group.addTask { try await syncs.sync(file.box.fd, opened: file.opened) } }
      try await group.waitForAll()
    }
    #expect(Set(synced.withLock { $0 }) == Set(files.map { $0.box.fd.path }), "each file fsynced")
  }

  @Test func aFailedRoundFailsEveryCallerItCovered() async throws {
    let root = try TestRoot()
    let files = try Self.files(6, in: root)
    let gate = DispatchSemaphore(value: 0)
    let calls = Atomic<Int>(0)
    let syncs = DataSyncs(
      fileSystemFrom: 4,
      syncFile: { _ throws(FileSystemError) in
        if calls.add(1, ordering: .relaxed).newValue == 1 { gate.wait() }
      },
      syncFileSystem: { fd throws(FileSystemError) in throw FileSystemError("syncfs", fd.path, .ioError) })
    let device = try files[0].box.fd.status().device
    let first = Task { try await syncs.sync(files[0].box.fd, opened: files[0].opened) }
    while calls.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(1)) }
    let others = (1...5).map { i in Task { try await syncs.sync(files[i].box.fd, opened: files[i].opened) } }
    while syncs.waiting(onDevice: device) < 5 { try await Task.sleep(for: .milliseconds(1)) }
    gate.signal()
    try await first.value
    for task in others {
      await #expect(throws: FileSystemError.self, "a failed syncfs fails every file of its round") {
        try await task.value
      }
    }
    #expect(syncs.waiting(onDevice: device) == 0)
  }
}

/// What the callers and the rounds did, in order.
private final class EventLog: Sendable {
  let entries = Mutex<[String]>([])
}
