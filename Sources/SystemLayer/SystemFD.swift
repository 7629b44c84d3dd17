import CInotifyTools
import Glibc
import SystemPackage

/// What `fstat`/`lstat` tell us about a file.
package struct FileStatus: Sendable, Equatable {
  /// What `type` names, in words ("FIFO", "socket"…).
  package var typeName: String {
    switch type {
    case S_IFREG: "regular file"
    case S_IFDIR: "directory"
    case S_IFLNK: "symbolic link"
    case S_IFIFO: "FIFO"
    case S_IFSOCK: "socket"
    case S_IFCHR: "character device"
    case S_IFBLK: "block device"
    default: "file of type \(String(type, radix: 8))"
    }
  }

  /// Whether it is a socket (an inbox's datagram socket is one).
  package var isSocket: Bool { type == S_IFSOCK }

  package enum Kind: Sendable { case regular, directory, symlink, other }
  package var kind: Kind
  package var size: Int64
  package var mode: mode_t
  package var device: UInt64
  package var inode: UInt64
  package var linkCount: UInt64
  /// The owner's user id.
  package var owner: UInt32
  /// The group id.
  package var group: UInt32
  /// The type bits (`st_mode & S_IFMT`): tells a FIFO, a socket and a device apart where `kind` says `other`.
  package var type: mode_t
  /// Bytes the file system allocated for it (`st_blocks` × 512): less than `size` for a sparse file.
  package var allocatedBytes: Int64
  package var modificationNanoseconds: Int64
  /// The inode's last change (`st_ctim`), which no one but the kernel sets: every write, truncation, rename or
  /// `utimensat` moves it.
  package var changeNanoseconds: Int64

  init(_ st: stat) {
    switch st.st_mode & S_IFMT {
    case S_IFREG: kind = .regular
    case S_IFDIR: kind = .directory
    case S_IFLNK: kind = .symlink
    default: kind = .other
    }
    size = Int64(st.st_size)
    mode = st.st_mode & 0o7777
    device = UInt64(st.st_dev)
    inode = UInt64(st.st_ino)
    linkCount = UInt64(st.st_nlink)
    owner = UInt32(st.st_uid)
    group = UInt32(st.st_gid)
    type = st.st_mode & S_IFMT
    allocatedBytes = Int64(st.st_blocks) * 512
    modificationNanoseconds = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
    changeNanoseconds = Int64(st.st_ctim.tv_sec) * 1_000_000_000 + Int64(st.st_ctim.tv_nsec)
  }
}

/// flock modes.
package enum FlockMode: Sendable {
  case shared, exclusive

  var flag: Int32 { self == .shared ? LOCK_SH : LOCK_EX }
}

