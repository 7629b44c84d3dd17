import Foundation
import Glibc
import SystemLayer
import Testing

/// Reading a directory entry stays inside its record (issue #37: the download agent died with SIGSEGV while listing
/// `tasks/` with 20,000 files — `dmesg`: a segfault at a page boundary in `SystemFD.entries`, whose copy of the whole
/// 256-byte `d_name` read past the end of glibc's buffer, there the end of a malloc arena's mapped part).
///
/// The record is laid at the very end of a page followed by an inaccessible one, as glibc's buffer was; the reading
/// runs in a child process (an exit test), so a read past the record kills the child, not the test run.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - `FileSystem.entryName` copying `entry.pointee.d_name` whole, as before: `anEntryAtTheEndOfItsBufferIsReadInside`
///   — the child dies of SIGSEGV.
@Suite(.runSlot(.minutes(2)))
struct DirectoryEntryTests {
  @Test func anEntryAtTheEndOfItsBufferIsReadInside() async {
    await #expect(processExitsWith: .success) {
      let page = Int(sysconf(Int32(_SC_PAGESIZE)))
      guard let base = mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
        base != MAP_FAILED, mprotect(base + page, page, PROT_NONE) == 0
      else { exit(2) }
      // A record of a 3-byte name ends exactly where the readable page does.
      let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
      let recordLength = (nameOffset + 4 + 7) & ~7
      let record = base + page - recordLength
      memset(record, 0, recordLength)
      record.storeBytes(
        of: UInt16(recordLength), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
      record.storeBytes(
        of: UInt8(DT_DIR), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_type)!, as: UInt8.self)
      for (i, byte) in "abc".utf8.enumerated() {
        record.storeBytes(of: byte, toByteOffset: nameOffset + i, as: UInt8.self)
      }
      let entry = UnsafePointer(record.assumingMemoryBound(to: dirent.self))
      guard FileSystem.entryName(entry) == "abc", FileSystem.entryIsDirectory(entry) else { exit(1) }
      exit(0)
    }
  }
}
