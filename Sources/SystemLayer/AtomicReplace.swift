import Glibc
import SystemPackage

/// The one atomic-replace sequence of the package: readers see the old file or the new one, never a mix,
/// and a writer killed at any point leaves the old file intact.
///
/// temp file in the same directory, created with `O_EXCL` → write → `fchmod` → (`fsync`) → `rename` over the
/// target → (`fsync` of the directory). Foundation's `Data.write(options: .atomic)` skips the directory sync,
/// resets the mode and leaves temp files behind, so it is never used on container files.
package enum AtomicReplace {
  /// How far a replace must survive.
  package enum Durability: Sendable {
    /// Survives the death of any process (the kernel has the data): no fsync.
    case processCrash
    /// Also survives power loss: fsync of the file and of its directory.
    case powerLoss
  }

  /// Temp files start with this prefix, so scanners can skip and sweep them.
  package static let temporaryPrefix = ".gc-tmp-"

  /// Replaces the file at `path` with `bytes`.
  package static func write(
    _ bytes: some Collection<UInt8>, to path: String, mode: mode_t, durability: Durability = .processCrash
  ) throws(FileSystemError) {
    let slash = path.lastIndex(of: "/")
    let directory = slash.map { String(path[..<$0]) } ?? "."
    let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
    let temp = try createTemporary(in: directory, for: name, mode: mode)
    do {
      try temp.fd.writeAll(bytes)
      if durability == .powerLoss { try temp.fd.sync() }
      temp.fd.close()
      try FileSystem.rename(temp.path, to: path)
    } catch {
      temp.fd.close()
      try? FileSystem.removeFile(temp.path)
      throw error
    }
    if durability == .powerLoss { try FileSystem.syncDirectory(directory) }
  }

  /// Creates a fresh temp file next to the target, with exactly `mode` (umask would leave 0644).
  package static func createTemporary(
    in directory: String, for name: String, mode: mode_t
  ) throws(FileSystemError) -> (fd: SystemFD, path: String) {
    var attempt = 0
    while true {
      let path = "\(directory)/\(temporaryPrefix)\(getpid())-\(UInt32.random(in: 0...UInt32.max))-\(name.prefix(64))"
      do throws(FileSystemError) {
        let fd = try SystemFD.open(path, [.writeOnly, .exclusiveCreate], mode: mode)
        do { try fd.setPermissions(mode) } catch {
          fd.close()
          try? FileSystem.removeFile(path)
          throw error
        }
        return (fd, path)
      } catch {
        guard error.errno == .fileExists && attempt < 8 else { throw error }
        attempt += 1
      }
    }
  }
}
