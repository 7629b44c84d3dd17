import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

@testable import DownloadAgent

/// Publishing a finished download: the fsync → coordinated rename → directory fsync sequence, presenters in
/// another process, destinations on another file system, full disks and destinations that try to leave.
///
/// Mutants this suite catches (each run once and seen failing):
/// - the partial's fsync before the rename skipped: `publishFsyncsThePartialThenRenamesThenFsyncsTheDirectory`;
/// - the directory fsync after the rename skipped: the same test;
/// - the temp file of a cross-file-system copy left behind when the copy fails:
///   `fullDiskAtTheDestinationLeavesNothingThere`;
/// - the rename done without a coordinated write: `presenterInAnotherProcessHearsTheFileAppear` (the presenter
///   hears an uncoordinated change) and `symlinkPlantedAtTheDestinationIsNotFollowed`.
/// Not caught here: the copy written in place at the destination with its cleanup kept (a full disk then leaves
/// nothing either; only a reader racing the copy would see it).
@Suite(.runSlot(.minutes(3)))
struct PublishTests {
  static let group = "group.com.example.downloads"

  /// Found by the download I/O-error loops (IOErrorInjectionTests): a publish that failed with `EDQUOT` said "no
  /// space left on the disk … free space", which does not name a full quota. `ENOSPC` stays `diskFull`.
  @Test func aFullQuotaAtPublishIsReportedAsAQuotaNotAFullDisk() throws {
    let testRoot = try TestRoot()
    let root = try ContainerDirectory(path: testRoot.path)
    let quota = Publisher.classify(
      FileSystemError("rename", root.path + "/Downloads/a.bin", .diskQuotaExceeded), destination: "Downloads/a.bin",
      root: root)
    #expect(quota.code != .diskFull && "\(quota)".contains(String(cString: strerror(EDQUOT))), "\(quota)")
    let space = Publisher.classify(
      FileSystemError("rename", root.path + "/Downloads/a.bin", .noSpace), destination: "Downloads/a.bin", root: root)
    #expect(space.code == DownloadError.Code.diskFull, "\(space)")
  }

  @Test func publishFsyncsThePartialThenRenamesThenFsyncsTheDirectory() async throws {
    let env = try await TransferEnvironment()
    let log = SyscallRecorder.Log()
    let outcome = await SyscallRecorder.$current.withValue(log) {
      await env.run(url: "/gen/100000?seed=20", destination: "Downloads/sub/order.bin")
    }
    guard case .published = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    let calls = log.calls.filter { $0.call != .open }
    let base = env.container.path
    let partialSync = calls.firstIndex(of: .init(call: .fsync, path: base + "/" + TransferTests.partial))
    let rename = calls.firstIndex(of: .init(call: .rename, path: base + "/Downloads/sub/order.bin"))
    let directorySync = calls.lastIndex(of: .init(call: .fsync, path: base + "/Downloads/sub"))
    #expect(partialSync != nil && rename != nil && directorySync != nil, "\(calls)")
    if let partialSync, let rename, let directorySync {
      #expect(partialSync < rename && rename < directorySync, "\(calls)")
    }
    #expect(try env.holds("Downloads/sub/order.bin", FileServer.expectedBytes(size: 100_000, seed: 20)))
    try await env.close()
  }

  @Test func presenterInAnotherProcessHearsTheFileAppear() async throws {
    let env = try await TransferEnvironment()
    let presenter = try Child(.present(item: "Downloads"), root: env.testRoot.path, group: Self.group)
    #expect(await presenter.line { $0.hasPrefix("ready") } != nil)
    let outcome = await env.run(url: "/gen/300000?seed=21", destination: "Downloads/seen.bin")
    guard case .published = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    let line = await presenter.line { $0.hasPrefix("subitem") && $0.contains("seen.bin") }
    #expect(line?.contains("coordinated") == true && line?.contains("uncoordinated") == false, "\(presenter.output)")
    presenter.kill()
    try await env.close()
  }

  @Test func plantedSymlinkOnTheWayIsRefused() async throws {
    let env = try await TransferEnvironment()
    let outside = env.testRoot.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(
      atPath: env.container.path + "/Downloads/evil", withDestinationPath: outside)
    let outcome = await env.run(url: "/gen/100000?seed=22", destination: "Downloads/evil/escaped.bin")
    guard case .failed(let error, _, _) = outcome, error.code == .invalidDestination else {
      Issue.record("expected invalidDestination, got \(outcome)")
      return
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty, "nothing outside")
    #expect(try env.root.status(TransferTests.partial) == nil)
    try await env.close()
  }

