import Glibc
import Synchronization
import SystemPackage

/// The one atomic-replace sequence of the package: readers see the old file or the new one, never a mix,
/// and a writer killed at any point leaves the old file intact.
///
/// temp file created with `O_EXCL` → write → `fchmod` (only when the umask took bits away) → (`fsync`) →
/// `renameat` over the target → (`fsync` of the directory). Every step is relative to directory descriptors, which
/// `ContainerDirectory` opened beneath the container: a directory swapped for a symlink meanwhile changes nothing.
///
/// The temp file is made in a staging directory when the caller has one (the container's `.coordination/staging`,
/// as Apple's item replacement directory), else next to the target. Staged, a replace is one event
/// (`IN_MOVED_TO`) for whoever watches the target's directory instead of four (the temp file's create,
/// close-write and moved-from too): each woke every presenter process of the directory's items, in the middle of
/// the writer's coordinated access. A target on another file system (a mount inside the container, `EXDEV`) or a
/// staging directory that is gone is written next to the target instead.
/// Foundation's `Data.write(options: .atomic)` skips the directory sync, resets the mode and leaves temp files
/// behind, so it is never used on container files.
package enum AtomicReplace {
  /// How far a replace must survive.
  package enum Durability: Sendable {
    /// Survives the death of any process (the kernel has the data): no fsync.
    case processCrash
    /// Also survives power loss: fsync of the file and of its directory.
    case powerLoss
    /// Survives power loss once the caller has fsynced the directory: the file is fsynced here, the directory is
    /// not, so several replaces in one directory share one directory fsync (the caller's, after the last).
    case powerLossOnceDirectorySynced
  }

  /// Temp files start with this prefix, so scanners can skip and sweep them.
  package static let temporaryPrefix = ".gc-tmp-"
  /// The longest part of the target's name a temp name repeats, in bytes (the whole name stays under NAME_MAX).
  static let maxNameBytesInTemporary = 64
  /// `<pid>.<start time>` of this process: a sweeper can tell whether a temp file's writer is still alive.
  package static let writer = "\(getpid()).\(CurrentProcess.startTime() ?? 0)"

  /// Replaces the file `name` in `directory` with `bytes`, the temp file made in `staging` when given. Returns the
  /// status of the file written, taken before it was published (an identity no later writer of that name can have
  /// set).
  @discardableResult
  package static func write(
    _ bytes: some Collection<UInt8>, in directory: borrowing SystemFD, name: String, mode: mode_t,
    durability: Durability = .processCrash, staging: borrowing SystemFD? = nil
  ) throws(FileSystemError) -> FileStatus {
    try write(parts: 1, in: directory, name: name, mode: mode, durability: durability, staging: staging) {
      (fd, _) throws(FileSystemError) in try fd.writeAll(bytes)
    }
  }

  /// Replaces the file `name` in `directory` with what `writePart` writes for each part in `0..<parts` (a header
  /// and a body from their own buffers, without joining them first), the temp file made in `staging` when given.
  /// Returns the written file's status. `writePart` may be called again for the same part when a staged temp file
  /// cannot be renamed into `directory` (another file system): the replace starts over next to the target.
  @discardableResult
  package static func write(
    parts: Int, in directory: borrowing SystemFD, name: String, mode: mode_t, durability: Durability = .processCrash,
    staging: borrowing SystemFD? = nil, _ writePart: (borrowing SystemFD, Int) throws(FileSystemError) -> Void
  ) throws(FileSystemError) -> FileStatus {
    // Errors name the file the caller writes, never the temp file (an internal name the user cannot act on);
    // built only for an error.
    var target: String { directory.path + "/" + name }
    let staging = staging.borrowedView
    let staged = staging != nil
    // Where the temp file is made: a view, as both candidates are the caller's.
    let place = staged ? staging!.borrowedView : directory.borrowedView
    let temp: Temporary
    do { temp = try createTemporary(in: place, for: name, mode: mode, exactMode: false) } catch {
      if staged {  // the staging directory is gone or full of strangers: next to the target
        return try write(parts: parts, in: directory, name: name, mode: mode, durability: durability, writePart)
      }
      if error.errno == .noSuchFileOrDirectory {
        throw error.about(target, reason: "its directory '\(directory.path)' was removed")
      }
      if error.errno == .permissionDenied {
        throw error.about(target, reason: "you may not create files in its directory '\(directory.path)'")
      }
      throw error.about(target)
    }
    let written: FileStatus
    do {
      for part in 0..<parts { try writePart(temp.fd, part) }
      var status = try temp.fd.status()
      // Created with `mode` filtered by the umask, so never more open than asked; fchmod only when the umask took
      // something away (one system call saved in the usual case, 0600 under umask 022).
      if status.mode & 0o7777 != mode & 0o7777 {
        try temp.fd.setPermissions(mode)
        status.mode = (status.mode & ~0o7777) | (mode & 0o7777)
      }
      if durability != .processCrash { try temp.fd.sync() }
      written = status
    } catch {
      try? place.removeFile(temp.close())
      throw error.path.contains(temporaryPrefix) ? error.about(target) : error
    }
    let tempName = temp.close()  // before the rename, see `Temporary.close`
    do {
      if staged {
        try place.rename(tempName, into: directory, as: name)
      } else {
        try directory.rename(tempName, to: name)
      }
    } catch {
      try? place.removeFile(tempName)
      if staged && (error.errno == .improperLink || error.errno == .noSuchFileOrDirectory) {
        return try write(parts: parts, in: directory, name: name, mode: mode, durability: durability, writePart)
      }
      throw error.about(target)
    }
    if durability == .powerLoss { try directory.sync() }
    return written
  }

  /// A temp file `createTemporary` made: its descriptor (owned) and its name in the directory.
  package struct Temporary: ~Copyable {
    /// The temp file, open for reading and writing.
    package let fd: SystemFD
    /// Its name in the directory it was made in.
    package let name: String

    /// The descriptor alone, for a caller that keeps the file open under its final name.
    package consuming func takeDescriptor() -> SystemFD { fd }

    /// Closes the temp file and answers its name. A writer closes it before the rename: closed after, its
    /// close-write event would name the published file, one more event for whoever watches that directory.
    @discardableResult
    package consuming func close() -> String {
      let name = name
      fd.close()
      return name
    }
  }

  /// Creates a fresh temp file in `directory`, named for `name`, with exactly `mode` (umask would leave 0644);
  /// with `exactMode` false, with `mode` as the umask filters it (the caller fixes it).
  package static func createTemporary(
    in directory: borrowing SystemFD, for name: String, mode: mode_t, exactMode: Bool = true
  ) throws(FileSystemError) -> Temporary {
    var attempt = 0
    while true {
      let temp = temporaryName(for: name, number: nextTemporaryNumber())
      do throws(FileSystemError) {
        // Readable too: a writer that streams a file may read back what it wrote (the suite image's dedup).
        let fd = try directory.open(temp, [.readWrite, .exclusiveCreate], mode: mode)
        guard exactMode else { return Temporary(fd: fd, name: temp) }
        do { try fd.setPermissions(mode) } catch {
          try? directory.removeFile(temp)
          throw error
        }
        return Temporary(fd: fd, name: temp)
      } catch {
        guard error.errno == .fileExists && attempt < 8 else { throw error }
        attempt += 1
      }
    }
  }

  /// `.gc-tmp-<writer>-<number in hex>-<start of name>`, its bytes written straight into one string (interpolation
  /// made three strings, and appending piece by piece was a tenth of a write's own time on tmpfs).
  package static func temporaryName(for name: String, number: UInt64) -> String {
    var kept = prefix(of: name, bytes: maxNameBytesInTemporary)
    var start = temporaryPrefix
    var process = writer
    let digits = max(1, 16 - number.leadingZeroBitCount / 4)
    let count = start.utf8.count + process.utf8.count + digits + 2 + kept.utf8.count
    return String(unsafeUninitializedCapacity: count) { out in
      var at = 0
      func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        for byte in bytes {
          out[at] = byte
          at += 1
        }
      }
      start.withUTF8 { append($0) }
      process.withUTF8 { append($0) }
      out[at] = UInt8(ascii: "-")
      at += 1
      for shift in stride(from: (digits - 1) * 4, through: 0, by: -4) {
        let nibble = UInt8((number >> UInt64(shift)) & 0xf)
        out[at] = nibble < 10 ? 48 + nibble : 87 + nibble
        at += 1
      }
      out[at] = UInt8(ascii: "-")
      at += 1
      kept.withUTF8 { append($0) }
      return at
    }
  }

  /// Numbers for temp names: a random start, then a step, without a system call per name (`UInt32.random` costs a
  /// `getrandom` each: one of the fifteen calls of a write). Unique within the process (the name also holds the
  /// writer); `O_EXCL` and the retries in `createTemporary` cover a name that is taken all the same.
  private static let temporaryNumbers = Atomic<UInt64>(UInt64.random(in: 0...UInt64.max))

  static func nextTemporaryNumber() -> UInt64 {
    // A Weyl sequence: the odd step visits every 64-bit value before one repeats.
    temporaryNumbers.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
  }

  /// The writer (`<pid>.<start time>`) named in a temp file's name, or nil when `name` is not one of ours.
  package static func writer(ofTemporary name: String) -> Substring? {
    guard name.hasPrefix(temporaryPrefix) else { return nil }
    let rest = name.dropFirst(temporaryPrefix.count)
    guard let dash = rest.firstIndex(of: "-") else { return nil }
    return rest[..<dash]
  }

  /// At most `bytes` UTF-8 bytes of `name`, cut at a Unicode scalar boundary (Characters can be many bytes:
  /// 64 emoji are 256 bytes).
  package static func prefix(of name: String, bytes: Int) -> String {
    if name.utf8.count <= bytes { return name }
    var end = name.unicodeScalars.startIndex
    var count = 0
    for index in name.unicodeScalars.indices {
      let size = UTF8.width(name.unicodeScalars[index])
      if count + size > bytes { break }
      count += size
      end = name.unicodeScalars.index(after: index)
    }
    return String(Substring(name.unicodeScalars[..<end]))
  }
}
