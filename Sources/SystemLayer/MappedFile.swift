import CSystemShims
import Glibc
import SystemPackage

/// A regular file mapped read-only (`PROT_READ`, `MAP_SHARED`) at the size it had when opened: for immutable
/// files read in place (the suite images of SharedDefaults), where only the pages touched cost memory.
///
/// SIGBUS trap (TRAPS.md): the file may still be truncated by someone while it is mapped. The range is registered
/// with the SIGBUS guard of CSystemShims, as `SharedFileMapping` does: a read of a lost page gets a zero page and
/// `faultCount` grows, instead of a crash. A reader compares `faultCount` before and after it reads; a change
/// means what it read is not the file's content.
package final class MappedFile: @unchecked Sendable {  // immutable after init (the mapped bytes are read-only)
  /// The mapped bytes: the whole file as it was at `status` (empty for an empty file, which is not mapped).
  package let bytes: UnsafeRawBufferPointer
  /// The file's status taken when it was opened (inode, size, modification time): its identity.
  package let status: FileStatus
  private let fd: SystemFD
  /// The SIGBUS guard's slot, or -1 when nothing is mapped.
  private let guardSlot: Int32

  /// The largest file mapped: images are far smaller; a bigger file is refused rather than reserving its size.
  package static let maxSize = 1 << 30

  /// Maps the regular file open as `fd`, which this object now owns: it closes with it, or on a throw.
  /// Throws `.invalidArgument` for anything but a regular file, `.fileTooLarge` past `maxSize`. The
  /// corresponding C functions are `fstat` and `mmap`.
  package init(fd: consuming SystemFD) throws(FileSystemError) {
    let st = try fd.status()
    guard st.kind == .regular else { throw FileSystemError("mmap", fd.path, .invalidArgument) }
    guard st.size <= Int64(Self.maxSize) else { throw FileSystemError("mmap", fd.path, .fileTooLarge) }
    let path = fd.path
    self.fd = fd
    self.status = st
    let size = Int(st.size)
    guard size > 0 else {
      // mmap refuses a zero length; an empty file has nothing to read anyway.
      bytes = UnsafeRawBufferPointer(start: nil, count: 0)
      guardSlot = -1
      return
    }
    if let injected = IOFaultInjection.failure(.mmap) {
      throw FileSystemError("mmap", path, injected)
    }
    guard let mapped = mmap(nil, size, PROT_READ, MAP_SHARED, self.fd.rawValue, 0), mapped != MAP_FAILED else {
      throw FileSystemError("mmap", path, Errno(rawValue: errno))
    }
    // Lookups touch a page here and there: without these a fault read and mapped the pages around it too
    // (readahead, fault-around), and 10 reads of a 100,000-key image cost 5 MB of resident memory. (Pages a writer
    // just wrote sit in the page cache as large folios, which the kernel maps whole: that part stays.)
    _ = madvise(mapped, size, MADV_RANDOM)
    _ = posix_fadvise(self.fd.rawValue, 0, 0, POSIX_FADV_RANDOM)
    let slot = gc_guard_register(mapped, size)
    guard slot >= 0 else {
      munmap(mapped, size)
      throw FileSystemError("mmap", path, .tooManyOpenFiles)
    }
    bytes = UnsafeRawBufferPointer(start: mapped, count: size)
    guardSlot = slot
  }

  deinit {
    if let base = bytes.baseAddress {
      gc_guard_unregister(guardSlot)
      munmap(UnsafeMutableRawPointer(mutating: base), bytes.count)
    }
    // `fd` closes after this, with the object.
  }

  /// SIGBUS faults taken in this mapping so far (each one means the file was truncated under us); 0 for an
  /// empty file.
  package var faultCount: UInt32 { guardSlot < 0 ? 0 : gc_guard_faults(guardSlot) }

  /// Gives back this process's resident pages of `range` (whole pages inside it), for bytes read once: the data
  /// stays in the page cache (see `SharedFileMapping.releaseResidentPages`).
  package func releaseResidentPages(in range: Range<Int>) {
    guard let base = bytes.baseAddress else { return }
    SharedFileMapping.releaseResidentPages(of: base, count: bytes.count, in: range)
  }
}
