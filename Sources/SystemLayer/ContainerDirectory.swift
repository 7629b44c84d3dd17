import CSystemShims
import Glibc
import Synchronization
import SystemPackage

/// A container directory held open, and the one place that resolves paths beneath it.
///
/// Every container-relative path is resolved from this descriptor, never from a path string that was checked
/// earlier: a process swapping a directory with a symlink (`renameat2(RENAME_EXCHANGE)` in a loop) cannot lead a
/// write, its temp file or a read outside. On Linux ≥ 5.6 one `openat2` call with `RESOLVE_BENEATH |
/// RESOLVE_NO_MAGICLINKS` resolves the directories on the way: relative symlinks that stay beneath are followed,
/// absolute ones and any that would leave fail with `EXDEV`. Where `openat2` is missing (`ENOSYS`) the path is
/// walked one component at a time with `openat(O_NOFOLLOW | O_DIRECTORY)`: every symlink is refused (`ELOOP`).
/// The last component of a file is never followed (`O_NOFOLLOW`) and never blocks (`O_NONBLOCK`).
package final class ContainerDirectory: Sendable {
  /// The container directory, open for the life of the process (opened again after it was removed: `reopen`).
  /// A view: the directory owns the descriptor.
  package var fd: SystemFD { SystemFD.view(descriptor.load(ordering: .acquiring), path: path) }
  private let descriptor: Atomic<Int32>
  /// The descriptors it owns: the current one, and those replaced by `reopen` (another thread may still be using
  /// one, so they close only at deinit, with this list).
  private let owned: Mutex<[DescriptorBox]>
  /// The path it was opened with (for error messages and path-to-relative conversion).
  package let path: String
  /// Device and inode: one container reached under two paths is still one container.
  package let device: UInt64
  package let inode: UInt64

  /// How directories on the way are resolved; `.componentWalk` is what kernels without `openat2` get (tests use it
  /// to check the fallback).
  package enum Resolution: Sendable { case automatic, componentWalk }

  /// Where replaces make their temp files (AtomicReplace.swift): a directory beneath the container, opened on first
  /// use and kept open. `fd` is nil until opened, and again after `reopen`.
  private struct Staging {
    var relative: String?
    var fd: DescriptorBox?
  }
  private let staging = Mutex(Staging())

  /// Whether the kernel lacks `openat2`, learnt from the first `ENOSYS`.
  private static let noOpenat2 = Atomic<Bool>(false)

  /// Opens the container directory at `path` (a symlink in its place is refused).
  package init(path: String) throws(FileSystemError) {
    let fd = try SystemFD.open(path, [.readOnly, .directory])
    let st = try fd.status()
    descriptor = Atomic(fd.rawValue)
    owned = Mutex([DescriptorBox(fd)])
    self.path = path
    device = st.device
    inode = st.inode
  }

  /// After the container directory was removed (`rm -rf`) and made again: opens it again by its path, so what is
  /// resolved beneath it lands in the new directory, not the deleted one. `device` and `inode` keep naming the
  /// original (the process's identity for this container).
  package func reopen() throws(FileSystemError) {
    let fresh = DescriptorBox(try SystemFD.open(path, [.readOnly, .directory]))
    descriptor.store(fresh.fd.rawValue, ordering: .releasing)
    let oldStaging = staging.withLock { staging in
      defer { staging.fd = nil }
      return staging.fd
    }
    owned.withLock {
      $0.append(fresh)
      if let oldStaging { $0.append(oldStaging) }
    }
  }

  /// Makes replaces stage their temp files in the directory `relative` (which the caller made): see AtomicReplace.
  package func stageReplacements(in relative: String) {
    staging.withLock { $0.relative = relative }
  }

  /// A view of the staging directory's descriptor (the container directory owns it), or nil when there is none or
  /// it cannot be opened: then the replace makes its temp file next to the target. Also for callers that replace
  /// through `AtomicReplace` themselves (the image cache's stores).
  package func stagingDirectory() -> SystemFD? {
    staging.withLock { staging -> SystemFD? in
      guard let relative = staging.relative else { return nil }
      if staging.fd == nil {
        // Never through a link in its place (`O_NOFOLLOW`), nor anything but a directory.
        guard let opened = try? openFile(relative, [.readOnly, .directory], mode: 0) else { return nil }
        staging.fd = DescriptorBox(opened)
      }
      return SystemFD.view(staging.fd!.fd.rawValue, in: path, relative: relative)
    }
  }

  /// `absolute` as a path relative to this container ("" for the container itself); nil when it is not inside.
  package func relative(_ absolute: String) -> String? {
    if absolute == path { return "" }
    guard absolute.hasPrefix(path + "/") else { return nil }
    return String(absolute.dropFirst(path.count + 1))
  }

  /// Opens the directory `relative` (components separated by `/`, "" for the container) beneath the container.
  package func openDirectory(_ relative: String, resolution: Resolution = .automatic) throws(FileSystemError)
    -> SystemFD
  {
    try open(relative, [.readOnly, .directory], mode: 0, resolution: resolution, followLast: true)
  }

  /// The entries of the directory `relative` beneath the container (`SystemFD.entries()`).
  package func entries(of relative: String) throws(FileSystemError) -> [(name: String, isDirectory: Bool)] {
    let fd = try openDirectory(relative)
    return try fd.entries()
  }

  /// Opens the file `relative` beneath the container; its last component is never followed.
  package func openFile(
    _ relative: String, _ flags: SystemFD.OpenFlags, mode: mode_t = 0o600, resolution: Resolution = .automatic
  ) throws(FileSystemError) -> SystemFD {
    try open(relative, flags, mode: mode, resolution: resolution, followLast: false)
  }

  /// Reads the regular file `relative` (refusing symlinks, FIFOs, devices and anything over `limit` bytes).
  package func readFile(_ relative: String, limit: Int, resolution: Resolution = .automatic) throws(FileSystemError)
    -> (bytes: [UInt8], status: FileStatus)
  {
    let file = try openFile(relative, .readOnly, resolution: resolution)
    return try file.readRegularFile(limit: limit)
  }

  /// Replaces the file `relative` atomically (AtomicReplace.swift), every step relative to its directory's
  /// descriptor. Returns the written file's status (taken before it was published).
  @discardableResult
  package func replaceFile(
    _ relative: String, with bytes: some Collection<UInt8>, mode: mode_t,
    durability: AtomicReplace.Durability = .processCrash, resolution: Resolution = .automatic
  ) throws(FileSystemError) -> FileStatus {
    try replaceFile(relative, mode: mode, durability: durability, resolution: resolution) {
      (fd) throws(FileSystemError) in try fd.writeAll(bytes)
    }
  }

  /// `replaceFile` with what `write` writes into the temp file (open for reading too), for a file too large to
  /// gather in memory first. `write` may run again, on a fresh temp file, when the staged one cannot be renamed
  /// into place (see `AtomicReplace.write(parts:)`).
  @discardableResult
  package func replaceFile(
    _ relative: String, mode: mode_t, durability: AtomicReplace.Durability = .processCrash,
    resolution: Resolution = .automatic, writing write: (borrowing SystemFD) throws(FileSystemError) -> Void
  ) throws(FileSystemError) -> FileStatus {
    let (parent, name) = Self.split(relative)
    guard !name.isEmpty else { throw FileSystemError("replace", path, .isDirectory) }
    let directory: SystemFD
    do { directory = try openDirectory(parent, resolution: resolution) } catch {
      throw Self.parentFailure(
        error, writing: path + "/" + relative, parent: parent.isEmpty ? path : path + "/" + parent)
    }
    return try AtomicReplace.write(
      parts: 1, in: directory, name: name, mode: mode, durability: durability, staging: stagingDirectory()
    ) { (fd, _) throws(FileSystemError) in try write(fd) }
  }

  /// `replaceFile`, done only when no symbolic link is on the way to `relative`, its last component included: the
  /// parent is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and the name checked with `fstatat`
  /// on that descriptor, which the replace then uses — the check and the write share one descriptor. Returns false,
  /// having written nothing, when a link is there, the parent cannot be opened so, or there is no `openat2`: the
  /// caller then judges the path itself and calls `replaceFile` (which gives the errors). Errors of the replace
  /// itself are thrown. With `nameChecked` the caller vouches that the name was no link a moment ago and the
  /// `fstatat` is skipped (a link there since is replaced, never written through). The corresponding C functions
  /// are `openat2` and `fstatat`.
  package func replaceFileIfNoSymbolicLink(
    _ relative: String, with bytes: some Collection<UInt8>, mode: mode_t,
    durability: AtomicReplace.Durability = .processCrash, nameChecked: Bool = false
  ) throws(FileSystemError) -> Bool {
    let (parent, name) = Self.split(relative)
    guard !name.isEmpty, !Self.noOpenat2.load(ordering: .relaxed) else { return false }
    let opened: Int32
    // Only a power-loss replace fsyncs the directory; otherwise it is only the base of *at calls (O_PATH).
    let use: Int32 = durability == .powerLoss ? 1 : 2
    let start = parent.isEmpty ? "." : parent
    switch start.withCString({ start in valueOrErrno(.open) { gc_openat_beneath_no_symlinks(fd.rawValue, start, use) } }
    ) {
    case .success(let value): opened = value
    case .failure(let e):
      if e == .noFunction { Self.noOpenat2.store(true, ordering: .relaxed) }
      return false
    }
    let directory = SystemFD(rawValue: opened, in: path, relative: parent)
    if !nameChecked {
      let existing: FileStatus?
      do { existing = try directory.status(of: name) } catch { return false }
      guard existing?.kind != .symlink else { return false }
    }
    try AtomicReplace.write(
      bytes, in: directory, name: name, mode: mode, durability: durability, staging: stagingDirectory())
    return true
  }

  /// Opens the directory `relative` beneath the container, for reading and fsync, when no symbolic link is on the
  /// way, its last component included — one call where making the directories one level at a time costs three per
  /// level. nil when a link is there, a component is missing or is no directory, any other error, or there is no
  /// `openat2`: the caller then takes the way that judges each component and gives the errors. The corresponding C
  /// function is `openat2`.
  package func openDirectoryIfNoSymbolicLink(_ relative: String) -> SystemFD? {
    guard !Self.noOpenat2.load(ordering: .relaxed) else { return nil }
    let start = relative.isEmpty ? "." : relative
    switch start.withCString({ start in valueOrErrno(.open) { gc_openat_beneath_no_symlinks(fd.rawValue, start, 1) } })
    {
    case .success(let opened):
      return SystemFD(rawValue: opened, in: path, relative: relative)
    case .failure(let e):
      if e == .noFunction { Self.noOpenat2.store(true, ordering: .relaxed) }
      return nil
    }
  }

  /// Creates the directory `relative` with exactly `mode` (umask would filter it); an existing directory is fine,
  /// anything else there (a symlink included) is an error. The corresponding C function is `mkdirat`.
  package func makeDirectory(_ relative: String, mode: mode_t) throws(FileSystemError) {
    let (parent, name) = Self.split(relative)
    let directory = try openDirectory(parent)
    try directory.makeDirectory(name, mode: mode)
  }

  /// The status of `relative` (its last component not followed); nil when it or a directory on the way is missing.
  /// The corresponding C function is `fstatat` on the parent's descriptor.
  package func status(_ relative: String) throws(FileSystemError) -> FileStatus? {
    let (parent, name) = Self.split(relative)
    let directory: SystemFD
    do { directory = try openDirectory(parent) } catch {
      if error.errno == .noSuchFileOrDirectory { return nil }
      throw error
    }
    return try directory.status(of: name)
  }

  /// Renames the file or directory `relative` to `newName` in the same directory, relative to that directory's
  /// descriptor (a directory on the way swapped for a symlink cannot move it outside). The corresponding C
  /// function is `renameat`.
  package func rename(_ relative: String, to newName: String) throws(FileSystemError) {
    let (parent, name) = Self.split(relative)
    let directory = try openDirectory(parent)
    try directory.rename(name, to: newName)
  }

  /// Makes `newName` (in the same directory) a hard link to the file `relative`, replacing whatever had that name.
  /// Relative to the directory's descriptor; the corresponding C functions are `unlinkat` and `linkat`.
  package func link(_ relative: String, to newName: String) throws(FileSystemError) {
    let (parent, name) = Self.split(relative)
    let directory = try openDirectory(parent)
    try directory.removeFile(newName)
    try directory.link(name, to: newName)
  }

  /// Removes the file `relative` (not following a symlink there); a missing file is not an error.
  package func removeFile(_ relative: String) throws(FileSystemError) {
    let (parent, name) = Self.split(relative)
    let directory = try openDirectory(parent)
    try directory.removeFile(name)
  }

  /// Removes `relative` and, if it is a directory, everything in it — each entry through its directory's
  /// descriptor, never following a symlink (a planted link is removed, never its target). Missing is not an error.
  package func removeTree(_ relative: String) throws(FileSystemError) {
    let (parent, name) = Self.split(relative)
    let directory: SystemFD
    do { directory = try openDirectory(parent) } catch {
      if error.errno == .noSuchFileOrDirectory { return }
      throw error
    }
    try Self.removeEntry(name, in: directory)
  }

  private static func removeEntry(_ name: String, in directory: borrowing SystemFD) throws(FileSystemError) {
    do { return try directory.removeFile(name) } catch {
      guard error.errno == .isDirectory else { throw error }
    }
    do {
      let inner = try directory.open(name, [.readOnly, .directory])
      for (child, _) in try inner.entries() { try removeEntry(child, in: inner) }
    }  // `inner` closed before its directory is removed
    try directory.removeDirectory(name)
  }

  /// `replaceFile` for an absolute path inside the container (for callers that keep paths of `.coordination`).
  package func replaceFile(
    atPath absolute: String, with bytes: some Collection<UInt8>, mode: mode_t,
    durability: AtomicReplace.Durability = .processCrash
  ) throws(FileSystemError) {
    try replaceFile(try inside(absolute), with: bytes, mode: mode, durability: durability)
  }

  /// `readFile` for an absolute path inside the container.
  package func readFile(atPath absolute: String, limit: Int) throws(FileSystemError) -> [UInt8] {
    try readFile(try inside(absolute), limit: limit).bytes
  }

  /// `removeFile` for an absolute path inside the container.
  package func removeFile(atPath absolute: String) throws(FileSystemError) {
    try removeFile(try inside(absolute))
  }

  /// `removeTree` for an absolute path inside the container.
  package func removeTree(atPath absolute: String) throws(FileSystemError) {
    try removeTree(try inside(absolute))
  }

  private func inside(_ absolute: String) throws(FileSystemError) -> String {
    guard let relative = relative(absolute) else { throw FileSystemError("resolve", absolute, .improperLink) }
    return relative
  }

  /// Whether the kernel finds no symbolic link on the way to `relative` beneath the container, its last component
  /// included. One `openat2(O_WRONLY | O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` that opens nothing:
  /// true when it fails only after resolving the whole path — `EISDIR` (a directory), `ENOTDIR` (anything else, or a
  /// component that is not a directory: everything before it was resolved without a link) — or at a missing
  /// component (`ENOENT`). False when a link is there (`ELOOP`), a way out (`EXDEV`), any other error, or no
  /// `openat2`: the caller must then judge the path itself. A check, not a use: the file is still opened beneath the
  /// descriptor where it is used. The corresponding C function is `openat2`.
  package func hasNoSymbolicLink(_ relative: String) -> Bool {
    relative.withCString { hasNoSymbolicLink(cString: $0) }
  }

  /// `hasNoSymbolicLink` for a relative path given as a C string (the caller may build it without a `String`).
  package func hasNoSymbolicLink(cString relative: UnsafePointer<CChar>) -> Bool {
    if relative.pointee == 0 { return true }
    guard !Self.noOpenat2.load(ordering: .relaxed) else { return false }
    let checked = valueOrErrno { gc_openat_beneath_no_symlinks(fd.rawValue, relative, 0) }
    switch checked {
    case .success(let opened):  // never, by the flags; but a descriptor made is one to close
      _ = Glibc.close(opened)
      return true
    case .failure(let e) where e == .isDirectory || e == .notDirectory || e == .noSuchFileOrDirectory:
      return true
    case .failure(let e):
      if e == .noFunction { Self.noOpenat2.store(true, ordering: .relaxed) }
      return false
    }
  }

  /// Whether the last component of `relative` is not a symbolic link (one `readlinkat`, about half an `openat2`):
  /// for a caller that knows the directories on the way are not links (LinkFreePaths), which this follows.
  /// A missing item is no link; anything the kernel cannot say is answered false.
  package func lastComponentIsNoSymbolicLink(cString relative: UnsafePointer<CChar>) -> Bool {
    if relative.pointee == 0 { return true }
    var byte: CChar = 0
    guard Glibc.readlinkat(fd.rawValue, relative, &byte, 1) < 0 else { return false }
    return errno == EINVAL || errno == ENOENT || errno == ENOTDIR
  }

  /// A failure to open the parent directory of a file being written, told about the file the caller named, with
  /// what is wrong on the way ("its parent directory '…' does not exist").
  static func parentFailure(_ error: FileSystemError, writing target: String, parent: String) -> FileSystemError {
    switch error.errno {
    case .noSuchFileOrDirectory:
      return FileSystemError(
        "write", target, error.errno, reason: "its parent directory '\(parent)' does not exist")
    case .notDirectory:
      return FileSystemError(
        "write", target, error.errno, reason: "a component of its parent directory '\(parent)' is not a directory")
    default:
      return error
    }
  }

  /// Splits `a/b/c` into `a/b` and `c`.
  package static func split(_ relative: String) -> (parent: String, name: String) {
    guard let slash = relative.lastIndex(of: "/") else { return ("", relative) }
    return (String(relative[..<slash]), String(relative[relative.index(after: slash)...]))
  }

  private func open(
    _ relative: String, _ flags: SystemFD.OpenFlags, mode: mode_t, resolution: Resolution, followLast: Bool
  ) throws(FileSystemError) -> SystemFD {
    let full = relative.isEmpty ? path : path + "/" + relative
    let raw = SystemFD.rawFlags(followLast ? flags.union(.followSymlink) : flags)
    if resolution == .automatic && !Self.noOpenat2.load(ordering: .relaxed) {
      let start = relative.isEmpty ? "." : relative
      switch start.withCString({ start in
        valueOrErrno(.open) { gc_openat_beneath(fd.rawValue, start, raw, UInt32(mode)) }
      }) {
      case .success(let opened):
        SyscallRecorder.record(.open, full, flags: flags)
        return SystemFD(rawValue: opened, path: full)
      case .failure(let e) where e == .noFunction:
        Self.noOpenat2.store(true, ordering: .relaxed)
      case .failure(let e) where e == .notPermitted:
        break  // old seccomp profiles refuse unknown system calls with EPERM: the walk gives the real answer
      case .failure(let e):
        throw FileSystemError("openat2", full, e)
      }
    }
    // No openat2: one component at a time, refusing every symlink on the way.
    let components = relative.split(separator: "/").map(String.init)
    var current = try fd.open(".", [.readOnly, .directory])
    for (index, component) in components.enumerated() {
      guard component != "." && component != ".." else {
        throw FileSystemError("openat", full, .improperLink)  // what RESOLVE_BENEATH says for a way out
      }
      let last = index == components.count - 1
      let next =
        try last
        ? current.open(component, flags.subtracting(.followSymlink), mode: mode)
        : current.open(component, [.readOnly, .directory])
      // Assigning closes the directory before it.
      current = SystemFD(
        rawValue: next.releaseOwnership(), path: path + "/" + components[...index].joined(separator: "/"))
    }
    return current
  }
}

