import Atomics
import Glibc
import SystemPackage

/// A small file of 64-bit counters shared by every process through `mmap(MAP_SHARED)`: reading one costs no
/// system call, which is what lets "nothing changed" checks stay off the kernel.
///
/// SIGBUS trap: a shared mapping of a file someone truncates crashes every process that touches the lost
/// pages. So the file is created and sized only here, its size is checked before mapping, and it is never
/// shrunk. Writes through the mapping produce no inotify event: use it for counters, never for notification.
package final class MappedCounters: @unchecked Sendable {  // immutable after init; the memory is atomics only
  package static let fileSize = 4096
  package static let capacity = fileSize / 8

  private let base: UnsafeMutableRawPointer
  package let path: String

  /// Opens (creating if needed) the counter file at `path`.
  package init(path: String, mode: mode_t) throws(FileSystemError) {
    self.path = path
    let fd = try Self.openOrCreate(path, mode: mode)
    defer { fd.close() }
    let st = try fd.status()
    // A creator may be between open and ftruncate: give it a moment before calling the file corrupt.
    var size = st.size
    var waited = 0
    while size < Int64(Self.fileSize) && waited < 100 {
      MonotonicClock.sleep(nanoseconds: 1_000_000)
      waited += 1
      size = try fd.status().size
    }
    guard st.kind == .regular, size >= Int64(Self.fileSize) else {
      throw FileSystemError("mmap", path, .invalidArgument)
    }
    guard let mapped = mmap(nil, Self.fileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.rawValue, 0),
      mapped != MAP_FAILED
    else {
      throw FileSystemError("mmap", path, Errno(rawValue: errno))
    }
    base = mapped
  }

  private static func openOrCreate(_ path: String, mode: mode_t) throws(FileSystemError) -> SystemFD {
    do {
      let fd = try SystemFD.open(path, [.readWrite, .exclusiveCreate], mode: mode)
      try fd.setPermissions(mode)
      try fd.truncate(to: Int64(Self.fileSize))
      return fd
    } catch {
      guard error.errno == .fileExists else { throw error }
      return try SystemFD.open(path, .readWrite)
    }
  }

  deinit { munmap(base, Self.fileSize) }

  private func atomic(_ index: Int) -> UnsafeAtomic<UInt64> {
    precondition(index >= 0 && index < Self.capacity, "counter index out of range")
    return UnsafeAtomic(at: base.assumingMemoryBound(to: UInt64.AtomicRepresentation.self) + index)
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