  @Test func destinationsLeavingTheContainerAreRefused() async throws {
    let env = try await TransferEnvironment()
    for destination in ["../escaped.bin", "Downloads/../../escaped.bin", "/tmp/escaped.bin", ".coordination/x"] {
      let outcome = await env.run(url: "/gen/1000?seed=23", destination: destination)
      guard case .failed(let error, _, _) = outcome, error.code == .invalidDestination else {
        Issue.record("\(destination): expected invalidDestination, got \(outcome)")
        continue
      }
    }
    #expect(!FileManager.default.fileExists(atPath: env.testRoot.path + "/escaped.bin"))
    await #expect(try env.server.stats(for: "/gen/1000?seed=23").requests == 0, "refused before any byte is fetched")
    try await env.close()
  }

  @Test func symlinkPlantedAtTheDestinationIsNotFollowed() async throws {
    let env = try await TransferEnvironment()
    let outsideFile = env.testRoot.path + "/outside-file"
    try Data("keep".utf8).write(to: URL(fileURLWithPath: outsideFile))
    try FileManager.default.createSymbolicLink(
      atPath: env.container.path + "/Downloads/link.bin", withDestinationPath: outsideFile)
    let outcome = await env.run(url: "/gen/50000?seed=24", destination: "Downloads/link.bin")
    // The coordinator refuses an item that is a link leading out (absolute links are never followed).
    guard case .failed(let error, _, _) = outcome, error.code == .invalidDestination else {
      Issue.record("expected invalidDestination, got \(outcome)")
      return
    }
    #expect(try String(contentsOfFile: outsideFile, encoding: .utf8) == "keep")
    #expect(try env.root.status("Downloads/link.bin")?.kind == .symlink)
    try await env.close()
  }

  @Test func fullDiskWhileDownloadingFailsWithNothingPublished() async throws {
    let testRoot = try TestRoot()
    guard let disk = try SmallDisk.mount(in: testRoot, size: "2m") else { return }
    let env = try await TransferEnvironment(testRoot: testRoot, containerRoot: URL(fileURLWithPath: disk.path))
    let outcome = await env.run(url: "/gen/4000000?seed=25", destination: "Downloads/full.bin")
    guard case .failed(let error, _, _) = outcome, error.code == .diskFull else {
      Issue.record("expected diskFull, got \(outcome)")
      return
    }
    #expect(try env.root.status("Downloads/full.bin") == nil)
    #expect(try env.root.status(TransferTests.partial) == nil, "the partial is removed: the space is given back")
    try await env.close()
    _ = disk
  }

  @Test func fullDiskAtTheDestinationLeavesNothingThere() async throws {
    let env = try await TransferEnvironment()
    // Downloads/ on its own small file system: the publish copies across (EXDEV) and runs out of space.
    guard let disk = try SmallDisk.mount(in: env.testRoot, size: "1m", name: Self.group + "/Downloads") else { return }
    let outcome = await env.run(url: "/gen/2000000?seed=26", destination: "Downloads/big.bin")
    guard case .failed(let error, _, _) = outcome, error.code == .diskFull else {
      Issue.record("expected diskFull, got \(outcome)")
      return
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: disk.path).isEmpty, "no file, no temp file")
    #expect(try env.root.status(TransferTests.partial) == nil)
    try await env.close()
  }

  @Test func destinationOnAnotherFileSystemIsCopiedAndReplacedAtomically() async throws {
    let env = try await TransferEnvironment()
    guard let disk = try SmallDisk.mount(in: env.testRoot, size: "8m", name: Self.group + "/Downloads") else { return }
    let outcome = await env.run(url: "/gen/1000000?seed=27", destination: "Downloads/across.bin")
    guard case .published = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(try env.holds("Downloads/across.bin", FileServer.expectedBytes(size: 1_000_000, seed: 27)))
    #expect(try FileManager.default.contentsOfDirectory(atPath: disk.path) == ["across.bin"], "no temp file left")
    #expect(try env.root.status(TransferTests.partial) == nil)
    try await env.close()
  }
}
