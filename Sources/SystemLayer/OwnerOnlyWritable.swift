import Glibc

/// The rule for a container file whose content decides what runs or where data goes — a URL scheme registration
/// (the program `open(_:)` and intent delivery start), a download session's relaunch record (the program the agent
/// starts): nobody but its owner may be able to write it.
///
/// In a group-shared container every member may create, rename and (for 0660 files) edit files, and the reader
/// would run what such a file names as itself. So the file is created without group or other write
/// (``mode(from:)``), replaced only by an atomic rename (a new inode with that mode), and trusted only when the
/// descriptor it is read from (`fstat`, never the path) shows all of:
/// - a regular file;
/// - no group or other write bit (another member could edit it in place);
/// - one link (another name for the same inode could be a file someone else controls or can write);
/// - owned by the reader's user or by root (anyone else wrote it, or renamed their own file over it).
///
/// The one place this rule is written: every reader of such a file goes through ``ContainerDirectory/readOwnerOnlyWritable(_:limit:reader:)``.
package enum OwnerOnlyWritable {
  /// Group and other write permission.
  static let othersWrite: mode_t = 0o022

  /// The mode to create such a file with: the container's file mode without group or other write (0640 in a
  /// group-shared container, 0600 for one user).
  package static func mode(from fileMode: mode_t) -> mode_t { fileMode & ~othersWrite }

  /// Why a file with `status` (from `fstat` of the open descriptor) must not be trusted by a process running as
  /// `reader`; nil when it keeps the rule. Every broken condition is named.
  package static func problem(_ status: FileStatus, reader: UInt32) -> String? {
    var problems: [String] = []
    if status.kind != .regular { problems.append("it is not a regular file") }
    if status.owner != reader && status.owner != 0 {
      problems.append("it belongs to uid \(status.owner), neither you (uid \(reader)) nor root")
    }
    let writers = [(0o020, "its group"), (0o002, "everyone")].filter { status.mode & $0.0 != 0 }.map(\.1)
    if !writers.isEmpty {
      let octal = String(status.mode & 0o7777, radix: 8)
      let shown = String(repeating: "0", count: max(0, 4 - octal.count)) + octal
      problems.append("its mode \(shown) lets \(writers.joined(separator: " and ")) write it")
    }
    if status.linkCount != 1 {
      problems.append("it has \(status.linkCount) hard links (another name for it may be someone else's to change)")
    }
    return problems.isEmpty ? nil : problems.joined(separator: "; ")
  }
}

extension ContainerDirectory {
  /// What ``readOwnerOnlyWritable(_:limit:reader:)`` found.
  package enum OwnerOnlyWritableRead: Sendable, Equatable {
    /// The file keeps the rule: its bytes.
    case trusted([UInt8])
    /// The file breaks the rule (``OwnerOnlyWritable/problem(_:reader:)``); nothing of it was read.
    case untrusted(owner: UInt32, problem: String)
  }

  /// Reads the file `relative` only if the descriptor it opened keeps ``OwnerOnlyWritable``'s rule for `reader`
  /// (its last component not followed, a FIFO not waited on). Missing files, I/O errors and files over `limit`
  /// bytes throw; a file that breaks the rule is returned as `.untrusted`, unread.
  package func readOwnerOnlyWritable(
    _ relative: String, limit: Int, reader: UInt32 = CurrentProcess.userID
  ) throws(FileSystemError) -> OwnerOnlyWritableRead {
    let file: SystemFD
    do { file = try openFile(relative, .readOnly) } catch {
      // O_NOFOLLOW refused a symbolic link at the name: a rule breach, not a damaged file.
      guard error.errno == .tooManySymbolicLinkLevels, let link = try? status(relative), link.kind == .symlink else {
        throw error
      }
      return .untrusted(owner: link.owner, problem: "it is a symbolic link, not a regular file")
    }
    let status = try file.status()
    if let problem = OwnerOnlyWritable.problem(status, reader: reader) {
      return .untrusted(owner: status.owner, problem: problem)
    }
    guard status.size <= Int64(limit) else { throw FileSystemError("read", file.path, .fileTooLarge) }
    return .trusted(try file.readAll(limit: limit))
  }
}
