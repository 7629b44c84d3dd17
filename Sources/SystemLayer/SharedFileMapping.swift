import CSystemShims
import Glibc
import Synchronization
import SystemPackage

/// A file mapped `MAP_SHARED` into every process that opens it: loads and stores through it cost no system call
/// and survive the death of the process that made them (the pages belong to the page cache, not the process).
///
/// The mapping reserves `reservation` bytes of address space once, however large the file is now, so a file that
/// grows never needs remapping; only the first `fileSize` bytes may be touched (a page past the end of the file
/// raises SIGBUS). Grow the file with `allocate(upTo:)`, which reserves disk blocks: a full disk is an `ENOSPC`
/// there, never a SIGBUS on a later store.
///
/// SIGBUS trap (TRAPS.md): someone may still truncate the file while it is mapped. The range is registered with
/// the SIGBUS guard of CSystemShims, which turns the crash into a zero page and a count: the owner compares
/// `faultCount` with what it saw before, treats a change as corruption, and calls `remap()` once the file is
/// sized again. Writes through a mapping produce no inotify event: notify through `ChangeSignal`.
package final class SharedFileMapping: @unchecked Sendable {  // immutable after init except the mapping's bytes
  // and `descriptor` (an atomic; the descriptors, replaced ones too, stay open in `owned`, a Mutex, until deinit)
  package let path: String
  package let base: UnsafeMutableRawPointer
  package let reservation: Int
  /// A view of the mapped file's descriptor (`owned` holds it).
  private var fd: SystemFD { SystemFD.view(descriptor.load(ordering: .acquiring), path: path) }
  private let descriptor: Atomic<Int32>
  /// The current descriptor and those `remap(onto:)` replaced: another thread may still use one, so they close only
  /// with the mapping.
  private let owned: Mutex<[DescriptorBox]>
  private let guardSlot: Int32
  /// `MAP_SHARED`, or `MAP_PRIVATE` for a file this process may only read (`privateCopy`).
  private let sharing: Int32

  /// Maps the regular file open as `fd`, which the mapping now owns (closed with it). `privateCopy`: for a file
  /// open read-only (a read-only container) — the mapping reads the file, and a store through it would change
  /// only this process's copy of that page (callers of a read-only file never store).
  package init(fd: consuming SystemFD, reservation: Int, privateCopy: Bool = false) throws(FileSystemError) {
    self.path = fd.path
    self.descriptor = Atomic(fd.rawValue)
    let box = DescriptorBox(fd)
    self.owned = Mutex([box])
    let fd = box.fd.borrowedView
    self.reservation = reservation
    self.sharing = privateCopy ? MAP_PRIVATE : MAP_SHARED
    if let injected = IOFaultInjection.failure(.mmap) { throw FileSystemError("mmap", fd.path, injected) }
    guard let mapped = mmap(nil, reservation, PROT_READ | PROT_WRITE, sharing, fd.rawValue, 0),
      mapped != MAP_FAILED
    else {
      throw FileSystemError("mmap", fd.path, Errno(rawValue: errno))
    }
    base = mapped
    guardSlot = gc_guard_register(mapped, reservation)
    if guardSlot < 0 {
      munmap(mapped, reservation)
      throw FileSystemError("mmap", fd.path, .tooManyOpenFiles)
    }
  }

  /// Opens (creating it with `mode` when missing) and maps the file `name` of `directory`, a directory held open:
  /// the file is reached beneath it, whatever another process does to the paths on the way meanwhile.
  package convenience init(name: String, in directory: borrowing SystemFD, mode: mode_t, reservation: Int)
    throws(FileSystemError)
  {
    let fd = try directory.open(name, [.readWrite, .create], mode: mode)
    let st = try fd.status()
    guard st.kind == .regular else { throw FileSystemError("mmap", fd.path, .invalidArgument) }
    try fd.setPermissions(mode)
    try self.init(fd: fd, reservation: reservation)
  }

  deinit {
    gc_guard_unregister(guardSlot)
    munmap(base, reservation)
    // The descriptors in `owned` close after this, with the object.
  }

  /// SIGBUS faults taken in this mapping so far (each one means the file was truncated under us).
  package var faultCount: UInt32 { gc_guard_faults(guardSlot) }

  /// The file's current size. The corresponding C function is `fstat`.
  package func fileSize() throws(FileSystemError) -> Int { Int(try fd.status().size) }

  /// The mapped file's status (its inode tells whether the name still leads to it). The C function is `fstat`.
  package func fileStatus() throws(FileSystemError) -> FileStatus { try fd.status() }

  /// Allocates disk blocks for the first `size` bytes, extending the file if needed. The corresponding C function
  /// is `fallocate`.
  package func allocate(upTo size: Int) throws(FileSystemError) {
    precondition(size <= reservation, "a mapping never grows past its reservation")
    _ = try valueOrErrno(.fallocate) { gc_fallocate(fd.rawValue, 0, Int64(size)) }.get("fallocate", path)
  }

  /// Sets the file size (only for files this framework sizes alone). The corresponding C function is `ftruncate`.
  package func truncate(to size: Int) throws(FileSystemError) { try fd.truncate(to: Int64(size)) }

  /// Maps the file again over the whole reservation, replacing the zero pages the SIGBUS guard put in.
  /// The corresponding C function is `mmap` (with `MAP_FIXED`).
  package func remap() throws(FileSystemError) {
    if let injected = IOFaultInjection.failure(.mmap) { throw FileSystemError("mmap", path, injected) }
    let again = mmap(base, reservation, PROT_READ | PROT_WRITE, sharing | MAP_FIXED, fd.rawValue, 0)
    guard again == base else { throw FileSystemError("mmap", path, Errno(rawValue: errno)) }
  }

  /// Maps `newFD` (a file of at least the old size, which the mapping now owns) over the same addresses, in one
  /// `mmap(MAP_FIXED)`: a thread reading meanwhile sees the old pages or the new ones, never an unmapped hole.
  /// For a file replaced by a new one of the same role (the container removed and made again).
  package func remap(onto newFD: consuming SystemFD) throws(FileSystemError) {
    if let injected = IOFaultInjection.failure(.mmap) { throw FileSystemError("mmap", newFD.path, injected) }
    let again = mmap(base, reservation, PROT_READ | PROT_WRITE, sharing | MAP_FIXED, newFD.rawValue, 0)
    guard again == base else { throw FileSystemError("mmap", newFD.path, Errno(rawValue: errno)) }
    descriptor.store(newFD.rawValue, ordering: .releasing)
    let box = DescriptorBox(newFD)
    owned.withLock { $0.append(box) }
  }

  /// Writes the file's dirty pages (also those written through the mapping) to disk. The corresponding C function
  /// is `fsync`.
  package func sync() throws(FileSystemError) { try fd.sync() }

  /// Gives back this process's resident pages of `range` (whole pages inside it): the data stays in the page
  /// cache and the next touch maps it again. For bytes read once, such as a scan. The corresponding C function is
  /// `madvise` (`MADV_DONTNEED`, which keeps a shared mapping's data).
  package func releaseResidentPages(in range: Range<Int>) {
    Self.releaseResidentPages(of: base, count: reservation, in: range)
  }

  /// `releaseResidentPages` for any shared mapping of `count` bytes at `base` (MappedFile's too).
  static func releaseResidentPages(of base: UnsafeRawPointer, count: Int, in range: Range<Int>) {
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    let start = (max(range.lowerBound, 0) + page - 1) / page * page
    let end = min(range.upperBound, count) / page * page
    guard end > start else { return }
    _ = madvise(UnsafeMutableRawPointer(mutating: base) + start, end - start, MADV_DONTNEED)
  }

  /// The 64-bit word at `offset` (8-aligned), for atomics shared by every process.
  package func word(at offset: Int) -> UnsafeMutablePointer<UInt64> {
    precondition(offset >= 0 && offset % 8 == 0 && offset + 8 <= reservation, "word offset out of range")
    return (base + offset).assumingMemoryBound(to: UInt64.self)
  }
}
