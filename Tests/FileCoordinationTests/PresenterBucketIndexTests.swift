import Foundation
import Glibc
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The presenter buckets' index (PresenterBucketIndex.swift, #37 item 5) across real processes: a process that has
/// not listed a bucket reads it from the one file another process wrote when it listed it, and never takes an index
/// older than the bucket — a presenter registered after the index was written is asked all the same.
///
/// Mutants, each built and seen failing:
/// - the index taken whatever generation it names (`PresenterBucketIndex.decode` without the generation check):
///   `anIndexOlderThanItsBucketIsNotUsed` — the fresh lookup misses the fourth presenter and a new process's write
///   never asks it;
/// - no index written (`PresenterRegistry.writeIndex` returns at once): `aNewProcessReadsTheBucketsFromTheIndex` —
///   the fresh lookup reads the record files;
/// - the index kept in its bucket directory (`presenters/<h>/.index`): `theIndexesLeaveARegistryWhosePresentersLeftEmpty`
///   — the bucket outlives its last record, and the registry no longer looks empty.
@Suite(.runSlot(.minutes(3))) struct PresenterBucketIndexTests {
  let group = "group.com.example.bucketindex"
  let item = "Documents/p.txt"

  func presenter(_ root: TestRoot) async throws -> Child {
    let child = try Child(.present(item: item), root: root.path, group: group)
    await child.line { $0.hasPrefix("ready") }
    return child
  }

  /// A new process's coordinated write of the item (it lists what it has no index for, and writes the indexes).
  func newProcessWrite(_ root: TestRoot) async throws {
    let writer = try Child(
      .access(mode: .write, item: item, count: 1, holdMS: 0, log: root.path + "/w.log"), root: root.path, group: group)
    #expect(await writer.exit() == 0)
  }

  /// A registry with nothing cached, over this process's space: what a new process reads.
  func fresh(_ container: GroupContainer) throws -> PresenterRegistry {
    let space = try container.coordinationSpace()
    return PresenterRegistry(
      directory: space.directory + "/presenters", root: space.root, counters: space.counters,
      fileMode: space.fileMode, directoryMode: space.directoryMode)
  }

  func indexFile(_ container: GroupContainer) throws -> String {
    let bucket = PresenterRegistry.bucketName(try ContainerPath(item).bytesHash)
    return container.url.path + "/" + PresenterBucketIndex.path(of: bucket)
  }

  @Test func aNewProcessReadsTheBucketsFromTheIndex() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let presenters = [try await presenter(root), try await presenter(root), try await presenter(root)]
    try await newProcessWrite(root)
    let path = try ContainerPath(item)
    // Written by the writer, read here: every record of the item, no record file opened.
    let registry = try fresh(container)
    let found = registry.lookup([path]).records
    #expect(Set(found.compactMap { $0.process.pid }) == Set(presenters.map(\.pid)), "\(found)")
    #expect(registry.filesRead.load(ordering: .relaxed) == 0)
    #expect(registry.indexesRead.load(ordering: .relaxed) == path.prefixHashes.count)
    // Every presenter was asked by the writer, and is asked by a write of this process too.
    for child in presenters { await PresenterSemanticsTests.waitFor("relinquishToWriter", 1, child) }
    let url = container.documentsURL.appendingPathComponent("p.txt")
    try FileCoordinator().coordinate(writingItemAt: url) { try container.write(Data("x".utf8), to: $0) }
    for child in presenters { await PresenterSemanticsTests.waitFor("relinquishToWriter", 2, child) }
    for child in presenters { child.kill() }
  }

  @Test func theIndexesLeaveARegistryWhosePresentersLeftEmpty() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let presenter = QuietPresenter(url: container.documentsURL.appendingPathComponent("p.txt"))
    try FileCoordinator.addFilePresenter(presenter)
    try await newProcessWrite(root)  // it lists the buckets of this process's presenter and writes their indexes
    #expect(FileManager.default.fileExists(atPath: try indexFile(container)))
    FileCoordinator.removeFilePresenter(presenter)
    // The indexes live outside `presenters/`: its buckets went with the record, so it looks empty (the fast path).
    #expect(try fresh(container).emptyGeneration() != nil)
    // And the buckets' indexes went with them (mutant: left behind, one file per bucket ever listed).
    let indexes = container.url.path + "/" + PresenterBucketIndex.directory
    #expect(try FileManager.default.contentsOfDirectory(atPath: indexes) == [])
  }

  @Test func anIndexOlderThanItsBucketIsNotUsed() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let first = [try await presenter(root), try await presenter(root), try await presenter(root)]
    try await newProcessWrite(root)
    let stale = try Data(contentsOf: URL(fileURLWithPath: try indexFile(container)))
    // Registered after the index was written (as a process of an older build would: a record, a bump, no index).
    let late = try await presenter(root)
    let path = try ContainerPath(item)
    let registry = try fresh(container)
    let found = registry.lookup([path]).records
    #expect(found.contains { $0.process.pid == late.pid }, "\(found)")
    #expect(found.count == 4)
    #expect(registry.filesRead.load(ordering: .relaxed) >= 1)
    // That listing wrote the index again: the next new process reads all four from it.
    let again = try fresh(container)
    #expect(again.lookup([path]).records.count == 4)
    #expect(again.filesRead.load(ordering: .relaxed) == 0)
    // A new process's write asks the late presenter too.
    try await newProcessWrite(root)
    await PresenterSemanticsTests.waitFor("relinquishToWriter", 1, late)
    // The stale index put back (a slow lister's rename after a newer one's) is not used either.
    try stale.write(to: URL(fileURLWithPath: try indexFile(container)))
    let afterStale = try fresh(container)
    #expect(afterStale.lookup([path]).records.count == 4)
    #expect(afterStale.filesRead.load(ordering: .relaxed) >= 1)
    for child in first + [late] { child.kill() }
  }

  @Test func aDamagedIndexIsAListingAsWithout() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let presenters = [try await presenter(root), try await presenter(root)]
    try await newProcessWrite(root)
    let path = try ContainerPath(item)
    let file = try indexFile(container)
    let valid = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
    let listing = PresenterRegistry.bucketName(path.bytesHash)
    let generation = try #require(
      String(decoding: valid.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self).split(separator: " ").dropFirst(3)
        .first.flatMap { UInt64($0) })
    #expect(PresenterBucketIndex.decode(valid, listing: listing, generation: generation)?.records.count == 2)
    // Each is refused by the decoder; a lookup then lists the bucket and finds both presenters.
    let damaged: [(String, [UInt8])] = [
      ("empty", []),
      ("cut", Array(valid.dropLast(7))),
      (
        "another bucket's",
        Array(
          String(decoding: valid, as: UTF8.self).replacingOccurrences(
            of: listing, with: PresenterRegistry.bucketName(path.bytesHash &+ 1)
          ).utf8)
      ),
      ("a record that is not one", valid + Array("1.2.3 2\n{}\n".utf8)),
      ("a length past the end", valid + Array("9.9.9 900\n{".utf8)),
      ("over the limit", valid + [UInt8](repeating: 0x20, count: PresenterBucketIndex.maxBytes)),
    ]
    for (what, bytes) in damaged {
      try Data(bytes).write(to: URL(fileURLWithPath: file))
      let registry = try fresh(container)
      let found = registry.lookup([path]).records
      #expect(Set(found.compactMap { $0.process.pid }) == Set(presenters.map(\.pid)), "\(what): \(found)")
      #expect(registry.filesRead.load(ordering: .relaxed) == 2, "\(what)")
    }
    // A FIFO in its place: no hang, a listing.
    try FileManager.default.removeItem(atPath: file)
    #expect(mkfifo(file, 0o644) == 0)
    let registry = try fresh(container)
    #expect(registry.lookup([path]).records.count == 2)
    for child in presenters { child.kill() }
  }
  /// The decoder takes the one form the encoder writes and nothing else: each record line a name a lister can have
  /// taken and a plain count (the fuzzer checks that whatever decodes encodes back to the same bytes).
  @Test func theDecoderTakesOnlyWhatTheEncoderWrites() throws {
    let records: [(name: String, bytes: [UInt8])] = [("1.2.3", Array("abc".utf8)), ("4.5.6", [])]
    let valid = PresenterBucketIndex.encode(listing: "b1", generation: 7, hasBelow: true, records: records)
    let decoded = try #require(PresenterBucketIndex.decode(valid, listing: "b1", generation: 7))
    #expect(decoded.hasBelow && decoded.records.map(\.name) == ["1.2.3", "4.5.6"])
    #expect(decoded.records.map { Array($0.bytes) } == records.map(\.bytes))
    #expect(PresenterBucketIndex.decode(valid, listing: "b1", generation: 8) == nil, "another generation")
    let header = Array("gc-presenter-index 1 b1 7 1\n".utf8)
    for line in [
      "1.2.3 03\nabc\n", "1.2.3 +3\nabc\n", " 3\nabc\n", ".x 3\nabc\n", "a/b 3\nabc\n", "1.2.3  3\nabc\n",
      "1.2.3 3 \nabc\n", "1.2.3 0000000003\nabc\n", "1.2.3 3\nabcd\n", "1.2.3 3\nab", "1.2.3\nabc\n",
    ] {
      #expect(PresenterBucketIndex.decode(header + Array(line.utf8), listing: "b1", generation: 7) == nil, "\(line)")
    }
    #expect(PresenterBucketIndex.decode(header + [0xff] + Array(" 0\n\n".utf8), listing: "b1", generation: 7) == nil)
    #expect(PresenterBucketIndex.decode(header + Array("x 0\n\n".utf8), listing: "b1", generation: 7) != nil)
  }
}
