import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination

/// The order of a durable replace, seen through SystemLayer's `SyscallRecorder` (no power cut needed): the temp
/// file is fsynced before the rename, the directory after it; a plain write syncs nothing.
///
/// Mutants this suite catches:
/// - `AtomicReplace.write` without the temp file's `fsync` (`aDurableWriteSyncsFileThenRenamesThenSyncsDirectory`).
/// - `AtomicReplace.write` without the directory's `fsync` (same test).
/// - the directory synced before the rename (same test).
/// - a plain write that syncs anyway (`aPlainWriteSyncsNothing`).
@Suite struct DurabilityTests {
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
    #expect(temp.hasPrefix(directory + "/" + AtomicReplace.temporaryPrefix))
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
