import FileCoordination
import Foundation
import GroupContainerCore
import ImageCache
import SystemLayer
import TestImageKit
import TestSupport
import Testing

/// Coherence across processes: once `store` or `removeImage` returned in one process, no process returns the old
/// image — from disk or from its memory tier.
///
/// Mutants this suite catches (each made once, watched failing, restored):
/// - the store increments the shard generation before the rename (a reader caches the old image under the new
///   stamp): stale reads in `neverAnOldImageAfterTheCallReturned`;
/// - a memory hit that does not check the stamp: stale reads there, and `outsideRemovalReachesMemoryTiers` times out;
/// - the reader takes the stamp after reading the entry instead of before: stale reads;
/// - the storing process keeps its image in memory even when another store of the shard came between: stale reads.
@Suite(.runSlot(.minutes(3)))
struct SharedImageCacheCoherenceTests {
  struct Op {
    var kind: Character
    var key: String
    var version: UInt64
    var start: UInt64
    var end: UInt64
  }

  static func parse(_ text: String) -> [Op] {
    text.split(separator: "\n").compactMap { line in
      let f = line.split(separator: " ")
      guard f.count == 5, let start = UInt64(f[3]), let end = UInt64(f[4]) else { return nil }
      return Op(kind: f[0].first!, key: String(f[1]), version: UInt64(f[2]) ?? .max, start: start, end: end)
    }
  }

  /// Whether every candidate that could have produced `version` was superseded — by an op that started after the
  /// candidate ended and ended before the read began — so the read returned something definitely old.
  static func isStale(read: Op, writes: [Op]) -> Bool {
    let candidates: [(start: UInt64, end: UInt64)]
    if read.version == 0 {
      candidates = [(0, 0)] + writes.filter { $0.kind == "R" }.map { ($0.start, $0.end) }
    } else {
      candidates = writes.filter { $0.kind == "S" && $0.version == read.version }.map { ($0.start, $0.end) }
      if candidates.isEmpty { return true }  // a version nobody wrote
    }
    return candidates.allSatisfy { candidate in
      writes.contains { $0.start > candidate.end && $0.end < read.start }
    }
  }

