import Foundation
import GroupContainerCore

/// One presenter callback, as a value: what ``FileCoordinator/events(presentedItemAt:bufferingPolicy:)`` yields.
public struct PresentedItemEvent: Sendable, Hashable, CustomStringConvertible {
  /// Which callback it was (the ``FilePresenter`` method of the same name).
  public enum Kind: Sendable, Hashable {
    /// ``FilePresenter/presentedItemDidChange()``: the item's contents or attributes changed.
    case didChange
    /// ``FilePresenter/presentedItemDidMove(to:)``: the item moved; later events are about its new place.
    case didMove(to: URL)
    /// ``FilePresenter/presentedSubitemDidAppear(at:)`` (directories).
    case subitemDidAppear(URL)
    /// ``FilePresenter/presentedSubitemDidChange(at:)`` (directories).
    case subitemDidChange(URL)
    /// ``FilePresenter/presentedSubitem(at:didMoveTo:)`` (directories).
    case subitemDidMove(from: URL, to: URL)
    /// ``FilePresenter/accommodatePresentedItemDeletion(completionHandler:)``: the item is about to be deleted
    /// (already answered: the deletion goes ahead).
    case accommodateDeletion
    /// ``FilePresenter/accommodatePresentedSubitemDeletion(at:completionHandler:)`` (already answered).
    case accommodateSubitemDeletion(URL)
    /// ``FilePresenter/relinquishPresentedItem(toReader:)``: another coordinator is about to read (already
    /// answered: the reader goes ahead).
    case relinquishToReader
    /// ``FilePresenter/relinquishPresentedItem(toWriter:)``: another coordinator is about to write (already
    /// answered).
    case relinquishToWriter
    /// ``FilePresenter/savePresentedItemChanges(completionHandler:)``: asked to save (already answered: nothing
    /// unsaved).
    case saveChanges
  }

  /// Which callback.
  public var kind: Kind
  /// Where it came from: the other process's pid, whether it was coordinated (``ChangeOrigin``); `nil` only if
  /// the framework delivered the callback without one.
  public var origin: ChangeOrigin?

  /// Makes an event (for tests; the stream makes its own).
  public init(kind: Kind, origin: ChangeOrigin?) {
    self.kind = kind
    self.origin = origin
  }

  /// `didChange (pid 812, coordinated)`.
  public var description: String {
    let what: String =
      switch kind {
      case .didChange: "didChange"
      case .didMove(let url): "didMove(to: \(url.path))"
      case .subitemDidAppear(let url): "subitemDidAppear(\(url.path))"
      case .subitemDidChange(let url): "subitemDidChange(\(url.path))"
      case .subitemDidMove(let from, let to): "subitemDidMove(from: \(from.path), to: \(to.path))"
      case .accommodateDeletion: "accommodateDeletion"
      case .accommodateSubitemDeletion(let url): "accommodateSubitemDeletion(\(url.path))"
      case .relinquishToReader: "relinquishToReader"
      case .relinquishToWriter: "relinquishToWriter"
      case .saveChanges: "saveChanges"
      }
    return origin.map { "\(what) (\($0))" } ?? what
  }
}

