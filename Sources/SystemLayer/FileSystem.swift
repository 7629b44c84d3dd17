import CSystemShims
import Foundation
import Glibc
import SystemPackage

/// Path-based file system calls. Nothing here follows a symlink in the last component.
package enum FileSystem {
  /// `lstat`, or `nil` when nothing is at `path`. The corresponding C function is `lstat`.
  package static func status(_ path: String) throws(FileSystemError) -> FileStatus? {
    var st = stat()
    switch valueOrErrno({ Glibc.lstat(path, &st) }) {
    case .success: return FileStatus(st)
    case .failure(let e) where e == .noSuchFileOrDirectory || e == .notDirectory: return nil
    case .failure(let e): throw FileSystemError("lstat", path, e)
    }
  }

  /// Atomically swaps the names `a` and `b` (tests race path checks with it). The corresponding C function is
  /// `renameat2` with `RENAME_EXCHANGE`.
  package static func exchange(_ a: String, _ b: String) throws(FileSystemError) {
    _ = try valueOrErrno(.rename) { gc_rename_exchange(AT_FDCWD, a, AT_FDCWD, b) }.get("renameat2", "\(a)' <-> '\(b)")
  }

  /// The names in a directory, without `.` and `..`. The corresponding C functions are `opendir`/`readdir`.
  package static func listDirectory(_ path: String) throws(FileSystemError) -> [String] {
    let fd = try SystemFD.open(path, [.readOnly, .directory])
    guard let dir = fdopendir(fd.rawValue) else { throw FileSystemError("fdopendir", path, Errno(rawValue: errno)) }
    // The stream owns the descriptor from here: `closedir` closes it (closing it again was a double close).
    _ = fd.releaseOwnership()
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
      let name = entryName(entry)
      if name != "." && name != ".." { names.append(name) }
    }
    return names
  }

  /// The name of an entry `readdir` returned, read up to its NUL only. A record is `d_reclen` bytes, not
  /// `sizeof(dirent)`: loading the entry, or its 256-byte `d_name` whole, read past the end of glibc's buffer, and
  /// when the buffer ended at an unmapped page the process died (SIGSEGV in the download agent listing 10,000
  /// tasks, its heap's arena ending just there; issue #37).
  package static func entryName(_ entry: UnsafePointer<dirent>) -> String {
    let field = UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!
    return String(cString: field.assumingMemoryBound(to: CChar.self))
  }

  /// Whether an entry `readdir` returned is a directory (`d_type`, read alone: see `entryName`).
  package static func entryIsDirectory(_ entry: UnsafePointer<dirent>) -> Bool {
    UnsafeRawPointer(entry).load(fromByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_type)!, as: UInt8.self)
      == UInt8(DT_DIR)
  }

  /// The canonical absolute path with every symlink resolved. The corresponding C function is `realpath`.
  package static func realPath(_ path: String) throws(FileSystemError) -> String {
    guard let resolved = Glibc.realpath(path, nil) else {
      throw FileSystemError("realpath", path, Errno(rawValue: Glibc.errno))
    }
    defer { free(resolved) }
    return String(cString: resolved)
  }

  /// The target of a symlink. The corresponding C function is `readlink`.
  package static func readLink(_ path: String) throws(FileSystemError) -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = try valueOrErrno { Glibc.readlink(path, &buffer, buffer.count - 1) }.get("readlink", path)
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// Reads a whole regular file (no symlinks), refusing anything over `limit` bytes.
  package static func readFile(_ path: String, limit: Int) throws(FileSystemError) -> [UInt8] {
    let fd = try SystemFD.open(path, .readOnly)
    return try fd.readRegularFile(limit: limit).bytes
  }

  /// The current user's home directory from the password database, for when `$HOME` is unset.
  package static func homeDirectory() -> String? {
    guard let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir else { return nil }
    return String(cString: dir)
  }
}

/// The environment, read through one place.
package enum Environment {
  package static func value(_ name: String) -> String? {
    guard let raw = getenv(name) else { return nil }
    return String(cString: raw)
  }

  /// Sets `name` for this process and the processes it starts. `setenv` is not thread-safe: call it at the start of
  /// `main`, before other threads read the environment.
  package static func set(_ name: String, _ value: String) {
    setenv(name, value, 1)
  }

  /// Removes `name` for this process and the processes it starts. `unsetenv` is not thread-safe: call it at the start
  /// of `main`, as `set`.
  package static func unset(_ name: String) {
    unsetenv(name)
  }
}

extension FileSystem {
  /// Creates `path` and any missing parents with `mode`.
  package static func makeDirectories(_ path: String, mode: mode_t) throws(FileSystemError) {
    if try status(path)?.kind == .directory { return }
    let parent = (path as NSString).deletingLastPathComponent
    if !parent.isEmpty && parent != path { try makeDirectories(parent, mode: mode) }
    switch valueOrErrno({ Glibc.mkdir(path, mode) }) {
    case .success: return
    case .failure(let e) where e == .fileExists: return
    case .failure(let e): throw FileSystemError("mkdir", path, e)
    }
  }
}
