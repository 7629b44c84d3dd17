import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The fast-path rule: a synchronous access of one item, by a coordinator made without a presenter, that no
/// presenter of any process concerns (of the item, an ancestor or a descendant), whose way is known free of links and
/// whose locks are free, does only what such an access needs — the item's place and checks kept from the last whole
/// access of the same URL, its locks taken under one hold of the lock table (`LockTable.tryAcquire`), the accessor,
/// the release.
///
/// Everything a whole access would do differently is proved unchanged first, each by what already proves it:
/// - the URL: its string, byte for byte, and where spaces stood (`CoordinationSpace.placements`);
/// - no presenter concerns the item: the registry's generation when the whole access found none there and no
///   damaged record (`PresenterRegistry.isUnchanged(since:)`; every registration and removal moves it), so none
///   of the item, an ancestor or a descendant could be missed;
/// - no symbolic link on the way: the link-free memory's version and the inotify queue
///   (`LinkFreePaths.Version.holds(_:)`, the one `ioctl` that stays: only the kernel knows its queue), so the
///   checks that depend on it (leading out of the container, the Inbox rule, the checked-write mark) hold as made;
/// - no moves recorded outside an accessor (`hasStrayMoves`): the whole way hands them to the next access;
/// - the locks: each entry still its key's, none busy or held against us here, each flock free with `LOCK_NB`.
/// If anything fails, nothing was taken and the whole way runs (it waits, cancels, times out, as always).
///
/// The accessor runs as in a whole access, with the checked-write mark. A `.forMoving` write runs it with a move
/// log (`moves`), so that `item(at:didMoveTo:)` finds this access's log; with no presenter to tell, its moves are
/// dropped, as the whole way drops them. Other accesses push no log (a task-local push and pop was 3 % of the
/// access): a move recorded there (Apple's API asks for `.forMoving`) is a stray one, which this access's end takes
/// and drops like the whole way's end.
///
/// Lock order (Rule 1) is the plan's; nothing waits, so a cancel or a lock timeout concerns only the whole way; a
/// container removed and made again drops the entries (`rebind`), so the next access looks them up again. Reads and
/// writes of one item through `coordinate(readingItemAt:)` and `coordinate(writingItemAt:)` only: the asynchronous
/// and queue variants and accesses of several items go the whole way.
///
/// *What if you don't*: an empty access took ~1.2 µs of Swift around its three calls (two flocks and the
/// `ioctl`), spread over ten lock operations, a dozen checks made again, the arrays of a general access.
extension FileCoordinator {
  /// What the fast path keeps of the item a whole access reached last.
  final class FastPlan: Sendable {
    /// The URL's string (compared by bytes: Linux names are bytes, `String ==` equates NFC and NFD).
    let url: String
    let kind: FileAccessIntent.Kind
    let space: CoordinationSpace
    /// The space's parts the fast path asks, held directly.
    let registry: PresenterRegistry
    let linkFreeVersion: LinkFreePaths.Version
    let table: LockTable
    /// The URL a read's accessor gets (`CoordinationSpace.url(for:)`); a write's gets the caller's.
    let readURL: URL?
    let mark: ThreadMark.Value?
    let locks: LockTable.RememberedPlan
    let placements: UInt64
    let presenters: UInt64
    let linkFree: UInt64
    /// The move log of the fast accesses (their moves are dropped: nobody to tell).
    let moves: MoveLog

    init(
      url: String, kind: FileAccessIntent.Kind, space: CoordinationSpace, readURL: URL?, mark: ThreadMark.Value?,
      locks: LockTable.RememberedPlan, placements: UInt64, presenters: UInt64, linkFree: UInt64, moves: MoveLog
    ) {
      self.url = url
      self.kind = kind
      self.space = space
      self.registry = space.registry
      self.linkFreeVersion = space.linkFreePaths.version
      self.table = space.locks
      self.readURL = readURL
      self.mark = mark
      self.locks = locks
      self.placements = placements
      self.presenters = presenters
      self.linkFree = linkFree
      self.moves = moves
    }
  }

