import Synchronization
import SystemLayer

/// Whether a container may live on a file system: flock and inotify must behave as on a local disk, or the
/// coordination guarantees silently stop holding. NFS, CIFS/SMB, FUSE, overlayfs and the other kinds
/// `FileSystemKind.unsupportedReason` names are refused unless the user opts in.
package enum FileSystemSupport {
  /// The environment variable that opts in to an unsupported file system (`1`).
  package static let allowVariable = "GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM"

  /// Set by ``GroupContainer/allowsUnsupportedFileSystem``.
  package static let allowed = Atomic<Bool>(false)

  /// Tests: the magic number to report instead of `statfs`'s, for paths under a prefix (an overlay or FUSE
  /// mount is not always possible). Keyed by path prefix so that tests running in parallel do not see each other's.
  package static let injectedKinds = Mutex<[String: FileSystemKind]>([:])

  /// Whether the user opted in, by the static setting or the environment.
  package static var optedIn: Bool {
    allowed.load(ordering: .relaxed) || Environment.value(allowVariable) == "1"
  }

  /// The file system of `path`, as `statfs` says (or a test injected).
  package static func kind(of path: String) throws(FileSystemError) -> FileSystemKind {
    let injected = injectedKinds.withLock { kinds in
      kinds.first { path == $0.key || path.hasPrefix($0.key + "/") }?.value
    }
    if let injected { return injected }
    return try FileSystem.kind(of: path)
  }

  /// Refuses `rootPath` (the directory holding containers) when it lives on a file system where flock or inotify
  /// do not work as the package needs, unless the user opted in; the container directory is checked too when it
  /// exists (a mount point of its own).
  package static func check(rootPath: String, containerPath: String) throws(GroupContainerError) {
    if optedIn { return }
    for path in [rootPath, containerPath] {
      let kind: FileSystemKind
      do {
        guard try FileSystem.status(path) != nil else { continue }
        kind = try Self.kind(of: path)
      } catch { throw .system(error) }
      if let reason = kind.unsupportedReason {
        throw .unsupportedFileSystem(path, kind: kind.name, reason: reason)
      }
    }
  }
}

extension GroupContainer {
  /// Allows containers on file systems that break flock or inotify (NFS, CIFS/SMB, FUSE, overlayfs…), which
  /// `init` otherwise refuses with ``GroupContainerError/unsupportedFileSystem(_:kind:reason:)``. The environment
  /// variable `GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1` does the same. Coordination there is best effort:
  /// writers may overlap and presenters may miss changes.
  public static var allowsUnsupportedFileSystem: Bool {
    get { FileSystemSupport.allowed.load(ordering: .relaxed) }
    set { FileSystemSupport.allowed.store(newValue, ordering: .relaxed) }
  }

  /// Tests: makes paths at or under `prefix` report file system `magic` (an `f_type` number); nil removes it.
  package static func injectFileSystemKind(_ magic: UInt64?, under prefix: String) {
    FileSystemSupport.injectedKinds.withLock { $0[prefix] = magic.map { FileSystemKind(magic: $0) } }
  }
}