  @Test func neverAnOldImageAfterTheCallReturned() async throws {
    let root = try TestRoot()
    let container = try root.container()
    _ = try SharedImageCache(name: "coherence", container: container)
    let keys = 6
    let logs = (0..<4).map { root.path + "/log\($0)" }
    let writers = try (1...2).map { writer in
      try Child(
        .cacheWriter(cache: "coherence", writer: writer, operations: 400, keys: keys, log: logs[writer - 1]),
        root: root.path, group: container.identifier)
    }
    let readers = try (2...3).map { index in
      try Child(
        .cacheReader(cache: "coherence", milliseconds: 2500, keys: keys, log: logs[index]), root: root.path,
        group: container.identifier)
    }
    for child in writers + readers { #expect(await child.exit() == 0, "\(child.errors.text)") }
    let writes = try (0..<2).flatMap { Self.parse(try String(contentsOfFile: logs[$0], encoding: .utf8)) }
    let reads = try (2..<4).flatMap { Self.parse(try String(contentsOfFile: logs[$0], encoding: .utf8)) }
    #expect(writes.count == 800)
    #expect(reads.count > 1000, "the readers read too little to tell anything")
    #expect(!reads.contains { $0.version == .max }, "a reader got an image that is not whole")
    var byKey: [String: [Op]] = [:]
    for write in writes { byKey[write.key, default: []].append(write) }
    let stale = reads.filter { Self.isStale(read: $0, writes: byKey[$0.key] ?? []) }
    let staleCount = stale.count
    #expect(staleCount == 0, "\(staleCount) of \(reads.count) reads returned an old image, e.g. \(stale.prefix(2))")
    // The readers must have exercised the memory tier, or the test says nothing about it.
    let hits = readers.compactMap { $0.output.last }.compactMap { line in
      line.split(separator: " ").first { $0.hasPrefix("memoryHits=") }.flatMap { Int($0.dropFirst(11)) }
    }
    #expect(hits.reduce(0, +) > 100, "memory hits: \(hits)")
  }

  @Test func outsideRemovalReachesMemoryTiers() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let cache = try SharedImageCache(name: "outside", container: container)
    try await cache.store(TestPNG.make(width: 16, height: 4, seed: 42), forKey: "k")
    let watcher = try Child(.cacheWatch(cache: "outside", key: "k"), root: root.path, group: container.identifier)
    defer { watcher.kill() }
    await watcher.line { $0 == "now 42" }
    // `rm` of the entry: nobody announced it; the other process's memory tier must let go.
    let entry = try #require(
      try FileManager.default.contentsOfDirectory(atPath: container.cachesURL.path + "/outside").first {
        $0.hasSuffix(".entry")
      })
    try FileManager.default.removeItem(atPath: container.cachesURL.path + "/outside/" + entry)
    await watcher.line { $0 == "now nil" }
    // Stored again, then the whole cache directory removed: misses, never errors, and stores work again.
    try await cache.store(TestPNG.make(width: 16, height: 4, seed: 43), forKey: "k")
    await watcher.line { $0 == "now 43" }
    try await removeTree(container.cachesURL.path)
    await watcher.line { $0 == "now nil" }
    // This process learns of it through its own inotify watch, as asynchronously: wait (bounded) for the miss.
    let deadline = Date().addingTimeInterval(Wait.condition)
    while try await cache.image(forKey: "k") != nil, Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
    #expect(try await cache.image(forKey: "k") == nil)
    try await cache.store(TestPNG.make(width: 16, height: 4, seed: 44), forKey: "k")
    await watcher.line { $0 == "now 44" }
    #expect(watcher.process.isRunning, "the watching process failed: \(watcher.errors.text)")
  }

  @Test func aStoreInOneProcessReplacesTheMemoryImageOfAnother() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let cache = try SharedImageCache(name: "replace", container: container)
    try await cache.store(TestPNG.make(width: 16, height: 4, seed: 1), forKey: "k")
    let watcher = try Child(.cacheWatch(cache: "replace", key: "k"), root: root.path, group: container.identifier)
    defer { watcher.kill() }
    await watcher.line { $0 == "now 1" }
    for version in 2...20 as ClosedRange<UInt64> {
      try await cache.store(TestPNG.make(width: 16, height: 4, seed: version), forKey: "k")
      await watcher.line { $0 == "now \(version)" }
    }
    try await cache.removeImage(forKey: "k")
    await watcher.line { $0 == "now nil" }
  }

  /// `rm -rf` of the whole container: the counters file goes too, and every process must count in the new one —
  /// or a process that mapped the old one would keep serving its memory image after another process's store.
  /// Mutant: `rebindCountersIfRemoved` doing nothing (the watcher never says "now 46").
  @Test func removingTheWholeContainerKeepsMemoryTiersCoherent() async throws {
    let root = try TestRoot()
    let container = try root.container()
    do {
      let cache = try SharedImageCache(name: "whole", container: container)
      try await cache.store(TestPNG.make(width: 16, height: 4, seed: 44), forKey: "k")
    }
    let watcher = try Child(.cacheWatch(cache: "whole", key: "k"), root: root.path, group: container.identifier)
    defer { watcher.kill() }
    #expect(await watcher.line { $0 == "now 44" } != nil)
    try await removeTree(container.url.path)
    #expect(await watcher.line { $0 == "now nil" } != nil)
    // New processes (each `groupctl cache store`) map the new counters file; the watcher mapped the old one.
    let groupctl = productsDirectory.appendingPathComponent("groupctl").path
    for version in [45, 46] as [UInt64] {
      let file = root.path + "/v\(version).png"
      try TestPNG.make(width: 16, height: 4, seed: version).write(to: URL(fileURLWithPath: file))
      let status = try runTool(
        groupctl, ["cache", "store", container.identifier, "k", file, "--cache", "whole", "--root", root.path])
      #expect(status == 0)
      #expect(await watcher.line { $0 == "now \(version)" } != nil, "\(watcher.output)")
    }
  }
}
