import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import SystemLayer

/// Puts a verified download at its destination so that no reader ever sees part of it, and presenters hear it.
///
/// 1. fsync the partial (its bytes are on the device before any name points at them), in the access of step 2;
/// 2. a coordinated write of the destination (presenters of the file relinquish and then hear
///    `presentedItemDidChange`; presenters of its directories hear the subitem events). A plain write, not
///    `.forReplacing`: that option adds only the item's tree lock (`LOCK_EX`), which excludes accesses *inside* a
///    directory being replaced, and a download's destination is a file (a directory there is refused) — a second
///    lock file created and flocked per download for nothing;
/// 3. inside it, the destination's directories are made beneath the container's descriptor with the container's
///    mode, and the partial is renamed onto the destination from one directory descriptor to the other: a
///    directory on the way that is (or becomes) a symlink leading out is refused by the kernel (`openat2`
///    `RESOLVE_BENEATH`), never followed;
/// 4. across file systems (`EXDEV`, e.g. `Downloads/` on its own mount) the bytes are copied into a temp file in
///    the destination directory (`O_EXCL`), fsynced, and renamed over the destination — the same atomic replace;
/// 5. fsync of the destination directory, so the new name survives a power cut — shared with the other files
///    renamed into it meanwhile (`DirectorySyncs`), still inside the coordinated write.
///
/// `ENOSPC` anywhere fails with `.diskFull`, the temp file removed: nothing half-written at the destination. A full
/// quota (`EDQUOT`) fails with the system error, which names it (as the transfer's writes do): `.diskFull` says "free
/// space", which does not help a user whose quota is full.
package enum Publisher {
  package static func publish(
    file: borrowing SystemFD, partial: String, length: Int64, destination: String, container: GroupContainer,
    root: ContainerDirectory, logger: Logger
  ) async throws(DownloadError) {
    let item: ContainerPath
    do { item = try ContainerPath(destination) } catch {
      throw .invalidDestination(destination, rule: "\(error)")
    }
    guard let parent = item.parent else {
      throw .invalidDestination(destination, rule: "it names the container itself; name a file inside it")
    }
    // The fsyncs run off the cooperative pool (`offload`): a download agent finishing many files at once would
    // otherwise stop on them, one or two at a time. The partial's runs in the same offload as the rename, just
    // before it: one thread hop per file less (the item's lock is held for that fsync; nobody else writes it).
    let view = file.borrowedView  // the caller keeps `file` open until this returns
    let url = container.url.appending(path: item.string, directoryHint: .notDirectory)  // a file: no stat of its path
    let intent = FileAccessIntent.writingIntent(with: url)
    let directoryMode = container.sharing.directoryMode
    let fileMode = container.sharing.fileMode
    do {
      try await FileCoordinator().coordinate(with: [intent]) {
        let target = try await offload { () throws(DownloadError) in
          do throws(FileSystemError) { try view.sync() } catch {
            throw classify(error, destination: destination, root: root)
          }
          return try place(
            partial: partial, length: length, parent: parent, name: item.lastComponent, destination: destination,
            root: root, directoryMode: directoryMode, fileMode: fileMode, logger: logger)
        }
        // Inside the access: presenters hear of the file, and the task of its end, once its name is durable.
        do throws(FileSystemError) { try await DirectorySyncs.shared.sync(target) } catch {
          throw classify(error, destination: destination, root: root)
        }
      }
    } catch let error as DownloadError {
      throw error
    } catch let error as FileCoordinatorError {
      switch error.detail {
      case .cancelled: throw .cancelled
      case .container(let e) where e.code == .pathEscapesContainer || e.code == .invalidPath:
        throw .invalidDestination(destination, rule: "\(error)")
      case .container(let e): throw .container(e)
      case .system(let e): throw classify(e, destination: destination, root: root)
      default: throw .other("publishing '\(destination)' failed: \(error)")
      }
    } catch is CancellationError {
      throw .cancelled
    } catch {
      throw .other("publishing '\(destination)' failed: \(error)")
    }
  }

  /// The accessor of the coordinated write, up to the directory's fsync (`DirectorySyncs`, which the caller runs on
  /// the directory returned): everything relative to directory descriptors.
  static func place(
    partial: String, length: Int64, parent: ContainerPath, name: String, destination: String,
    root: ContainerDirectory, directoryMode: mode_t, fileMode: mode_t, logger: Logger
  ) throws(DownloadError) -> DescriptorBox {
    do throws(FileSystemError) {
      // Most files go where the directories exist, no link on the way: one call. Otherwise the destination's
      // directories are made one at a time beneath the container (a symlink on the way is refused).
      let target: SystemFD
      if let existing = root.openDirectoryIfNoSymbolicLink(parent.string) {
        target = existing
      } else {
        for depth in 1...max(1, parent.depth) where !parent.isRoot {
          try root.makeDirectory(parent.components[0..<depth].joined(separator: "/"), mode: directoryMode)
        }
        target = try root.openDirectory(parent.string)
      }
      let (partialParent, partialName) = ContainerDirectory.split(partial)
      let source = try root.openDirectory(partialParent)
      if let existing = try target.status(of: name), existing.kind == .directory {
        throw FileSystemError("rename (a directory is at the destination)", target.path + "/" + name, .isDirectory)
      }
      do throws(FileSystemError) {
        try source.rename(partialName, into: target, as: name)
      } catch  where error.errno == .improperLink {
        try copyAcross(from: source, partialName, to: target, name, length: length, mode: fileMode, logger: logger)
        try? source.removeFile(partialName)
      }
      return DescriptorBox(target)
    } catch {
      throw classify(error, destination: destination, root: root)
    }
  }

  /// `EXDEV`: the partial and the destination are on two file systems. Copy into a temp file beside the
  /// destination and replace atomically; any failure removes the temp file.
  static func copyAcross(
    from source: borrowing SystemFD, _ partialName: String, to target: borrowing SystemFD, _ name: String,
    length: Int64, mode: mode_t,
    logger: Logger
  ) throws(FileSystemError) {
    logger.debug("publishing across file systems: copying", metadata: ["to": "\(target.path)/\(name)"])
    let input = try source.open(partialName, .readOnly)
    let temp = try AtomicReplace.createTemporary(in: target, for: name, mode: mode)
    do {
      try input.copyContents(to: temp.fd, length: length)
      try temp.fd.sync()
    } catch {
      try? target.removeFile(temp.close())
      throw error
    }
    let tempName = temp.close()  // before the rename (see `AtomicReplace.Temporary.close`)
    do { try target.rename(tempName, to: name) } catch {
      try? target.removeFile(tempName)
      throw error
    }
  }

  /// A file-system failure in the words of a download: a full disk, a destination leading out, or the call.
  static func classify(_ error: FileSystemError, destination: String, root: ContainerDirectory) -> DownloadError {
    switch error.errno {
    case .noSpace:
      return .diskFull(path: root.path + "/" + destination)
    case .improperLink:
      return .invalidDestination(destination, rule: "a directory on the way leads outside the container (\(error))")
    case .tooManySymbolicLinkLevels:
      return .invalidDestination(destination, rule: "a symbolic link is in the way (\(error))")
    case .notDirectory:
      return .invalidDestination(destination, rule: "a file is in the way where a directory is needed (\(error))")
    default:
      return .system(error)
    }
  }
}