  /// A fast access under way: its plan, and the checked-write mark it replaced on this thread.
  struct FastAccess {
    let plan: FastPlan
    let previousMark: ThreadMark.Value?
    /// The URL its accessor gets.
    let url: URL
    /// A `.forMoving` write: its accessor runs with `plan.moves` as the running move log (see the type).
    let logsMoves: Bool
  }

  /// The fast path's checks and locks (see the type); nil when it does not apply. The caller runs the accessor with
  /// `plan.moves` as the running move log and calls `endFast`: only that shell is generic, in the caller — generic
  /// code here, not specialized across modules, looked metadata up at run time on every access (~0.1 µs).
  func beginFast(_ url: URL, _ kind: FileAccessIntent.Kind) -> FastAccess? {
    guard filePresenter == nil, let plan = fastPlan.withLock({ $0 }), plan.kind == kind,
      !hasStrayMoves.load(ordering: .acquiring),
      CoordinationSpace.placements.load(ordering: .acquiring) == plan.placements,
      url.baseURL == nil, ContainerPath.sameBytes(plan.url, url.relativeString),
      plan.registry.isUnchanged(since: plan.presenters), plan.linkFreeVersion.holds(plan.linkFree),
      plan.table.tryAcquire(plan.locks, owner: .coordinator(instance))
    else { return nil }
    let logsMoves = if case .writing(let options) = kind { options.contains(.forMoving) } else { false }
    return FastAccess(
      plan: plan, previousMark: plan.mark.map { ThreadMark.set($0) }, url: plan.readURL ?? url, logsMoves: logsMoves)
  }

  /// The end of a fast access: the mark put back, the locks released, the moves dropped (its own and those
  /// recorded outside any accessor, which a whole access's end takes too: nobody to tell them to).
  func endFast(_ access: FastAccess) {
    if let previous = access.previousMark { ThreadMark.set(previous) }
    let plan = access.plan
    plan.table.release(plan.locks, owner: .coordinator(instance))
    if plan.moves.recorded.load(ordering: .acquiring) {
      plan.moves.moves.withLock { $0.removeAll() }
      plan.moves.recorded.store(false, ordering: .relaxed)
    }
    if hasStrayMoves.load(ordering: .acquiring) { takeStrayMoves() }
  }

  /// After a whole access of `intent`: keeps what the fast path needs for the next access of it, when this one
  /// would have qualified (see the type), from the second such access of this coordinator on.
  func keepFastPlan(_ access: CoordinatedAccess, _ intent: FileAccessIntent) {
    guard filePresenter == nil, access.items.count == 1, intent.url.baseURL == nil,
      let presenters = access.presentersGeneration, let linkFree = access.linkFreeVersion
    else { return }
    guard qualifiedOnce.exchange(true, ordering: .relaxed) else { return }
    let item = access.items[0]
    guard let locks = access.space.locks.remembered(item.path, CoordinatedAccess.access(item)) else { return }
    let url = intent.url.relativeString
    let kept = fastPlan.withLock { $0 }
    if let kept, kept.kind == intent.kind, kept.space === access.space, kept.locks === locks,
      kept.placements == access.placements, kept.presenters == presenters, kept.linkFree == linkFree,
      ContainerPath.sameBytes(kept.url, url)
    {
      return  // the same plan: nothing made again
    }
    let plan = FastPlan(
      url: url, kind: intent.kind, space: access.space, readURL: item.isWrite ? nil : item.url,
      mark: CheckedWrite.mark(of: access), locks: locks, placements: access.placements, presenters: presenters,
      linkFree: linkFree, moves: kept?.moves ?? MoveLog(instance: instance, outer: nil))
    fastPlan.withLock { $0 = plan }
  }
}
