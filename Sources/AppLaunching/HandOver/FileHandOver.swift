import FileCoordination
import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// The hand-over rule: how a file sent to another app lands in its `Documents/Inbox/`.
///
/// 1. The source is opened once (`O_NONBLOCK`: a FIFO does not block) and `fstat`ed: only a regular file is
///    sent, and what is copied is what was checked (the descriptor, not the path again).
/// 2. `Documents` and `Documents/Inbox` are opened beneath the container's descriptor, refusing every symbolic
///    link on the way (the Inbox is made when missing): a link planted there cannot lead the copy outside.
/// 3. The copy goes to a temp file (`O_EXCL`) in the Inbox, is fsynced, and is published by
///    `renameat2(RENAME_NOREPLACE)` under the source's name — or, when taken, `name-1.ext`, `name-2.ext`… as iOS
///    does — then the Inbox is fsynced. A receiver never sees a partial file, and no file in the Inbox is replaced.
/// 4. The receiver gets the file's URL through the URL delivery (URLOpening.swift): its `onOpenURL` handler,
///    running or started for it, is called with the `file:` URL.
///
/// Apps of a group share one container, so the Inbox is the container's `Documents/Inbox/`, where the scheme is
/// registered. The hand-over is the one writer of the Inbox (InboxRule.swift).
enum FileHandOver {
  static let inboxPath = "Documents/Inbox"
  /// How many numbered names are tried before giving up.
  static let maxSuffix = 9_999

  /// Copies `source` into the container's Inbox; returns the name it got there.
  static func copy(_ source: String, into space: MessagingSpace) throws -> String {
    let name = (source as NSString).lastPathComponent
    do { _ = try ContainerPath(name) } catch { throw FileHandOverError.invalidName(name, rule: "\(error)") }
    guard !name.hasPrefix(AtomicReplace.temporaryPrefix) else {
      throw FileHandOverError.invalidName(
        name, rule: "names starting with '\(AtomicReplace.temporaryPrefix)' are temp files")
    }
    let file: SystemFD
    do { file = try SystemFD.open(source, [.readOnly, .followSymlink]) } catch {
      throw FileHandOverError.unreadableSource(source, reason: "\(error)")
    }
    let status: FileStatus
    do { status = try file.status() } catch { throw FileHandOverError.unreadableSource(source, reason: "\(error)") }
    guard status.kind == .regular else {
      let kind = status.kind == .directory ? "a directory" : "a FIFO, socket or device"
      throw FileHandOverError.notARegularFile(source, kind: kind)
    }
    let inbox = try openInbox(space)
    let temp = try AtomicReplace.createTemporary(in: inbox, for: name, mode: space.fileMode)
    do {
      do { try file.copyContents(to: temp.fd, length: status.size) } catch {
        throw FileHandOverError.unreadableSource(source, reason: "\(error)")
      }
      try temp.fd.sync()
      let published = try publish(temp.name, as: name, in: inbox)
      try inbox.sync()
      return published
    } catch {
      try? inbox.removeFile(temp.name)
      throw error
    }
  }

  /// `Documents/Inbox` opened beneath the container, every component without following a link.
  private static func openInbox(_ space: MessagingSpace) throws -> SystemFD {
    let where_ = space.containerPath + "/" + inboxPath
    let documents: SystemFD
    do { documents = try space.root.openDirectory("Documents", resolution: .componentWalk) } catch {
      throw FileHandOverError.inboxUnusable(
        space.containerPath + "/Documents", reason: refusal(error))
    }
    do {
      try documents.makeDirectory("Inbox", mode: space.directoryMode)
      return try documents.open("Inbox", [.readOnly, .directory])
    } catch {
      throw FileHandOverError.inboxUnusable(where_, reason: refusal(error))
    }
  }

  private static func refusal(_ error: FileSystemError) -> String {
    switch error.errno {
    case .tooManySymbolicLinkLevels, .notDirectory, .fileExists:
      "is a symbolic link or not a directory (links are never followed there)"
    default: "cannot be opened (\(error))"
    }
  }

  /// Renames `temp` to `name`, or the first free `name-N.ext`.
  private static func publish(_ temp: String, as name: String, in inbox: borrowing SystemFD) throws -> String {
    let ext = (name as NSString).pathExtension
    let stem =
      ext.isEmpty || name.hasPrefix(".") && !name.dropFirst().contains(".")
      ? name : String(name.dropLast(ext.count + 1))
    for n in 0...maxSuffix {
      let candidate = n == 0 ? name : stem + "-\(n)" + (stem == name ? "" : "." + ext)
      guard candidate.utf8.count <= ContainerPath.maxComponentBytes else { break }
      // A plain `Result`: a typed `catch where` here crashed the 6.3 compiler (SIL ownership verifier).
      let result = Result { () throws(FileSystemError) in try inbox.renameNoReplace(temp, to: candidate) }
      switch result {
      case .success: return candidate
      case .failure(let error) where error.errno == .fileExists: continue
      case .failure(let error): throw error
      }
    }
    throw FileHandOverError.invalidName(name, rule: "no free name for it in the Inbox")
  }
}

extension GroupContainer {
  /// Hands `file` over to the app that registered `scheme` — "Open in…", AirDrop — and returns the copy's URL.
  ///
  /// The file is copied into the container's `Documents/Inbox/` (the receiver's Inbox: apps of a group share the
  /// container) under its name, or `name-1.ext`… when taken, atomically (temp file, fsync, rename beneath the
  /// container's descriptor). Then the receiver's ``onOpenURL(schemes:perform:)`` handler is called with the
  /// copy's `file:` URL — the app running, or started for it as ``open(_:timeout:)`` does.
  ///
  /// The receiver may read the file, delete it, or move it out of the Inbox; writes into the Inbox are refused
  /// (`GroupContainerError.inboxIsReadOnly(_:)`).
  ///
  /// - Throws: ``FileHandOverError`` when `file` is not a readable regular file or the Inbox is unusable (a
  ///   symbolic link), or the receiver answered that it did not open it; `OpenURLError` when no app registered
  ///   `scheme`, it could not be started, or it did not answer.
  @discardableResult
  public func send(file: URL, toScheme scheme: String, timeout: Duration = .seconds(10)) async throws -> URL {
    let handlers = try urlHandlers()
    let validScheme = try OpenURLRule.validate(scheme: scheme)
    // Before copying: a file sent to nobody would stay in the Inbox.
    guard try handlers.registration(for: validScheme) != nil else {
      throw OpenURLError.unknownScheme(validScheme)
    }
    let name = try FileHandOver.copy(file.path, into: handlers.space)
    let copy = documentsURL.appendingPathComponent("Inbox", isDirectory: true).appendingPathComponent(name)
    guard try await handlers.open(copy, scheme: validScheme, timeout: timeout) else {
      throw FileHandOverError.notOpened(copy.path)
    }
    return copy
  }
}
