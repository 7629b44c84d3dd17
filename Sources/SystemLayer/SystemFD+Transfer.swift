import CSystemShims
import Glibc
import SystemPackage

// What the download agent's transfer engine needs from the system: a rename between two directory descriptors
// (the partial lives in `.coordination/downloads/tasks/`, the destination anywhere beneath the container), a copy
// for when they are on two file systems, `fdatasync` for checkpoints, and the boot id that dates a partial.

extension SystemFD {
  /// Renames `name` in this directory to `newName` in `directory`, both resolved from their descriptors (a
  /// directory on the way swapped for a symlink meanwhile cannot move the file outside). Fails with `EXDEV` when
  /// the two are on different file systems. The corresponding C function is `renameat`.
  package func rename(_ name: String, into directory: borrowing SystemFD, as newName: String) throws(FileSystemError) {
    _ = try name.withCString { from in
      newName.withCString { to in valueOrErrno(.rename) { Glibc.renameat(rawValue, from, directory.rawValue, to) } }
    }.get("renameat", "\(path)/\(name)' -> '\(directory.path)/\(newName)")
    SyscallRecorder.record(.rename, directory.path + "/" + newName)
  }

  /// Makes `newName` in `directory` a second name (a hard link) of the file `name` in this directory, both resolved
  /// from their descriptors; fails with `EEXIST` when `newName` exists. The corresponding C function is `linkat`
  /// (the source is not followed).
  package func link(_ name: String, into directory: borrowing SystemFD, as newName: String) throws(FileSystemError) {
    _ = try name.withCString { from in
      newName.withCString { to in
        valueOrErrno(.linkat) { Glibc.linkat(rawValue, from, directory.rawValue, to, 0) }
      }
    }.get("linkat", "\(path)/\(name)' -> '\(directory.path)/\(newName)")
  }

  /// Renames `name` to `newName`, both in this directory, only when nothing is named `newName` yet: fails with
  /// `EEXIST` otherwise (the caller picks another name). The corresponding C function is `renameat2` with
  /// `RENAME_NOREPLACE`.
  package func renameNoReplace(_ name: String, to newName: String) throws(FileSystemError) {
    _ = try valueOrErrno(.rename) { gc_rename_noreplace(rawValue, name, newName) }
      .get("renameat2", "\(path)/\(name)' -> '\(path)/\(newName)")
    SyscallRecorder.record(.rename, path + "/" + newName)
  }

  /// Swaps the files named `name` and `other` in this directory, atomically: each name then leads to the other's
  /// file (both must exist; `ENOENT` otherwise). What a `rename` over `other` would have unlinked is then at `name`,
  /// whatever another process put at `other` just before — for the caller to look at. The corresponding C function
  /// is `renameat2` with `RENAME_EXCHANGE`.
  package func exchange(_ name: String, with other: String) throws(FileSystemError) {
    _ = try valueOrErrno(.rename) { gc_rename_exchange(rawValue, name, rawValue, other) }
      .get("renameat2", "\(path)/\(name)' <-> '\(path)/\(other)")
    SyscallRecorder.record(.rename, path + "/" + other)
  }

  /// Flushes the file's data (and its size, when it changed) to the device, without the other metadata: the
  /// checkpoints of a download. The corresponding C function is `fdatasync`.
  package func dataSync() throws(FileSystemError) {
    _ = try valueOrErrno(.fdatasync) { Glibc.fdatasync(rawValue) }.get("fdatasync", path)
    SyscallRecorder.record(.fsync, path)
  }

  /// Asks the kernel to start writing `length` bytes from `offset` to the device, without waiting: a download
  /// streaming at disk speed would otherwise leave all of its pages dirty for the checkpoint's or the publisher's
  /// fsync to write at once (on this machine: 1 GiB fsynced at the end took 1.6 s more than the writes). A hint,
  /// nothing is durable by it. The corresponding C function is `sync_file_range` with `SYNC_FILE_RANGE_WRITE`.
  package func startWriteback(offset: Int64, length: Int64) throws(FileSystemError) {
    _ = try valueOrErrno { gc_start_writeback(rawValue, offset, length) }.get("sync_file_range", path)
  }

  /// Copies this file's first `length` bytes to the start of `target` (a file opened for writing) through a
  /// 1 MiB buffer: a download published across file systems (`EXDEV`). (`copy_file_range` is not in Swift's
  /// Glibc module.) The corresponding C functions are `pread` and `pwrite`.
  package func copyContents(to target: borrowing SystemFD, length: Int64) throws(FileSystemError) {
    try copyThroughBuffer(to: target, from: 0, length: length)
  }

  private func copyThroughBuffer(to target: borrowing SystemFD, from start: Int64, length: Int64)
    throws(FileSystemError)
  {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    var offset = start
    while offset < length {
      let want = Int(min(Int64(buffer.count), length - offset))
      let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
      guard n > 0 else { throw FileSystemError("pread (file shorter than \(length) bytes)", path, .ioError) }
      try target.writeAll(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: offset)
      offset += Int64(n)
    }
  }
}

/// The identity of the running boot: page-cache data a process wrote before a reboot may be lost, data written
/// in this boot survives any process's death.
package enum BootIdentity {
  /// `/proc/sys/kernel/random/boot_id` without its newline; nil when it cannot be read (then every partial is
  /// trusted only up to what was fsynced).
  package static let current: String? = {
    guard let fd = try? SystemFD.open("/proc/sys/kernel/random/boot_id", .readOnly) else { return nil }
    guard let bytes = try? fd.readAll(limit: 128) else { return nil }
    let text = String(decoding: bytes, as: UTF8.self).trimmingTrailingNewlines()
    return text.isEmpty ? nil : text
  }()
}

extension String {
  fileprivate func trimmingTrailingNewlines() -> String {
    var s = Substring(self)
    while s.last == "\n" || s.last == "\r" { s = s.dropLast() }
    return String(s)
  }
}