extension SystemFD {
  /// Creates the directory `name` in this directory with exactly `mode` (umask would filter it); an existing
  /// directory is fine, anything else there (a symlink included) is an error. The corresponding C function is
  /// `mkdirat`; the mode is set with `fchmod` on the directory it made, opened without following links.
  package func makeDirectory(_ name: String, mode: mode_t) throws(FileSystemError) {
    let created: Bool
    switch name.withCString({ name in valueOrErrno { Glibc.mkdirat(rawValue, name, mode) } }) {
    case .success: created = true
    case .failure(let e) where e == .fileExists: created = false
    case .failure(let e): throw FileSystemError("mkdirat", path + "/" + name, e)
    }
    let made: SystemFD
    do { made = try open(name, [.readOnly, .directory]) } catch {
      // ELOOP (a symlink) or ENOTDIR (a file): not a directory we may use. Any other failure (EIO, EMFILE) is
      // itself: called "not a directory", a failing disk read as a planted symlink (found by the I/O-error loops).
      guard error.errno == .tooManySymbolicLinkLevels || error.errno == .notDirectory else { throw error }
      throw FileSystemError("mkdirat", path + "/" + name, .notDirectory)
    }
    if created { try made.setPermissions(mode) }
  }
}

extension SystemFD {
  /// The entries of this directory, without `.` and `..`, and whether each is a directory (from `d_type`; an
  /// unknown type counts as not a directory, so a walk never descends blindly). The corresponding C functions
  /// are `fdopendir`/`readdir` (on a duplicate: `closedir` closes the descriptor it is given).
  package func entries() throws(FileSystemError) -> [(name: String, isDirectory: Bool)] {
    let copy = try valueOrErrno { fcntl(rawValue, F_DUPFD_CLOEXEC, 0) }.get("fcntl(F_DUPFD_CLOEXEC)", path)
    guard let dir = fdopendir(copy) else {
      let e = Errno(rawValue: Glibc.errno)
      _ = Glibc.close(copy)
      throw FileSystemError("fdopendir", path, e)
    }
    defer { closedir(dir) }
    rewinddir(dir)  // the duplicate shares the offset of an earlier listing
    var result: [(String, Bool)] = []
    while let entry = readdir(dir) {
      let name = FileSystem.entryName(entry)
      if name != "." && name != ".." { result.append((name, FileSystem.entryIsDirectory(entry))) }
    }
    return result
  }
}

