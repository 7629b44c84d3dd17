import Glibc
import SystemPackage

extension SystemFD {
  /// Writes all of `bytes` at the current offset, from caller-owned memory (no copy). The corresponding C function
  /// is `write`.
  package func writeAll(_ bytes: UnsafeRawBufferPointer) throws(FileSystemError) {
    var written = 0
    while written < bytes.count {
      let n = try valueOrErrno(.write) { Glibc.write(rawValue, bytes.baseAddress! + written, bytes.count - written) }
        .get("write", path)
      written += n
    }
  }

  /// Reads what is there, up to `buffer.count` bytes, at the current offset (a pipe: blocks until some bytes or
  /// end of file); 0 means end of file. The corresponding C function is `read`.
  package func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileSystemError) -> Int {
    try valueOrErrno(.read) { Glibc.read(rawValue, buffer.baseAddress!, buffer.count) }.get("read", path)
  }

  /// Fills `buffer` from `offset` on; returns how many bytes it read (fewer only at end of file). The
  /// corresponding C function is `pread`.
  package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(FileSystemError) -> Int {
    var total = 0
    while total < buffer.count {
      let n = try valueOrErrno(.read) {
        Glibc.pread(rawValue, buffer.baseAddress! + total, buffer.count - total, off_t(offset) + off_t(total))
      }.get("pread", path)
      if n == 0 { break }
      total += n
    }
    return total
  }

  /// Sets the modification time of `name` in this directory to now, without following a symlink there. Only
  /// "now" is asked for, so write permission suffices (a file of another member of the group). The corresponding
  /// C function is `utimensat` with `UTIME_OMIT` for the access time and `UTIME_NOW` for the modification time.
  package func touchModificationTime(_ name: String) throws(FileSystemError) {
    // <sys/stat.h>'s UTIME_OMIT and UTIME_NOW are macros Swift does not import.
    let omit = (1 << 30) - 2
    let now = (1 << 30) - 1
    var times = (timespec(tv_sec: 0, tv_nsec: omit), timespec(tv_sec: 0, tv_nsec: now))
    let result = withUnsafePointer(to: &times) { pointer in
      pointer.withMemoryRebound(to: timespec.self, capacity: 2) { times in
        valueOrErrno { Glibc.utimensat(rawValue, name, times, AT_SYMLINK_NOFOLLOW) }
      }
    }
    _ = try result.get("utimensat", path + "/" + name)
  }
}
