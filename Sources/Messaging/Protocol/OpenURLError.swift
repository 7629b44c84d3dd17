import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// Why a URL could not be opened.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`).
public struct OpenURLError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure an ``OpenURLError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `unknownScheme`.
    public var description: String { name }

    /// The URL breaks RFC 3986 or a limit.
    public static let invalidURL = Code("invalidURL")
    /// No app registered the URL's scheme in this container.
    public static let unknownScheme = Code("unknownScheme")
    /// The registered app could not be started, or did not install its handler in time.
    public static let launchFailed = Code("launchFailed")
    /// The handler's process died, or did not answer in time.
    public static let noAnswer = Code("noAnswer")
    /// The scheme's registration file may have been written by someone else: its program is not started.
    public static let untrustedRegistration = Code("untrustedRegistration")
    /// `registerURLScheme` was given a program that cannot be started.
    public static let invalidExecutable = Code("invalidExecutable")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case invalidURL(String, rule: String)
    case unknownScheme(String)
    case launchFailed(String, reason: String)
    case noAnswer(String)
    case untrustedRegistration(String, path: String, owner: UInt32, problem: String)
    case invalidExecutable(String, reason: String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The URL breaks RFC 3986 or a limit; `rule` says which.
  public static func invalidURL(_ url: String, rule: String) -> Self { Self(.invalidURL(url, rule: rule)) }
  /// No app registered the URL's scheme in this container.
  public static func unknownScheme(_ scheme: String) -> Self { Self(.unknownScheme(scheme)) }
  /// The registered app could not be started, or did not install its handler in time.
  public static func launchFailed(_ url: String, reason: String) -> Self { Self(.launchFailed(url, reason: reason)) }
  /// The handler's process died, or did not answer in time.
  public static func noAnswer(_ url: String) -> Self { Self(.noAnswer(url)) }
  /// The scheme's registration file may have been written by someone else: it is not owned by you or root, or its
  /// group or others may write it, or it has more than one link, or it is not a regular file (`problem` says
  /// which). Its program is not started.
  public static func untrustedRegistration(_ scheme: String, path: String, owner: UInt32, problem: String) -> Self {
    Self(.untrustedRegistration(scheme, path: path, owner: owner, problem: problem))
  }
  /// `registerURLScheme` was given a program that cannot be started (missing, not a regular file, or not
  /// executable); `reason` says which.
  public static func invalidExecutable(_ path: String, reason: String) -> Self {
    Self(.invalidExecutable(path, reason: reason))
  }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .invalidURL: .invalidURL
    case .unknownScheme: .unknownScheme
    case .launchFailed: .launchFailed
    case .noAnswer: .noAnswer
    case .untrustedRegistration: .untrustedRegistration
    case .invalidExecutable: .invalidExecutable
    }
  }

  /// What was refused: the URL (``Code/invalidURL``, ``Code/launchFailed``, ``Code/noAnswer``), the scheme
  /// (``Code/unknownScheme``, ``Code/untrustedRegistration``) or the program (``Code/invalidExecutable``).
  public var subject: String {
    switch detail {
    case .invalidURL(let text, _), .unknownScheme(let text), .launchFailed(let text, _), .noAnswer(let text),
      .untrustedRegistration(let text, _, _, _), .invalidExecutable(let text, _):
      text
    }
  }

  /// The registration file, for ``Code/untrustedRegistration``.
  public var registrationPath: String? {
    if case .untrustedRegistration(_, let path, _, _) = detail { path } else { nil }
  }

  /// The user id owning the registration file, for ``Code/untrustedRegistration``.
  public var registrationOwner: UInt32? {
    if case .untrustedRegistration(_, _, let owner, _) = detail { owner } else { nil }
  }

  /// Why: the broken rule, why the launch failed, what is wrong with the registration or the program; nil for
  /// ``Code/unknownScheme`` and ``Code/noAnswer``.
  public var reason: String? {
    switch detail {
    case .invalidURL(_, let text), .launchFailed(_, let text), .untrustedRegistration(_, _, _, let text),
      .invalidExecutable(_, let text):
      text
    case .unknownScheme, .noAnswer: nil
    }
  }

  /// What was refused and why, naming the URL or the registration file.
  public var description: String {
    switch detail {
    case .invalidURL(let url, let rule): "URL '\(url)' is invalid: \(rule)"
    case .unknownScheme(let scheme):
      "no app handles '\(scheme):' URLs in this container: register one with registerURLScheme(_:launching:)"
    case .launchFailed(let url, let reason): "could not start the app for '\(url)': \(reason)"
    case .noAnswer(let url): "the app handling '\(url)' did not answer"
    case .untrustedRegistration(let scheme, let path, _, let problem):
      "the registration of '\(scheme):' ('\(path)') is not followed, its program not started: \(problem); only a "
        + "registration nobody but you (or root) can write is followed. Register the scheme again yourself "
        + "(registerURLScheme) if you trust that program: that writes a new file only you can change"
    case .invalidExecutable(let path, let reason):
      "cannot register '\(path)' to open URLs: \(reason)"
    }
  }
}
