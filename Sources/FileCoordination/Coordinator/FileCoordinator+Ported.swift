import Foundation
import GroupContainerCore

// Apple's spellings for code ported from iOS: the names and the `error:` overloads that let the classic App Group
// snippet compile unchanged. Each forwards to the Swift-native API; none hides an error (see each comment).

/// Apple's name for ``FileCoordinator``. Foundation on Linux declares no `NSFileCoordinator` (checked with
/// Swift 6.3.1's swift-corelibs-foundation), so the alias clashes with nothing a client imports.
public typealias NSFileCoordinator = FileCoordinator

/// Apple's name for ``FilePresenter``. Foundation on Linux declares no `NSFilePresenter`.
///
/// A presenter class ported from iOS compiles as it is when it is `final` and keeps its URL and queue in `let`s:
/// ```swift
/// final class NotesPresenter: NSObject, NSFilePresenter {
///   let presentedItemURL: URL?
///   let presentedItemOperationQueue = OperationQueue()
///   init(url: URL) { presentedItemURL = url }
///   func presentedItemDidChange() { … }
/// }
/// ```
/// Presenters are called from the framework's threads, so the protocol requires `Sendable`; a final class whose
/// stored properties are `let`s of Sendable types (URL, OperationQueue) is Sendable without `@unchecked`. State
/// that changes (a `var presentedItemURL` updated by ``FilePresenter/presentedItemDidMove(to:)``) goes in a
/// `Mutex` (Synchronization) held in a `let`. Without a class at all:
/// ``FileCoordinator/events(presentedItemAt:bufferingPolicy:)``.
public typealias NSFilePresenter = FilePresenter

extension FileCoordinator {
  /// Apple's `coordinate(writingItemAt:options:error:byAccessor:)`, for iOS code that passes `&error`: runs
  /// `writer` while no one else reads or writes the item; when the access cannot be had, `writer` does not run
  /// and `outError` gets an `NSError` whose `localizedDescription` says what failed, on which item (the
  /// ``FileCoordinatorError`` is under `NSUnderlyingErrorKey`). New code: the throwing
  /// ``coordinate(writingItemAt:options:byAccessor:)``.
  public func coordinate(
    writingItemAt url: URL, options: WritingOptions = [], error outError: UnsafeMutablePointer<NSError?>?,
    byAccessor writer: (URL) -> Void
  ) {
    do {
      try coordinate(writingItemAt: url, options: options) { (url: URL) throws -> Void in writer(url) }
    } catch {
      outError?.pointee = Self.nsError(error)
    }
  }

  /// Apple's `coordinate(readingItemAt:options:error:byAccessor:)`, for iOS code that passes `&error`: runs
  /// `reader` while no one writes the item; on failure `reader` does not run and `outError` says why (as the
  /// writing overload). New code: the throwing ``coordinate(readingItemAt:options:byAccessor:)``.
  public func coordinate(
    readingItemAt url: URL, options: ReadingOptions = [], error outError: UnsafeMutablePointer<NSError?>?,
    byAccessor reader: (URL) -> Void
  ) {
    do {
      try coordinate(readingItemAt: url, options: options) { (url: URL) throws -> Void in reader(url) }
    } catch {
      outError?.pointee = Self.nsError(error)
    }
  }

  /// The `NSError` handed to `error:` callers: our message as its description (Foundation's bridging on Linux
  /// would say only "The operation could not be completed"), the Swift error kept underneath.
  static func nsError(_ error: any Error) -> NSError {
    NSError(
      domain: "GroupContainer.FileCoordinatorError", code: 1,
      userInfo: [NSLocalizedDescriptionKey: String(describing: error), NSUnderlyingErrorKey: error])
  }
}

extension FileManager {
  /// Apple's `containerURL(forSecurityApplicationGroupIdentifier:)`: the URL of the group container
  /// `groupIdentifier` under the environment's root (`GroupContainer.defaultRoot()`), created with its layout
  /// if needed so it is ready to use, as iOS has it. `nil` when the identifier is invalid or the container cannot
  /// be created; the reason is logged (label `GroupContainer.FileCoordination`). ``GroupContainerCore/GroupContainer/init(identifier:root:sharing:)``
  /// throws the same reason.
  public func containerURL(forSecurityApplicationGroupIdentifier groupIdentifier: String) -> URL? {
    do {
      return try GroupContainer(identifier: groupIdentifier).url
    } catch {
      CoordinationSpace.logger.error(
        "containerURL(forSecurityApplicationGroupIdentifier: '\(groupIdentifier)') is nil: \(error)")
      return nil
    }
  }
}