/// An open file descriptor that closes itself: the value owns it, and its life ends at `close()` or, when nobody
/// called that, at the end of its scope. It is `~Copyable`, so a second close — which in a process full of threads
/// closes whoever got the number since, and with a lock file silently drops its flock — does not compile.
///
/// A view (`SystemFD.view(_:path:)`, `borrowedView`) names a descriptor someone else owns — the container
/// directory, stdout, a descriptor held in a class — and never closes it; `close()` on a view is a programming
/// error (an assertion in debug builds). Collections need Copyable elements: keep an owned descriptor in a
/// `DescriptorBox` there.
///
/// Every open in this module adds `O_CLOEXEC` (a forked child would otherwise keep flocks alive), `O_NOFOLLOW`
/// (every file in a container is untrusted: a planted symlink must not redirect us) and `O_NONBLOCK` (opening a
/// FIFO someone planted where a file is expected would otherwise block until a writer appears; for regular files
/// and directories it changes nothing). Readers `fstat` what they opened and refuse anything but a regular file.
package struct SystemFD: ~Copyable, Sendable {
  package let rawValue: Int32
  /// False for a view: the descriptor belongs to someone else.
  private var owns: Bool
  /// The path it was opened with, for error messages: up to three parts (a directory, a path beneath it, a name in
  /// that), joined only when asked — a write opens a parent and a temp file, and building their paths up front was
  /// two string allocations each.
  package var path: String {
    var joined = base
    for part in [middle, leaf] where !part.isEmpty { joined += "/" + part }
    return joined
  }
  private let base: String
  private let middle: String
  private let leaf: String

  /// Takes ownership of `rawValue`: it closes when this value's life ends.
  package init(rawValue: Int32, path: String) {
    self.init(rawValue: rawValue, base: path, middle: "", leaf: "", owns: true)
  }

  /// Takes ownership of `rawValue`, a descriptor of `relative` opened beneath the directory at `directory`.
  package init(rawValue: Int32, in directory: String, relative: String) {
    self.init(rawValue: rawValue, base: directory, middle: relative, leaf: "", owns: true)
  }

  private init(rawValue: Int32, base: String, middle: String, leaf: String, owns: Bool) {
    self.rawValue = rawValue
    self.base = base
    self.middle = middle
    self.leaf = leaf
    self.owns = owns
  }

  /// A view of `rawValue`, which someone else owns and closes: this value never closes it.
  package static func view(_ rawValue: Int32, path: String) -> SystemFD {
    SystemFD(rawValue: rawValue, base: path, middle: "", leaf: "", owns: false)
  }

  /// A view of `rawValue`, a descriptor of `relative` beneath the directory at `directory`, owned by someone else.
  package static func view(_ rawValue: Int32, in directory: String, relative: String) -> SystemFD {
    SystemFD(rawValue: rawValue, base: directory, middle: relative, leaf: "", owns: false)
  }

  /// A view of this descriptor, for a place that needs a value of its own (an escaping closure, a stored field)
  /// while this one keeps owning it: the view must not outlive it.
  package var borrowedView: SystemFD {
    SystemFD(rawValue: rawValue, base: base, middle: middle, leaf: leaf, owns: false)
  }

  /// Whether this value closes its descriptor (false for a view).
  package var isOwner: Bool { owns }

  /// Gives up ownership without closing: the caller now owns the raw descriptor (one that must outlive this
  /// value, e.g. handed to a child process's standard stream table).
  package consuming func releaseOwnership() -> Int32 {
    owns = false
    return rawValue
  }

  /// A descriptor of `name`, opened in this directory.
  private func child(_ rawValue: Int32, named name: String) -> SystemFD {
    leaf.isEmpty
      ? SystemFD(
        rawValue: rawValue, base: base, middle: middle.isEmpty ? name : middle, leaf: middle.isEmpty ? "" : name,
        owns: true)
      : SystemFD(rawValue: rawValue, path: path + "/" + name)
  }

  /// Closes the descriptor now (which drops any flock held through it) rather than at the end of the scope. The
  /// corresponding C function is `close`.
  package consuming func close() {
    // The work is deinit's: ending the value's life here runs it.
    if !owns { assertionFailure("close() of a view of descriptor \(rawValue) ('\(path)'): its owner closes it") }
  }

  deinit {
    if owns { SystemFD.closeOwned(rawValue, path: path) }
  }

  package struct OpenFlags: OptionSet, Sendable {
    package let rawValue: Int32
    package init(rawValue: Int32) { self.rawValue = rawValue }
    package static let readOnly = OpenFlags([])
    package static let writeOnly = OpenFlags(rawValue: O_WRONLY)
    package static let readWrite = OpenFlags(rawValue: O_RDWR)
    package static let create = OpenFlags(rawValue: O_CREAT)
    package static let exclusiveCreate = OpenFlags(rawValue: O_CREAT | O_EXCL)
    package static let truncate = OpenFlags(rawValue: O_TRUNC)
    package static let append = OpenFlags(rawValue: O_APPEND)
    package static let directory = OpenFlags(rawValue: O_DIRECTORY)
    /// Follow a symlink in the last component (only for paths the caller resolved and checked itself).
    package static let followSymlink = OpenFlags(rawValue: 1 << 30)
  }

  /// The flags every open in this module passes (see the type's discussion).
  static func rawFlags(_ flags: OpenFlags) -> Int32 {
    var raw = (flags.rawValue & ~OpenFlags.followSymlink.rawValue) | O_CLOEXEC | O_NONBLOCK
    if !flags.contains(.followSymlink) { raw |= O_NOFOLLOW }
    return raw
  }

  /// Opens `path`. The corresponding C function is `open`.
  package static func open(
    _ path: String, _ flags: OpenFlags, mode: mode_t = 0o600
  ) throws(FileSystemError) -> SystemFD {
    let fd = try path.withCString { raw in valueOrErrno(.open) { Glibc.open(raw, rawFlags(flags), mode) } }.get(
      "open", path)
    SyscallRecorder.record(.open, path, flags: flags)
    return SystemFD(rawValue: fd, path: path)
  }

  /// Opens `name`, one component, in this directory (`name` never contains `/`). The corresponding C function is
  /// `openat`.
  package func open(_ name: String, _ flags: OpenFlags, mode: mode_t = 0o600) throws(FileSystemError) -> SystemFD {
    let fd = try name.withCString { name in
      valueOrErrno(.open) { Glibc.openat(rawValue, name, SystemFD.rawFlags(flags), mode) }
    }
    .get("openat", path + "/" + name)
    SyscallRecorder.record(.open, path + "/" + name, flags: flags)
    return child(fd, named: name)
  }

  /// Opens the file `name` in this directory read-write, creating it when missing with exactly `mode` (umask
  /// would filter it) and `size` bytes. The create is `O_EXCL`, so only the creator sizes the file; an opener that
  /// comes between the create and the `ftruncate` sees it short (`MappedCounters` waits for that). The
  /// corresponding C functions are `openat`, `fchmod` and `ftruncate`.
  package func openOrCreate(_ name: String, mode: mode_t, size: Int64) throws(FileSystemError) -> SystemFD {
    let created: SystemFD
    do { created = try open(name, [.readWrite, .exclusiveCreate], mode: mode) } catch {
      guard error.errno == .fileExists else { throw error }
      return try open(name, .readWrite)
    }
    // On failure `created` closes as it goes out of scope.
    try created.setPermissions(mode)
    try created.truncate(to: size)
    return created
  }

  /// The status of `name` in this directory, not following a symlink there; nil when nothing is there. The
  /// corresponding C function is `fstatat` with `AT_SYMLINK_NOFOLLOW`.
  package func status(of name: String) throws(FileSystemError) -> FileStatus? {
    var st = stat()
    switch name.withCString({ name in valueOrErrno { Glibc.fstatat(rawValue, name, &st, AT_SYMLINK_NOFOLLOW) } }) {
    case .success: return FileStatus(st)
    case .failure(let e) where e == .noSuchFileOrDirectory: return nil
    case .failure(let e): throw FileSystemError("fstatat", path + "/" + name, e)
    }
  }

  /// Renames `source` to `destination`, both names in this directory. The corresponding C function is `renameat`.
  package func rename(_ source: String, to destination: String) throws(FileSystemError) {
    // Names go to C through withCString here: the implicit String-to-pointer conversion copied each to the heap
    // (five allocations of a coordinated write's thirty).
    _ = try source.withCString { from in
      destination.withCString { to in valueOrErrno(.rename) { Glibc.renameat(rawValue, from, rawValue, to) } }
    }.get("renameat", "\(path)/\(source)' -> '\(path)/\(destination)")
    SyscallRecorder.record(.rename, path + "/" + destination)
  }

  /// Makes `destination` a second name (a hard link) of the file `source`, both in this directory; fails with
  /// EEXIST when `destination` exists. The corresponding C function is `linkat` (the source is not followed).
  package func link(_ source: String, to destination: String) throws(FileSystemError) {
    _ = try source.withCString { from in
      destination.withCString { to in valueOrErrno(.linkat) { Glibc.linkat(rawValue, from, rawValue, to, 0) } }
    }
    .get("linkat", "\(path)/\(source)' -> '\(path)/\(destination)")
  }

  /// Removes the file `name` in this directory; a missing file is not an error. The corresponding C function is
  /// `unlinkat`.
  package func removeFile(_ name: String) throws(FileSystemError) {
    switch name.withCString({ name in valueOrErrno(.unlinkat) { Glibc.unlinkat(rawValue, name, 0) } }) {
    case .success: return
    case .failure(let e) where e == .noSuchFileOrDirectory: return
    case .failure(let e): throw FileSystemError("unlinkat", path + "/" + name, e)
    }
  }

  /// Removes the empty directory `name` in this directory; a missing one is not an error. The corresponding C
  /// function is `unlinkat` with `AT_REMOVEDIR`.
  package func removeDirectory(_ name: String) throws(FileSystemError) {
    switch name.withCString({ name in valueOrErrno(.unlinkat) { Glibc.unlinkat(rawValue, name, AT_REMOVEDIR) } }) {
    case .success: return
    case .failure(let e) where e == .noSuchFileOrDirectory: return
    case .failure(let e): throw FileSystemError("unlinkat", path + "/" + name, e)
    }
  }

  /// Reads the whole regular file this descriptor names, refusing anything else (a FIFO, a device, a directory)
  /// and anything over `limit` bytes. Returns its status too.
  package func readRegularFile(limit: Int) throws(FileSystemError) -> (bytes: [UInt8], status: FileStatus) {
    let st = try status()
    if st.kind == .directory {
      throw FileSystemError("read", path, .isDirectory, reason: "it is a directory")
    }
    guard st.kind == .regular else {
      throw FileSystemError(
        "read", path, .invalidArgument, reason: "it is not a regular file (a FIFO, socket or device)")
    }
    guard st.size <= Int64(limit) else { throw FileSystemError("read", path, .fileTooLarge) }
    return (try readAll(limit: limit), st)
  }

  /// The corresponding C function is `flock`.
  /// - Returns: `false` when `nonBlocking` and another open file description holds a conflicting lock.
  @discardableResult
  package func lock(_ mode: FlockMode, nonBlocking: Bool = false) throws(FileSystemError) -> Bool {
    let op = mode.flag | (nonBlocking ? LOCK_NB : 0)
    switch valueOrErrno(.flock, { gc_flock(rawValue, op) }) {
    case .success: return true
    case .failure(let e) where nonBlocking && e == .wouldBlock: return false
    case .failure(let e): throw FileSystemError("flock", path, e)
    }
  }

  /// Releases the flock. The corresponding C function is `flock`.
  package func unlock() {
    _ = valueOrErrno { gc_flock(rawValue, LOCK_UN) }
  }

  /// Whether another open file description (in any process, or another of this one's) has this file open: a
  /// write lease is granted only when none has, and is given back at once. Nil when that cannot be told (a file
  /// this user does not own, a file system without leases). The corresponding C function is `fcntl(F_SETLEASE)`.
  package func isOpenElsewhere() -> Bool? {
    guard let taken = takeWriteLease() else { return nil }
    guard taken else { return true }
    _ = releaseLease()
    return false
  }

  /// Takes a write lease on the file: granted only while no other open file description has it open, and broken
  /// by any `open` of it meanwhile (which waits until `releaseLease`). True when taken, false when the file is open
  /// elsewhere, nil when that cannot be told (a file this user does not own, a file system without leases).
  /// The corresponding C function is `fcntl(F_SETLEASE)`.
  package func takeWriteLease() -> Bool? {
    // An open by someone else while the lease is held signals this process (SIGIO by default, which kills it):
    // SIGURG instead, ignored unless handled.
    _ = valueOrErrno { fcntl(rawValue, F_SETSIG, SIGURG) }
    switch valueOrErrno({ fcntl(rawValue, F_SETLEASE, F_WRLCK) }) {
    case .success: return true
    case .failure(let e) where e == .wouldBlock || e == .resourceBusy: return false
    case .failure: return nil
    }
  }

  /// Gives back a lease `takeWriteLease` took; returns whether it was still whole, i.e. nobody opened the file
  /// while it was held (an open breaks it: `F_GETLEASE` then names what it is being broken to).
  package func releaseLease() -> Bool {
    let held = fcntl(rawValue, F_GETLEASE)
    _ = valueOrErrno { fcntl(rawValue, F_SETLEASE, F_UNLCK) }
    return held == F_WRLCK
  }

  /// The corresponding C function is `fstat`.
  package func status() throws(FileSystemError) -> FileStatus {
    var st = stat()
    _ = try valueOrErrno { Glibc.fstat(rawValue, &st) }.get("fstat", path)
    return FileStatus(st)
  }

  /// Writes all of `bytes` at the current offset. The corresponding C function is `write`.
  package func writeAll(_ bytes: some Collection<UInt8>) throws(FileSystemError) {
    // Contiguous bytes (Array, Data, their slices) are written where they are; anything else is copied once.
    var failure: FileSystemError?
    let done: Void? = bytes.withContiguousStorageIfAvailable { buffer in
      do throws(FileSystemError) { try writeAll(UnsafeRawBufferPointer(buffer)) } catch { failure = error }
    }
    if let failure { throw failure }
    if done != nil { return }
    let array = Array(bytes)
    array.withUnsafeBytes { buffer in
      do throws(FileSystemError) { try writeAll(buffer) } catch { failure = error }
    }
    if let failure { throw failure }
  }

  /// Writes all of `bytes` at `offset`. The corresponding C function is `pwrite`.
  package func writeAll(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FileSystemError) {
    var written = 0
    while written < bytes.count {
      let n = try valueOrErrno(.pwrite) {
        Glibc.pwrite(rawValue, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
      }.get("pwrite", path)
      written += n
    }
  }

  /// Reads to end of file, refusing files larger than `limit` bytes. The corresponding C function is `read`.
  package func readAll(limit: Int) throws(FileSystemError) -> [UInt8] {
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
      let n = try chunk.withUnsafeMutableBytes { buffer in
        valueOrErrno(.read) { Glibc.read(rawValue, buffer.baseAddress!, buffer.count) }
      }.get("read", path)
      if n == 0 { return result }
      if result.count + n > limit { throw FileSystemError("read", path, .fileTooLarge) }
      result.append(contentsOf: chunk[0..<n])
    }
  }

  /// Flushes the file's data and metadata to the device. The corresponding C function is `fsync`.
  package func sync() throws(FileSystemError) {
    _ = try valueOrErrno(.fsync) { Glibc.fsync(rawValue) }.get("fsync", path)
    SyscallRecorder.record(.fsync, path)
  }

  /// The corresponding C function is `fchmod` (umask would otherwise leave group-shared files 0644).
  package func setPermissions(_ mode: mode_t) throws(FileSystemError) {
    _ = try valueOrErrno { Glibc.fchmod(rawValue, mode) }.get("fchmod", path)
  }

  /// The corresponding C function is `ftruncate`.
  package func truncate(to size: Int64) throws(FileSystemError) {
    _ = try valueOrErrno(.ftruncate) { Glibc.ftruncate(rawValue, off_t(size)) }.get("ftruncate", path)
  }
}

extension SystemFD {
  /// Reads up to `count` bytes at `offset` (fewer at end of file). The corresponding C function is `pread`.
  package func read(at offset: Int64, count: Int) throws(FileSystemError) -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: count)
    var total = 0
    while total < count {
      let n = try buffer.withUnsafeMutableBytes { raw in
        valueOrErrno(.read) {
          Glibc.pread(rawValue, raw.baseAddress! + total, count - total, off_t(offset) + off_t(total))
        }
      }.get("pread", path)
      if n == 0 { break }
      total += n
    }
    if total < count { buffer.removeSubrange(total...) }
    return buffer
  }
}
