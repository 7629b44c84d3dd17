import CSystemShims
import Glibc
import SystemPackage

/// The kind of file system a path lives on, by the `f_type` magic number `statfs` reports, and whether the
/// package's guarantees hold there.
///
/// flock and inotify are local-kernel mechanisms: on NFS flock is emulated with fcntl locks and inotify sees no
/// remote writes; CIFS/SMB, 9p, Ceph and other network file systems behave alike; FUSE file systems may implement
/// neither; overlayfs reports no inotify events for changes made in its lower layers and copies a file up (a new
/// inode) on its first write, so a lock taken before the copy-up guards the wrong file.
package struct FileSystemKind: Sendable, Equatable, CustomStringConvertible {
  /// The `f_type` magic number.
  package var magic: UInt64

  package init(magic: UInt64) { self.magic = magic }

  /// A human name for the magic number (`"0x…"` when it is not one this table knows).
  package var name: String {
    Self.names[magic]?.name ?? "0x" + String(magic, radix: 16)
  }

  /// Why the package's guarantees do not hold on this file system; nil when they do (or it is not known to break).
  package var unsupportedReason: String? {
    Self.names[magic]?.breaks
  }

  package var description: String { name }

  private static let network =
    "a network file system: flock is emulated or per-client and inotify sees no writes "
    + "made by other machines"
  private static let names: [UInt64: (name: String, breaks: String?)] = [
    0xEF53: ("ext4", nil),
    0x0102_1994: ("tmpfs", nil),
    0x9123_683E: ("btrfs", nil),
    0x5846_5342: ("xfs", nil),
    0xF2F5_2010: ("f2fs", nil),
    0x2FC1_2FC1: ("zfs", nil),
    0x4D44: ("vfat", nil),
    0x2011_BAB0: ("exfat", nil),
    0x6969: ("nfs", network),
    0x517B: ("smb", network),
    0xFF53_4D42: ("cifs", network),
    0xFE53_4D42: ("smb2", network),
    0x0102_1997: ("9p", network),
    0x00C3_6400: ("ceph", network),
    0x5346_414F: ("afs", network),
    0x6B41_4653: ("afs", network),
    0x0BD0_0BD0: ("lustre", network),
    0x0116_1970: ("gfs2", "a cluster file system: locks and inotify are per node"),
    0x7461_636F: ("ocfs2", "a cluster file system: locks and inotify are per node"),
    0x6573_5546: (
      "fuse", "a FUSE file system: the user-space server decides whether flock and inotify work, and most do not"
    ),
    0x794C_7630: (
      "overlay",
      "overlayfs: a file's first write copies it up to a new inode (a lock taken before guards the old one) and "
        + "changes in the lower layers raise no inotify events"
    ),
    0x6175_6673: ("aufs", "a union file system: copy-up gives files new inodes and lower-layer changes are unseen"),
  ]
}

/// Space on a file system, from `statfs`.
package struct FileSystemSpace: Sendable, Equatable {
  /// Bytes an unprivileged user can still write.
  package var availableBytes: UInt64
  /// The file system's size in bytes.
  package var totalBytes: UInt64
  /// Inodes an unprivileged user can still create (0 when the file system does not count them).
  package var availableInodes: UInt64
}

extension FileSystem {
  /// The file system `path` lives on. The corresponding C function is `statfs`.
  package static func kind(of path: String) throws(FileSystemError) -> FileSystemKind {
    FileSystemKind(magic: try statfs(path).magic)
  }

  /// The free and total space of the file system `path` lives on. The corresponding C function is `statfs`.
  package static func space(of path: String) throws(FileSystemError) -> FileSystemSpace {
    try statfs(path).space
  }

  private static func statfs(_ path: String) throws(FileSystemError) -> (magic: UInt64, space: FileSystemSpace) {
    var type: UInt64 = 0
    var block: UInt64 = 0
    var blocks: UInt64 = 0
    var available: UInt64 = 0
    var inodes: UInt64 = 0
    _ = try valueOrErrno { gc_statfs(path, &type, &block, &blocks, &available, &inodes) }.get("statfs", path)
    return (
      type,
      FileSystemSpace(availableBytes: available * block, totalBytes: blocks * block, availableInodes: inodes)
    )
  }
}
