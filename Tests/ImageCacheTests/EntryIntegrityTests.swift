import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestImageKit
import TestSupport
import Testing

@testable import ImageCache

/// Issue #33 item 6: what the disk tier promises — "a truncated or edited file is a miss", and a store never leaves
/// the cache over its limit when its process exits — checked with other processes (`groupctl`).
@Suite(.runSlot(.minutes(4))) struct EntryIntegrityTests {
  static let group = "group.com.example.integrity"

  static func entries(_ container: GroupContainer, _ cache: String) -> [String] {
    let directory = container.cachesURL.appendingPathComponent(cache).path
    return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
      .filter { $0.hasSuffix(".entry") && !$0.hasPrefix(".") }.map { directory + "/" + $0 }
  }

  /// Writes `bytes` over the file in place (same inode), making it again if a miss removed it.
  func writeInPlace(_ file: String, _ bytes: [UInt8]) throws {
    if !FileManager.default.fileExists(atPath: file) { FileManager.default.createFile(atPath: file, contents: nil) }
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
    try handle.write(contentsOf: Data(bytes))
    try handle.close()
  }

  /// 100 bytes edited inside a PNG's text chunk, in place (same size, same header, the image header still parses):
  /// a miss for another process (`groupctl cache get` exits 1) and for a fresh instance here.
  ///
  /// Mutants: `DiskTier.read` without the `CacheEntryFormat.imageMatches` guard — the edited image is served, and
  /// this test fails; the verified-inode shortcut without its change-time comparison (`known = true`) — the reader
  /// that verified the entry before serves the edit, and this test fails.
  @Test func anEditInsideAnImageIsAMiss() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let png = TestPNG.make(width: 64, height: 64, seed: 7, text: String(repeating: "a", count: 300))
    try await SharedImageCache(name: "edited", container: container).store(png, forKey: "k")
    // A reader that keeps nothing in memory has read (and verified) the entry before the edit.
    var diskOnly = SharedImageCache.Limits()
    diskOnly.memoryCost = 1
    let reader = try SharedImageCache(name: "edited", container: container, limits: diskOnly)
    #expect(try await reader.image(forKey: "k")?.data == png)
    let file = try #require(Self.entries(container, "edited").first)
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: file)))
    let comment = Array("Comment".utf8)
    let at = try #require(
      (0..<(bytes.count - comment.count)).first { Array(bytes[$0..<($0 + comment.count)]) == comment })
    for index in (at + 20)..<(at + 120) { bytes[index] = UInt8(ascii: "X") }
    try writeInPlace(file, bytes)

    // First the reader that verified it (a miss removes the entry), then another process.
    #expect(try await reader.image(forKey: "k") == nil, "the reader that had verified the entry served the edit")
    try writeInPlace(file, bytes)
    let get = try await groupctl(["cache", "get", Self.group, "k", "--cache", "edited", "--root", root.path])
    #expect(get.status == 1, "the edited entry was served: \(get.err)")
    try writeInPlace(file, bytes)
    #expect(try await SharedImageCache(name: "edited", container: container).image(forKey: "k") == nil)
    // The unedited image is a hit (the whole-entry checksum is not a miss for every entry).
    try await SharedImageCache(name: "edited", container: container).store(png, forKey: "k")
    let fresh = try SharedImageCache(name: "edited", container: container)
    #expect(try await fresh.image(forKey: "k")?.data == png)
  }

  /// Short-lived `groupctl cache store` processes, each storing one image: once they are done, the entries on disk
  /// (counted from the directory, not the cache's counters) are within the limit they stored with.
  ///
  /// Mutant: `store` calling `scheduleTrimIfNeeded()` instead of `trimIfOverLimit()` (the trim queued, the process
  /// exits first) — the cache ends over its limit and this test fails.
  @Test func shortLivedStoresLeaveTheCacheWithinItsLimit() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let limit = 60_000
    for index in 0..<14 {
      let file = root.path + "/image-\(index).png"
      try TestPNG.make(width: 100, height: 100, seed: UInt64(index)).write(to: URL(fileURLWithPath: file))
      let store = try await groupctl([
        "cache", "store", Self.group, "k\(index)", file, "--cache", "bounded", "--disk-limit", "\(limit)",
        "--root", root.path,
      ])
      #expect(store.status == 0, "\(store.err)")
      let bytes = try Self.entries(container, "bounded").reduce(0) {
        $0 + ((try FileManager.default.attributesOfItem(atPath: $1)[.size] as? Int) ?? 0)
      }
      #expect(bytes <= limit, "after store \(index): \(bytes) bytes on disk, limit \(limit)")
    }
  }
}
