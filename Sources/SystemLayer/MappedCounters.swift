import Atomics
import Glibc
import SystemPackage

/// A small file of 64-bit counters shared by every process through a `SharedFileMapping`: reading one costs no
/// system call, which is what lets "nothing changed" checks stay off the kernel.
///
/// SIGBUS trap: the file is created and sized only here, its size is checked before mapping and it is never
/// shrunk; if someone else truncates it anyway, the mapping's SIGBUS guard counts a fault (`faultCount`) and
/// `restore()` sizes and maps it again. Writes through the mapping produce no inotify event: use it for counters,
/// never for notification (see `ChangeSignal`).
package final class MappedCounters: @unchecked Sendable {  // immutable after init; the memory is atomics only
  package static let fileSize = 4096
  package static let capacity = fileSize / 8

  private let mapping: SharedFileMapping
  package var path: String { mapping.path }

  /// Opens (creating if needed) the counter file at `path`.
  package init(path: String, mode: mode_t) throws(FileSystemError) {
    let fd = try Self.openOrCreate(path, mode: mode)
    do throws(FileSystemError) {
      let st = try fd.status()
      // A creator may be between open and ftruncate: give it a moment before calling the file corrupt.
      var size = st.size
      var waited = 0
      while size < Int64(Self.fileSize) && waited < 100 {
        MonotonicClock.sleep(nanoseconds: 1_000_000)
        waited += 1
        size = try fd.status().size
      }
      guard st.kind == .regular else { throw FileSystemError("mmap", path, .invalidArgument) }
      // Still short: someone truncated it. Give it its size back (zeros: its owner sees a missing magic number).
      if size < Int64(Self.fileSize) { try fd.truncate(to: Int64(Self.fileSize)) }
      mapping = try SharedFileMapping(fd: fd, reservation: Self.fileSize)
    } catch {
      fd.close()
      throw error
    }
  }

  /// Maps the counter file already open (read-write) as `fd`, which the counters now own: for a file opened
  /// beneath a container's descriptor (`SystemFD.openOrCreate(_:mode:size:)` with `fileSize`).
  package init(fd: SystemFD) throws(FileSystemError) {
    do throws(FileSystemError) {
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
      if size < Int64(Self.fileSize) { try fd.truncate(to: Int64(Self.fileSize)) }
      mapping = try SharedFileMapping(fd: fd, reservation: Self.fileSize)
    } catch {
      fd.close()
      throw error
    }
  }

  private static func openOrCreate(_ path: String, mode: mode_t) throws(FileSystemError) -> SystemFD {
    do throws(FileSystemError) {
      let fd = try SystemFD.open(path, [.readWrite, .exclusiveCreate], mode: mode)
      try fd.setPermissions(mode)
      try fd.truncate(to: Int64(Self.fileSize))
      return fd
    } catch {
      guard error.errno == .fileExists else { throw error }
      return try SystemFD.open(path, .readWrite)
    }
  }

  /// SIGBUS faults taken so far: a change means the file was truncated and the counters read zero until `restore()`.
  package var faultCount: UInt32 { mapping.faultCount }

  /// After a fault: gives the file its size back and maps it again. The counters are whatever the file now holds.
  package func restore() throws(FileSystemError) {
    if try mapping.fileSize() < Self.fileSize { try mapping.truncate(to: Self.fileSize) }
    try mapping.remap()
  }

  /// Flushes the counters to disk. The corresponding C function is `fsync`.
  package func sync() throws(FileSystemError) { try mapping.sync() }

  package func atomic(_ index: Int) -> UnsafeAtomic<UInt64> {
    precondition(index >= 0 && index < Self.capacity, "counter index out of range")
    return UnsafeAtomic(
      at: UnsafeMutableRawPointer(mapping.word(at: index * 8)).assumingMemoryBound(to: UInt64.AtomicRepresentation.self)
    )
  }

  /// The low 32 bits of counter `index` (little-endian): the word a futex waits on.
  package func futexWord(_ index: Int) -> UnsafeMutablePointer<UInt32> {
    UnsafeMutableRawPointer(mapping.word(at: index * 8)).assumingMemoryBound(to: UInt32.self)
  }

  package func load(_ index: Int) -> UInt64 { atomic(index).load(ordering: .acquiring) }

  package func store(_ index: Int, _ value: UInt64) {
    atomic(index).store(value, ordering: .releasing)
  }

  @discardableResult
  package func increment(_ index: Int) -> UInt64 {
    atomic(index).loadThenWrappingIncrement(ordering: .acquiringAndReleasing) &+ 1
  }
}
