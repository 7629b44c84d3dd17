import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The order of a durable replace, seen through SystemLayer's `SyscallRecorder` (no power cut needed): the temp
/// file is fsynced before the rename, the directory after it; a plain write syncs nothing.
///
/// Mutants this suite catches:
/// - `AtomicReplace.write` without the temp file's `fsync` (`aDurableWriteSyncsFileThenRenamesThenSyncsDirectory`).
/// - `AtomicReplace.write` without the directory's `fsync` (same test).
/// - the directory synced before the rename (same test).
/// - a plain write that syncs anyway (`aPlainWriteSyncsNothing`).
@Suite(.runSlot(.minutes(10))) struct DurabilityTests {
  static let group = "group.com.example.durable"

  func record(_ body: () throws -> Void) rethrows -> [SyscallRecorder.Entry] {
    let log = SyscallRecorder.Log()
    try SyscallRecorder.$current.withValue(log) { try body() }
    return log.calls
  }

  @Test func aDurableWriteSyncsFileThenRenamesThenSyncsDirectory() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let url = container.documentsURL.appendingPathComponent("d.txt")
    let calls = try record { try container.write(Data("durable".utf8), to: url, durable: true) }
    let directory = container.path + "/Documents"
    let temp = try #require(calls.first { $0.call == .open }?.path, "\(calls)")
    #expect(temp.hasPrefix(container.path + "/.coordination/staging/" + AtomicReplace.temporaryPrefix), "\(calls)")
    let syncFile = calls.firstIndex(of: .init(call: .fsync, path: temp))
    let rename = calls.firstIndex(of: .init(call: .rename, path: directory + "/d.txt"))
    let syncDirectory = calls.firstIndex(of: .init(call: .fsync, path: directory))
    #expect(syncFile != nil && rename != nil && syncDirectory != nil, "\(calls)")
    if let syncFile, let rename, let syncDirectory {
      #expect(syncFile < rename && rename < syncDirectory, "\(calls)")
    }
    #expect(try container.contents(of: url) == Data("durable".utf8))
  }

  @Test func aPlainWriteSyncsNothing() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let url = container.documentsURL.appendingPathComponent("p.txt")
    let calls = try record { try container.write(Data("plain".utf8), to: url) }
    #expect(calls.contains(.init(call: .rename, path: container.path + "/Documents/p.txt")), "\(calls)")
    #expect(!calls.contains { $0.call == .fsync }, "\(calls)")
  }

  /// The recorder is scoped: calls outside it, and those of other tests running at the same time, are not seen.
  @Test func theRecorderSeesOnlyItsOwnScope() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try container.write(Data("outside".utf8), to: container.documentsURL.appendingPathComponent("o.txt"), durable: true)
    let calls = record {}
    #expect(calls.isEmpty)
  }
}

/// A full disk: the replace fails with an error naming the file, the old contents stay whole for every process,
/// and no temp file is left behind. Mutant: `AtomicReplace.write` not removing its temp file on a failed write.
@Suite(.runSlot(.minutes(3))) struct FullDiskTests {
  @Test func aWriteOnAFullDiskFailsClearlyAndKeepsTheOldFile() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "1m", name: "small") else { return }
    defer { withExtendedLifetime(mounted) {} }  // unmounted when released: not before the test ends
    let disk = mounted.path
    let group = DurabilityTests.group
    let container = try GroupContainer(identifier: group, root: URL(fileURLWithPath: disk))
    let url = container.documentsURL.appendingPathComponent("big.txt")
    let old = String(repeating: "v1\n", count: 30_000)
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data(old.utf8), to: $0) }
    var failure: (any Error)?
    do {
      try FileCoordinator().coordinate(writingItemAt: url) {
        try container.write(Data(repeating: 0x41, count: 2 << 20), to: $0)
      }
    } catch { failure = error }
    let message = failure.map { "\($0)" } ?? "no error"
    #expect(message.contains("No space left on device") && message.contains("Documents"), "\(message)")
    let names = try FileManager.default.contentsOfDirectory(atPath: container.documentsURL.path)
    #expect(names == ["big.txt"], "a temp file was left behind: \(names)")
    #expect(try container.contents(of: url) == Data(old.utf8))
    // Another process reads the old contents, whole (runToEnd reads its output to end of file).
    let reader = try await runToEnd(
      productsDirectory.appendingPathComponent("groupctl").path, ["read", group, "Documents/big.txt", "--root", disk])
    #expect(reader.status == 0)
    #expect(reader.output == old)
  }
}
