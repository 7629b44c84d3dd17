import FileCoordination
import GroupContainerCore
import SystemLayer

/// The words of `.coordination/caches/<name>.counters`, the `MappedCounters` file a disk tier shares with every
/// process of the group (created and sized by `DiskTier`). Declared once, here; a test checks the ranges are
/// disjoint and fit (`layout`). Processes of older builds may map the same file: never move a range.
///
/// Free today: 259–510 (511 is the file's epoch, `MappedCounters`).
enum CacheCounters {
  /// One generation per shard (256 shards, by the first byte of an entry's hash: `CacheEntryFormat.shard`), bumped
  /// by every store and removal in the shard after the entry changed; a memory hit is valid while it holds.
  static let shardGenerations = 0..<256
  /// Approximate bytes and entries on disk: adjusted by every store and removal, set exactly by every trim.
  static let bytes = 256, count = 257
  /// Trims so far.
  static let trims = 258

  /// The file of the cache `name`, in `CoordinationPaths.caches`.
  static func fileName(of name: String) -> String { name + ".counters" }

  /// The word of shard `shard`'s generation.
  @inline(__always)
  static func generation(ofShard shard: Int) -> Int { shardGenerations.lowerBound + shard }

  static let layout = MappedLayout(
    file: CoordinationPaths.caches + "/<name>.counters",
    [
      ("shard generations", shardGenerations), ("bytes", MappedLayout.word(bytes)),
      ("count", MappedLayout.word(count)), ("trims", MappedLayout.word(trims)),
    ])
}
