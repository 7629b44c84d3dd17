import Foundation
import GroupContainerCore

/// An object that presents a file or directory of a group container and takes part in coordinated access to it —
/// from this process and from every other process using the container. Apple's `NSFilePresenter`, on Linux.
///
/// Register it with ``FileCoordinator/addFilePresenter(_:)``; remove it with
/// ``FileCoordinator/removeFilePresenter(_:)``.
///
/// ## Behavior
/// - **Which queue.** Every method runs on ``presentedItemOperationQueue``. The framework never calls two methods
///   of one presenter at once when that queue is serial (`maxConcurrentOperationCount == 1`).
/// - **Before a coordinated access** by another coordinator (in any process): for a read,
///   ``relinquishPresentedItem(toReader:)`` then, unless the reader passed `.withoutChanges`,
///   ``savePresentedItemChanges(completionHandler:)``; for a write, ``relinquishPresentedItem(toWriter:)``, then
///   ``savePresentedItemChanges(completionHandler:)`` for `.forMerging` and
///   ``accommodatePresentedItemDeletion(completionHandler:)`` for `.forDeleting`. The accessor waits until you
///   call the handler you were given (at most the coordinator's ``FileCoordinator/presenterTimeout``).
/// - **After it**: ``presentedItemDidChange()`` or ``presentedItemDidMove(to:)``, then your reacquirer.
/// - **Directories**: presenters of a directory get the `presentedSubitem…` callbacks for items inside it.
/// - **Uncoordinated writes** (a shell's `echo > file`, another tool) are seen through inotify and delivered as
///   ``presentedItemDidChange()`` / ``presentedSubitemDidChange(at:)`` — something Apple's presenters do not
///   get. Bursts are coalesced: a callback that is already queued absorbs later events.
/// - **Where it came from**: during any callback, ``ChangeOrigin/current`` names the process and whether the
///   change was coordinated.
/// - **Your own writes** through a coordinator created with `FileCoordinator(filePresenter: self)` are not
///   reported back to you.
/// - **Dead processes** never block you: a process that dies mid-access has its locks released by the kernel,
///   and your reacquirer still runs.
///
/// ## Writing a presenter class under Swift 6
/// The framework calls presenters from its own threads, so the protocol requires `Sendable`. A `final` class
/// whose stored properties are `let`s of Sendable types — the URL and an `OperationQueue` — is Sendable as it
/// stands, no `@unchecked` needed; an iOS presenter written that way ports unchanged (``NSFilePresenter`` is this
/// protocol's Apple name):
/// ```swift
/// final class NotesPresenter: NSObject, NSFilePresenter {
///   let presentedItemURL: URL?
///   let presentedItemOperationQueue = OperationQueue()
///   init(url: URL) { presentedItemURL = url }
///   func presentedItemDidChange() { reload() }
/// }
/// ```
/// State that changes (a URL that follows ``presentedItemDidMove(to:)``, a cached model) goes in a `Mutex` from
/// the Synchronization module, held in a `let`. When all you need is to hear changes, no class at all:
/// ``FileCoordinator/events(presentedItemAt:bufferingPolicy:)``.
public protocol FilePresenter: AnyObject, Sendable {
  /// The presented item. Read from any thread.
  var presentedItemURL: URL? { get }
  /// Where the methods below run.
  var presentedItemOperationQueue: OperationQueue { get }

  /// Someone wants to read: stop what would conflict, call `reader` (optionally with a reacquirer to run after).
  func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
  /// Someone wants to write: stop using the item, call `writer` (optionally with a reacquirer to run after).
  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void)
  /// Save unsaved changes now; pass an error to make the other access fail with it.
  func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void)
  /// The item is about to be deleted: close it; pass an error to refuse.
  func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void)
  /// The item moved (coordinated move); update ``presentedItemURL``.
  func presentedItemDidMove(to newURL: URL)
  /// The item's contents or attributes changed.
  func presentedItemDidChange()

  /// An item appeared inside the presented directory.
  func presentedSubitemDidAppear(at url: URL)
  /// An item inside the presented directory changed.
  func presentedSubitemDidChange(at url: URL)
  /// An item inside the presented directory moved.
  func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL)
  /// An item inside the presented directory is about to be deleted.
  func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void)
}

/// The default answers: let every access go ahead at once; ignore every notification.
extension FilePresenter {
  /// Lets the reader go ahead at once, with no reacquirer.
  public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    reader(nil)
  }
  /// Lets the writer go ahead at once, with no reacquirer.
  public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    writer(nil)
  }
  /// Nothing unsaved: answers at once with no error.
  public func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    completionHandler(nil)
  }
  /// Lets the deletion go ahead.
  public func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    completionHandler(nil)
  }
  /// Ignores the move.
  public func presentedItemDidMove(to newURL: URL) {}
  /// Ignores the change.
  public func presentedItemDidChange() {}
  /// Ignores the new subitem.
  public func presentedSubitemDidAppear(at url: URL) {}
  /// Ignores the subitem's change.
  public func presentedSubitemDidChange(at url: URL) {}
  /// Ignores the subitem's move.
  public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {}
  /// Lets the subitem's deletion go ahead.
  public func accommodatePresentedSubitemDeletion(
    at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void
  ) {
    completionHandler(nil)
  }
}

/// Where the change or request behind the presenter callback being delivered came from.
public struct ChangeOrigin: Sendable, Hashable, CustomStringConvertible {
  /// The process that caused it; `nil` when unknown (an uncoordinated write seen through inotify).
  public var processID: Int32?
  /// Whether it came through a ``FileCoordinator`` (`false`: a write that bypassed coordination).
  public var isCoordinated: Bool
  /// The other coordinator's ``FileCoordinator/purposeIdentifier``, when coordinated.
  public var purposeIdentifier: String?
  /// Set when the framework may have missed events (inotify queue overflow) and resynchronised.
  public var isResync: Bool

  /// Makes an origin (the framework makes them; tests and tools may too).
  public init(processID: Int32?, isCoordinated: Bool, purposeIdentifier: String? = nil, isResync: Bool = false) {
    self.processID = processID
    self.isCoordinated = isCoordinated
    self.purposeIdentifier = purposeIdentifier
    self.isResync = isResync
  }

  /// The origin of the presenter callback running on this thread, or `nil` outside callbacks.
  @TaskLocal public static var current: ChangeOrigin?

  /// `pid 812, coordinated` (or `unknown process, uncoordinated`, plus `, resync`).
  public var description: String {
    let who = processID.map { "pid \($0)" } ?? "unknown process"
    return "\(who), \(isCoordinated ? "coordinated" : "uncoordinated")\(isResync ? ", resync" : "")"
  }
}