extension FileCoordinator {
  /// The presenter callbacks for the item at `url`, as an `AsyncSequence` — presenting an item without writing a
  /// class:
  /// ```swift
  /// for await event in try FileCoordinator.events(presentedItemAt: notesURL) {
  ///   if event.kind == .didChange { reload() }
  /// }
  /// ```
  ///
  /// ## Behavior
  /// - **Registration** happens in this call, before it returns: a change made after it is delivered, in this
  ///   process and in every other (the registration is in the container's registry, as ``addFilePresenter(_:)``'s).
  /// - **Callbacks that need an answer** (relinquish to a reader or writer, save, accommodate a deletion) are
  ///   answered at once, as ``FilePresenter``'s default implementations answer — the other access goes ahead
  ///   without waiting for your loop — and are then yielded so you can see them. To delay or refuse an access,
  ///   write a ``FilePresenter`` class.
  /// - **Order**: events come in the order the callbacks ran (one serial queue). `bufferingPolicy` says what
  ///   happens when your loop falls behind (default: keep every event).
  /// - **Ending** removes the presenter from every process's view: cancelling the iterating task does it at once;
  ///   otherwise it happens when the sequence and its iterator are both released — right after a loop written as
  ///   `for await event in try FileCoordinator.events(…)` that you leave with `break` or `return` (a sequence you
  ///   keep in a variable keeps the registration until the variable goes away).
  /// - **Your own accesses** are reported too: the sequence has no coordinator of its own, so none is excluded (a
  ///   ``FilePresenter`` class is, from the accesses of a `FileCoordinator(filePresenter: self)`). Each event's
  ///   ``PresentedItemEvent/origin`` says who caused it. To leave out this process's coordinated accesses, skip the
  ///   events whose `origin?.processID` is this process's id (`ProcessInfo.processInfo.processIdentifier`); to leave
  ///   out one coordinator's only, skip those whose `origin?.purposeIdentifier` is that coordinator's
  ///   ``FileCoordinator/purposeIdentifier``:
  ///   ```swift
  ///   let me = ProcessInfo.processInfo.processIdentifier
  ///   for await event in try FileCoordinator.events(presentedItemAt: notesURL) where event.origin?.processID != me {
  ///     reload()  // another process's access, or a write that bypassed coordination
  ///   }
  ///   ```
  ///   A write that bypassed coordination (seen through inotify) carries no process id (`processID == nil`,
  ///   `isCoordinated == false`), so it cannot be told apart by its origin, whoever made it.
  ///
  /// - Throws: ``FileCoordinatorError`` when `url` is in no group container or presenters cannot work here
  ///   (``FileCoordinatorError/presentersUnavailable(_:)``).
  public static func events(
    presentedItemAt url: URL,
    bufferingPolicy: AsyncStream<PresentedItemEvent>.Continuation.BufferingPolicy = .unbounded
  ) throws(FileCoordinatorError) -> AsyncStream<PresentedItemEvent> {
    let (stream, continuation) = AsyncStream.makeStream(of: PresentedItemEvent.self, bufferingPolicy: bufferingPolicy)
    let presenter = StreamPresenter(url: url, continuation: continuation)
    // The registration keeps the presenter alive; ending the stream (iterator dropped, task cancelled) removes it,
    // which also breaks the presenter → continuation → handler → presenter cycle.
    continuation.onTermination = { _ in FileCoordinator.removeFilePresenter(presenter) }
    do {
      try addFilePresenter(presenter)
    } catch {
      continuation.onTermination = nil
      continuation.finish()
      throw error
    }
    return stream
  }
}

/// The presenter behind ``FileCoordinator/events(presentedItemAt:bufferingPolicy:)``: yields each callback and
/// answers at once. Sendable: `let`s of Sendable types only (the continuation is Sendable).
private final class StreamPresenter: FilePresenter {
  let presentedItemURL: URL?
  let presentedItemOperationQueue: OperationQueue
  let continuation: AsyncStream<PresentedItemEvent>.Continuation

  init(url: URL, continuation: AsyncStream<PresentedItemEvent>.Continuation) {
    presentedItemURL = url
    self.continuation = continuation
    let queue = OperationQueue()
    // Serial: events are yielded in the order the callbacks ran.
    queue.maxConcurrentOperationCount = 1
    queue.name = "GroupContainer.events(presentedItemAt:)"
    presentedItemOperationQueue = queue
  }

  private func yield(_ kind: PresentedItemEvent.Kind) {
    continuation.yield(PresentedItemEvent(kind: kind, origin: ChangeOrigin.current))
  }

  func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    reader(nil)
    yield(.relinquishToReader)
  }
  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    writer(nil)
    yield(.relinquishToWriter)
  }
  func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    completionHandler(nil)
    yield(.saveChanges)
  }
  func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    completionHandler(nil)
    yield(.accommodateDeletion)
  }
  func presentedItemDidMove(to newURL: URL) { yield(.didMove(to: newURL)) }
  func presentedItemDidChange() { yield(.didChange) }
  func presentedSubitemDidAppear(at url: URL) { yield(.subitemDidAppear(url)) }
  func presentedSubitemDidChange(at url: URL) { yield(.subitemDidChange(url)) }
  func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { yield(.subitemDidMove(from: oldURL, to: newURL)) }
  func accommodatePresentedSubitemDeletion(
    at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void
  ) {
    completionHandler(nil)
    yield(.accommodateSubitemDeletion(url))
  }
}
