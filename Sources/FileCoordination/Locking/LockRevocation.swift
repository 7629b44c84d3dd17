import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The container's words for revoking cached tree locks (Rule 4a, LockOrder.swift), in `.coordination/counters`.
/// Keys fall in 64 *buckets* (by a hash of the path, the same in every process); each bucket has a *generation*
/// and a *pending until* time (monotonic: CLOCK_MONOTONIC is one clock for every process of the machine), so a
/// contended `.forReplacing` write of one file stops caching only in its bucket, not in the whole container. One
/// *wake* word, a `ChangeSignal` futex every caching process's sweeper sleeps on, and its listener count, serve all
/// buckets. Reading them costs no system call.
/// Its words are declared in `CoordinationCounters`.
struct LockRevocation: Sendable {
  static let wakeCounter = CoordinationCounters.revocationWake
  static let listenersCounter = CoordinationCounters.revocationListeners
  static let buckets = CoordinationCounters.revocationGenerations.count
  static let generationBase = CoordinationCounters.revocationGenerations.lowerBound
  static let pendingUntilBase = CoordinationCounters.revocationPendingUntil.lowerBound
  /// How long a revoker's "pending" lasts after its last refusal: a revoker killed while waiting stops
  /// caching (in its bucket) for this long only.
  static let pendingWindow: UInt64 = 50_000_000

  let counters: MappedCounters
  var signal: ChangeSignal { ChangeSignal(counters, sequence: Self.wakeCounter, listeners: Self.listenersCounter) }

  /// FNV-1a over the path's bytes: the same bucket in every process (Swift's `Hasher` is seeded per process).
  static func bucket(of key: LockOrder.Key) -> Int {
    // Over each component's contiguous bytes: the generic `Sequence` form, not specialised here, looked up
    // `UTF8View: Collection` at run time in a new process's first access (a scan of every conformance record).
    var hash = StableHash.fnv1a32(UnsafeRawBufferPointer(start: nil, count: 0))
    let slash: UInt8 = 0x2F
    for component in key.path.components {
      var component = component
      hash = component.withUTF8 { StableHash.fnv1a32(UnsafeRawBufferPointer($0), continuing: hash) }
      hash = withUnsafeBytes(of: slash) { StableHash.fnv1a32($0, continuing: hash) }
    }
    return Int(hash % UInt32(buckets))
  }

  func generation(_ bucket: Int) -> UInt64 { counters.load(Self.generationBase + bucket) }

  func isPending(_ bucket: Int, now: UInt64) -> Bool { now < counters.load(Self.pendingUntilBase + bucket) }

  /// Whether a lock of `bucket` taken at `generation` may stay cached now: no revocation since, none under way.
  func mayCache(_ bucket: Int, since generation: UInt64, now: UInt64) -> Bool {
    !isPending(bucket, now: now) && self.generation(bucket) == generation
  }

  /// One waiting tree EX request: on its first refusal it marks a revocation pending in its bucket, bumps the
  /// bucket's generation and wakes every sweeper; on each later one it keeps "pending" alive, so no process caches
  /// a lock of that bucket meanwhile.
  final class Revoker {
    private let revocation: LockRevocation
    private let bucket: Int
    private var posted = false

    init(_ revocation: LockRevocation, _ bucket: Int) {
      self.revocation = revocation
      self.bucket = bucket
    }

    func contended() {
      // "Pending" first, then the bump: whoever sees the new generation also sees it pending.
      revocation.counters.store(
        LockRevocation.pendingUntilBase + bucket, MonotonicClock.nanoseconds() + LockRevocation.pendingWindow)
      guard !posted else { return }
      posted = true
      revocation.counters.increment(LockRevocation.generationBase + bucket)
      revocation.signal.post()
    }
  }
}
