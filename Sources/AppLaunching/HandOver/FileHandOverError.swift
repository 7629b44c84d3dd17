import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// Why a file could not be handed over to another app.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`).
public struct FileHandOverError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure a ``FileHandOverError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `notOpened`.
    public var description: String { name }

    /// The file to send cannot be opened or read.
    public static let unreadableSource = Code("unreadableSource")
    /// The file to send is not a regular file.
    public static let notARegularFile = Code("notARegularFile")
    /// The file's name cannot be a file name in the Inbox.
    public static let invalidName = Code("invalidName")
    /// The receiver's `Documents/Inbox/` cannot be used.
    public static let inboxUnusable = Code("inboxUnusable")
    /// The receiving app's handler answered that it did not open the file.
    public static let notOpened = Code("notOpened")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case unreadableSource(String, reason: String)
    case notARegularFile(String, kind: String)
    case invalidName(String, rule: String)
    case inboxUnusable(String, reason: String)
    case notOpened(String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The file to send cannot be opened or read; `reason` says why (missing, permissions…).
  public static func unreadableSource(_ path: String, reason: String) -> Self {
    Self(.unreadableSource(path, reason: reason))
  }
  /// The file to send is not a regular file (`kind`: a directory, a FIFO, a device…): only documents are handed over.
  public static func notARegularFile(_ path: String, kind: String) -> Self { Self(.notARegularFile(path, kind: kind)) }
  /// The file's name cannot be a file name in the Inbox; `rule` says why.
  public static func invalidName(_ name: String, rule: String) -> Self { Self(.invalidName(name, rule: rule)) }
  /// The receiver's `Documents/Inbox/` cannot be used (a symbolic link, not a directory…); `reason` says why.
  public static func inboxUnusable(_ path: String, reason: String) -> Self {
    Self(.inboxUnusable(path, reason: reason))
  }
  /// The receiving app's handler answered that it did not open the file (it stays in the Inbox at `path`).
  public static func notOpened(_ path: String) -> Self { Self(.notOpened(path)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .unreadableSource: .unreadableSource
    case .notARegularFile: .notARegularFile
    case .invalidName: .invalidName
    case .inboxUnusable: .inboxUnusable
    case .notOpened: .notOpened
    }
  }

  /// The file (the source, the Inbox, or the copy in it) or, for ``Code/invalidName``, the name.
  public var path: String {
    switch detail {
    case .unreadableSource(let path, _), .notARegularFile(let path, _), .invalidName(let path, _),
      .inboxUnusable(let path, _), .notOpened(let path):
      path
    }
  }

  /// Why: the source's or the Inbox's problem, the broken naming rule, or (``Code/notARegularFile``) what the
  /// source is; nil for ``Code/notOpened``.
  public var reason: String? {
    switch detail {
    case .unreadableSource(_, let text), .notARegularFile(_, let text), .invalidName(_, let text),
      .inboxUnusable(_, let text):
      text
    case .notOpened: nil
    }
  }

  /// What failed, on which file, and what to do.
  public var description: String {
    switch detail {
    case .unreadableSource(let path, let reason): "cannot send '\(path)': \(reason)"
    case .notARegularFile(let path, let kind):
      "cannot send '\(path)': it is \(kind), not a regular file; only documents can be handed over"
    case .invalidName(let name, let rule): "cannot send a file named '\(name)': \(rule)"
    case .inboxUnusable(let path, let reason):
      "cannot hand the file over: the receiver's Inbox '\(path)' \(reason); remove it and let the hand-over make "
        + "the directory"
    case .notOpened(let path): "the receiving app did not open '\(path)' (the copy stays in its Inbox)"
    }
  }
}
