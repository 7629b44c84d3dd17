import GroupContainerCore
import SystemLayer

/// The lock-order rule, in one place.
///
/// Every coordinated item X has two lock files under `.coordination/locks/`, named by a hash of X's path:
/// - the **item lock**: `LOCK_SH` to read X, `LOCK_EX` to write X;
/// - the **tree lock**: `LOCK_SH` by every access to anything inside X, `LOCK_EX` by a write of X with
///   `.forDeleting`, `.forMoving` or `.forReplacing`.
///
/// So coordinating inside a directory does not lock the directory itself, while deleting, moving or replacing a
/// directory excludes every access beneath it — Apple's semantics. The container root counts as an ancestor of
/// everything.
///
/// **Rule 1: take all locks of one access in one global order** — by depth, then path, tree lock before item
/// lock — and merge duplicates to the strongest mode. Every process sorts the same way, so no two accesses wait
/// for each other in a cycle: multi-item accesses are deadlock-free by construction.
/// *What if you don't:* two processes writing A+B and B+A would each hold one lock and wait for the other.
///
/// **Rule 2: never convert SH to EX.** flock drops the lock in between, so the "upgrade" is two accesses.
/// A nested access that needs a stronger mode than its owner already holds is refused with an error.
///
/// **Rule 3: lock stable side files, never the item** — an atomic replace gives the item a new inode.
/// A lock file is removed only while nobody holds it, and nobody then takes a lock on the removed file (Rule 3b,
/// LockFileSweep.swift).
///
/// **Rule 4a: shared tree locks are cached, and revoked on demand** (LockTable.swift, `LockRevocation`). After the
/// last access of a process below a directory ends, the process keeps that directory's tree lock (and the root's)
/// `LOCK_SH`, so its next access there takes one flock (the item's) instead of one per depth. This never weakens
/// exclusion — a cached lock is a flock still held — it only delays the rare tree `LOCK_EX`, so:
/// - *Revocation.* Lock keys fall in 64 buckets (a hash of the path). A tree EX request refused by `LOCK_NB`
///   marks a revocation *pending* in its bucket (a mapped "until" time, refreshed on every refusal), bumps the
///   bucket's *generation* and posts one futex word that wakes every caching process's sweeper thread (no message,
///   no file). Each sweeper drops at once its idle cached locks whose bucket moved on.
/// - *The generation check.* A cached lock is used again only while its bucket's generation read just before its
///   flock is still current; otherwise it is dropped and taken again. No lock is cached while a revocation is
///   pending in its bucket, and never one taken before the bucket's latest bump.
/// - *The linger.* Idle cached locks are dropped after `LockTable.lingerNanoseconds` (100 ms), so a process
///   stopped (SIGSTOP, a debugger) more than that after its last access blocks nothing. One stopped within it
///   keeps blocking delete/move/replace of the directories above its last access (never reads or writes of
///   items) until it runs again — as a process stopped inside an access always did; ``FileCoordinator/lockTimeout``
///   bounds the wait and names it. A dead process's locks go with it (flock).
/// Only tree locks are cached, only `LOCK_SH`, and a request for EX of a lock this process has cached drops it
/// first (Rule 2: never convert).
/// *What if you don't:* three flocks per access below `Documents` (six calls, a third of an empty access); a
/// cache without revocation makes an idle process block every delete of its directories for good.
package enum LockOrder {
  enum Kind: Int, Sendable { case tree = 0, item = 1 }

  struct Key: Hashable, Comparable, Sendable {
    var path: ContainerPath
    var kind: Kind

    static func < (lhs: Key, rhs: Key) -> Bool {
      if lhs.path != rhs.path { return lhs.path < rhs.path }
      return lhs.kind.rawValue < rhs.kind.rawValue
    }

    /// The lock file name: 32 hex digits of FNV-1a-128 over kind and path. A collision only makes two items
    /// share a lock (over-locking), never a missed lock; the order stays total because keys sort by path.
    /// Over contiguous bytes: the `Sequence` overload ran unspecialised here, and its iterator's associated type
    /// was looked up at run time — a scan of every conformance record in a new process's first access.
    var fileName: String {
      let bytes = Array((kind == .tree ? "tree:" : "item:").utf8) + Array(path.string.utf8)
      return StableHash.hex(bytes.withUnsafeBytes { StableHash.fnv1a128($0) })
    }
  }

  /// Whether `name` has the form of a `Key.fileName`: what a sweep of the lock directory may remove, and nothing
  /// else (and what `groupctl doctor` counts).
  package static func isLockFileName(_ name: String) -> Bool {
    name.utf8.count == 32 && name.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
  }

  /// What an access does to its item.
  enum Access: Sendable {
    case read
    case write
    /// Delete, move or replace: also excludes everything inside the item.
    case writeTree
  }

  struct Request: Sendable {
    var key: Key
    var mode: FlockMode
  }

  /// The locks for a set of accesses, merged and sorted by Rule 1.
  static func plan(_ accesses: [(path: ContainerPath, access: Access)]) -> [Request] {
    if accesses.count == 1 { return plan(accesses[0].path, accesses[0].access) }
    var modes: [Key: FlockMode] = [:]
    func need(_ key: Key, _ mode: FlockMode) {
      if mode == .exclusive || modes[key] == nil { modes[key] = mode }
    }
    for (path, access) in accesses {
      for ancestor in [ContainerPath.root] + path.ancestors where ancestor != path {
        need(Key(path: ancestor, kind: .tree), .shared)
      }
      switch access {
      case .read:
        need(Key(path: path, kind: .item), .shared)
      case .write:
        need(Key(path: path, kind: .item), .exclusive)
      case .writeTree:
        need(Key(path: path, kind: .tree), .exclusive)
        need(Key(path: path, kind: .item), .exclusive)
      }
    }
    return modes.map { Request(key: $0.key, mode: $0.value) }.sorted { $0.key < $1.key }
  }

  /// `plan` for one access, built already in order (the common case; no dictionary, no sort): the tree locks of
  /// the root and each proper ancestor, one per depth, outermost first, then the item's own, tree before item.
  /// The same requests as the general route (LockOrderTests checks it).
  static func plan(_ path: ContainerPath, _ access: Access) -> [Request] {
    var requests: [Request] = []
    requests.reserveCapacity(path.depth + 2)
    if !path.isRoot {
      requests.append(Request(key: Key(path: .root, kind: .tree), mode: .shared))
      for depth in 1..<path.depth {
        let ancestor = ContainerPath(unchecked: Array(path.components[0..<depth]))
        requests.append(Request(key: Key(path: ancestor, kind: .tree), mode: .shared))
      }
    }
    switch access {
    case .read:
      requests.append(Request(key: Key(path: path, kind: .item), mode: .shared))
    case .write:
      requests.append(Request(key: Key(path: path, kind: .item), mode: .exclusive))
    case .writeTree:
      requests.append(Request(key: Key(path: path, kind: .tree), mode: .exclusive))
      requests.append(Request(key: Key(path: path, kind: .item), mode: .exclusive))
    }
    return requests
  }
}
