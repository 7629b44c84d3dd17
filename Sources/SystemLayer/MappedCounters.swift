import Atomics
import Foundation
import Glibc
import Logging
import Synchronization
import SystemPackage

/// A small file of 64-bit counters shared by every process through a `SharedFileMapping`: reading one costs no
/// system call, which is what lets "nothing changed" checks stay off the kernel.
///
/// SIGBUS trap: the file is created and sized only here, its size is checked before mapping and it is never
/// shrunk; if someone else truncates it anyway, the mapping's SIGBUS guard counts a fault (`faultCount`). Every
/// `load`, `store` and `increment` compares that count with the last one it saw and, on a change, heals: logs an
/// error, gives the file its size back, maps it again and repeats the operation. A process would otherwise read and
/// write the guard's private zero page for good — blind to every other process (a writer that never messages
/// presenters registered later, an ack board whose acks never arrive).
///
/// Whoever gives a truncated file its size back (here or in `init`) also stores a random ``epoch``: the values were
/// lost, so a reader caching "nothing changed since value v" must compare the epoch as well — a counter reset to
/// zero and counted up again may show v once more.
///
/// Writes through the mapping produce no inotify event: use it for counters, never for notification (see
/// `ChangeSignal`).
package final class MappedCounters: @unchecked Sendable {  // `healing` serializes restores; the memory is atomics
  package static let fileSize = 4096
  /// Counters callers may use; the last word of the file is the epoch.
  package static let capacity = fileSize / 8 - 1
  private static let epochIndex = fileSize / 8 - 1
  private static let logger = Logger(label: "GroupContainer.MappedCounters")

  private let mapping: SharedFileMapping
  package var path: String { mapping.path }
  /// The mapped file's device and inode (changed by `rebind`): two names of one file (hard links) show one identity.
  package var identity: (device: UInt64, inode: UInt64) {
    (mappedDevice.load(ordering: .relaxed), mappedInode.load(ordering: .relaxed))
  }
  private let mappedDevice = Atomic<UInt64>(0)
  private let mappedInode = Atomic<UInt64>(0)
  /// The guard's fault count when this instance last checked (or healed).
  private let seenFaults = Atomic<UInt32>(0)
  private let healing = NSLock()

  /// Maps the counter file already open (read-write) as `fd`, which the counters now own: for a file opened
  /// beneath a container's descriptor (`SystemFD.openOrCreate(_:mode:size:)` with `fileSize`). `readOnly`: `fd` is
  /// open read-only (a read-only container); the counters are read, never stored (see `SharedFileMapping`).
  package init(fd: consuming SystemFD, readOnly: Bool = false) throws(FileSystemError) {
    do {
      let st = try fd.status()
      guard st.kind == .regular else { throw FileSystemError("mmap", fd.path, .invalidArgument) }
      // A creator may be between open and ftruncate: give it a moment before calling the file corrupt.
      var size = st.size
      var waited = 0
      while size < Int64(Self.fileSize) && waited < 100 {
        MonotonicClock.sleep(nanoseconds: 1_000_000)
        waited += 1
        size = try fd.status().size
      }
      // Still short: someone truncated it. Give it its size back (zeros: its owner sees a missing magic number).
      let truncated = size < Int64(Self.fileSize)
      if truncated && readOnly { throw FileSystemError("mmap", fd.path, .invalidArgument) }
      if truncated { try fd.truncate(to: Int64(Self.fileSize)) }
      mapping = try SharedFileMapping(fd: fd, reservation: Self.fileSize, privateCopy: readOnly)
      seenFaults.store(mapping.faultCount, ordering: .relaxed)
      mappedDevice.store(st.device, ordering: .relaxed)
      mappedInode.store(st.inode, ordering: .relaxed)
      if truncated { newEpoch() }
    }
  }

  /// SIGBUS faults taken so far: a change means the file was truncated and the counters read zero until `restore()`.
  package var faultCount: UInt32 { mapping.faultCount }

  /// After a fault: gives the file its size back and maps it again. The counters are whatever the file now holds.
  package func restore() throws(FileSystemError) {
    let truncated = try mapping.fileSize() < Self.fileSize
    if truncated { try mapping.truncate(to: Self.fileSize) }
    try mapping.remap()
    if truncated { newEpoch() }
  }

  /// Maps `fd` — the file that replaced this one (the container was removed and made again) — in place of the old,
  /// at the same addresses, and starts a new epoch: what readers cached from the old file is stale.
  package func rebind(to fd: consuming SystemFD) throws(FileSystemError) {
    healing.lock()
    defer { healing.unlock() }
    do {
      let st = try fd.status()
      guard st.kind == .regular else { throw FileSystemError("mmap", fd.path, .invalidArgument) }
      if st.size < Int64(Self.fileSize) { try fd.truncate(to: Int64(Self.fileSize)) }
      try mapping.remap(onto: fd)
      mappedDevice.store(st.device, ordering: .relaxed)
      mappedInode.store(st.inode, ordering: .relaxed)
    }
    seenFaults.store(mapping.faultCount, ordering: .relaxed)
    newEpoch()
  }

  /// Changes whenever the file lost its values (truncated, then sized again by any process).
  package var epoch: UInt64 { load(Self.epochIndex) }

  private func newEpoch() {
    atomic(Self.epochIndex).store(UInt64.random(in: 1...UInt64.max), ordering: .releasing)
  }

  /// Whether the guard counted a fault since the last check; if so the file is restored and mapped again.
  @inline(__always)
  private func healed() -> Bool {
    guard mapping.faultCount != seenFaults.load(ordering: .relaxed) else { return false }
    heal()
    return true
  }

  private func heal() {
    healing.lock()
    defer { healing.unlock() }
    let faults = mapping.faultCount
    guard faults != seenFaults.load(ordering: .relaxed) else { return }  // another thread healed it
    Self.logger.error(
      "'\(path)' was truncated under this process (SIGBUS caught): restoring its size and mapping it again")
    do {
      try restore()
    } catch {
      Self.logger.critical("cannot restore '\(path)': \(error); remove the container's .coordination directory")
    }
    seenFaults.store(faults, ordering: .relaxed)
  }

  /// Flushes the counters to disk. The corresponding C function is `fsync`.
  package func sync() throws(FileSystemError) { try mapping.sync() }

  /// Counter `index` itself, for callers that need other orderings; they skip the fault check (the next `load`,
  /// `store` or `increment` heals).
  package func atomic(_ index: Int) -> UnsafeAtomic<UInt64> {
    precondition(index >= 0 && index <= Self.epochIndex, "counter index out of range")
    return UnsafeAtomic(
      at: UnsafeMutableRawPointer(mapping.word(at: index * 8)).assumingMemoryBound(to: UInt64.AtomicRepresentation.self)
    )
  }

  /// The low 32 bits of counter `index` (little-endian): the word a futex waits on.
  package func futexWord(_ index: Int) -> UnsafeMutablePointer<UInt32> {
    UnsafeMutableRawPointer(mapping.word(at: index * 8)).assumingMemoryBound(to: UInt32.self)
  }

  package func load(_ index: Int) -> UInt64 {
    let value = atomic(index).load(ordering: .acquiring)
    return healed() ? atomic(index).load(ordering: .acquiring) : value
  }

  /// Loads counter `index` after an acquiring fence: reads of the shared mappings made before this call cannot
  /// be moved after it. The second load of a seqlock read: if the counter is unchanged, what was read in between
  /// was not written over.
  package func loadAfterFence(_ index: Int) -> UInt64 {
    Atomics.atomicMemoryFence(ordering: .acquiring)
    return load(index)
  }

  package func store(_ index: Int, _ value: UInt64) {
    atomic(index).store(value, ordering: .releasing)
    if healed() { atomic(index).store(value, ordering: .releasing) }
  }

  /// Stores `value` in counter `index` only when it holds 0; false when it held anything else (nothing stored).
  package func storeIfZero(_ index: Int, _ value: UInt64) -> Bool {
    let stored = atomic(index).compareExchange(expected: 0, desired: value, ordering: .acquiringAndReleasing).exchanged
    guard healed() else { return stored }
    return atomic(index).compareExchange(expected: 0, desired: value, ordering: .acquiringAndReleasing).exchanged
  }

  @discardableResult
  package func increment(_ index: Int) -> UInt64 {
    let value = atomic(index).loadThenWrappingIncrement(ordering: .acquiringAndReleasing) &+ 1
    return healed() ? atomic(index).loadThenWrappingIncrement(ordering: .acquiringAndReleasing) &+ 1 : value
  }
}