extension ContainerDirectory {
  /// Removes the temp files (`AtomicReplace.temporaryPrefix`) beneath the container whose writer
  /// (`AtomicReplace.writer(ofTemporary:)`) `isAbandoned` says is dead. Never follows a symlink, looks at the
  /// directory `first` before the rest, skips the directories in `skipping` (relative paths), and looks at no more
  /// than `budget` entries so that opening a huge container stays cheap. Returns how many it removed.
  package func sweepTemporaries(
    first: String? = nil, skipping: Set<String>, budget: Int, isAbandoned: (Substring) -> Bool
  ) -> Int {
    var removed = 0
    var visited = 0
    // `first` is visited once: now, and skipped when the walk reaches it.
    var pending = [""] + (first.map { [$0] } ?? [])
    let skipping = skipping.union(first.map { [$0] } ?? [])
    while let relative = pending.popLast(), visited < budget {
      guard let directory = try? openDirectory(relative, resolution: .componentWalk) else { continue }
      for (name, isDirectory) in (try? directory.entries()) ?? [] {
        visited += 1
        let child = relative.isEmpty ? name : relative + "/" + name
        if isDirectory {
          if !skipping.contains(child) { pending.append(child) }
        } else if let writer = AtomicReplace.writer(ofTemporary: name), isAbandoned(writer) {
          if (try? directory.removeFile(name)) != nil { removed += 1 }
        }
      }
    }
    return removed
  }
}
