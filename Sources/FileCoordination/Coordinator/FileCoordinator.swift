import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// Coordinates reads and writes of group-container items across threads and processes, and tells the file
/// presenters of every process about them. Apple's `NSFileCoordinator`, on Linux, built on flock and inotify.
///
/// ```swift
/// let coordinator = FileCoordinator()
/// try coordinator.coordinate(writingItemAt: url, options: .forReplacing) { url in
///   try data.write(to: url)
/// }
/// ```
///
/// ## Behavior
/// - Readers share; a writer excludes readers and writers of the same item — across processes.
/// - Coordinating an item inside a directory does not lock the directory; writing a directory with
///   `.forDeleting`, `.forMoving` or `.forReplacing` excludes every access to anything inside it.
/// - The same coordinator instance never blocks itself. Coordinators made with one presenter exclude each other
///   like any two coordinators, except that an access started inside another's accessor (on the same thread, or
///   in the same task) does not wait for it — see <doc:CoordinationSemantics>.
/// - Multi-item accesses take their locks in one global order, so they cannot deadlock each other.
/// - Before the accessor runs, presenters of the item (in every process, except the coordinator's own
///   presenter) are asked to relinquish and, where the options say so, to save or accommodate a deletion.
///   A presenter that does not answer within ``presenterTimeout`` is skipped with a logged warning, or fails
///   the access, per ``presenterTimeoutPolicy``. A dead process is never waited for.
/// - After the accessor, they hear `presentedItemDidChange`, `presentedItemDidMove(to:)` or the subitem
///   callbacks, then their reacquirers run.
/// - Errors thrown by the accessor propagate unchanged; the locks are released either way.
/// - The synchronous methods block the calling thread; ``coordinate(with:byAccessor:)`` waits without
///   blocking a Swift-concurrency thread.
public final class FileCoordinator: @unchecked Sendable {  // mutable state is in `state` (a Mutex)
  /// Apple's `NSFileCoordinator.ReadingOptions`.
  public struct ReadingOptions: OptionSet, Sendable, Hashable {
    /// The options' bits.
    public let rawValue: UInt
    /// Options from their bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }
    /// Do not ask presenters to save first: read what is on disk now.
    public static let withoutChanges = ReadingOptions(rawValue: 1 << 0)
    /// If the item is a symlink, coordinate (and hand the accessor) its target — which must be in the container.
    public static let resolvesSymbolicLink = ReadingOptions(rawValue: 1 << 1)
  }

  /// Apple's `NSFileCoordinator.WritingOptions`.
  public struct WritingOptions: OptionSet, Sendable, Hashable {
    /// The options' bits.
    public let rawValue: UInt
    /// Options from their bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }
    /// The accessor deletes the item: presenters get `accommodatePresentedItemDeletion` first.
    public static let forDeleting = WritingOptions(rawValue: 1 << 0)
    /// The accessor moves the item (call ``FileCoordinator/item(at:didMoveTo:)``).
    public static let forMoving = WritingOptions(rawValue: 1 << 1)
    /// Presenters save their changes first, so the accessor can merge with them.
    public static let forMerging = WritingOptions(rawValue: 1 << 2)
    /// The accessor replaces the item entirely.
    public static let forReplacing = WritingOptions(rawValue: 1 << 3)

    var excludesContents: Bool { !intersection([.forDeleting, .forMoving, .forReplacing]).isEmpty }
  }

  /// What to do when a presenter in another process does not answer in time.
  public enum PresenterTimeoutPolicy: Sendable {
    /// Log a warning and go on without it (the default: one hung widget must not stall the app).
    case skip
    /// Fail the access with ``FileCoordinatorError/presenterTimedOut(item:processID:seconds:)``.
    case fail
  }

  /// The presenter this coordinator acts for: it is not told about this coordinator's own accesses.
  public let filePresenter: (any FilePresenter)?

  private struct State {
    var purposeIdentifier: String
    var presenterTimeout: Duration = .seconds(5)
    var presenterTimeoutPolicy: PresenterTimeoutPolicy = .skip
    var lockTimeout: Duration?
    var moves: [(URL, URL)] = []
  }
  private let state: Mutex<State>
  /// Bumped by `cancel()`; an atomic, so the waiting access asks without taking `state`'s lock.
  private let cancelGeneration = Atomic<UInt64>(0)
  /// `state.moves` is not empty (set and cleared under `state`'s lock): an access takes that lock for the moves
  /// only when there are some.
  let hasStrayMoves = Atomic<Bool>(false)
  private static let nextInstance = Atomic<UInt64>(0)
  let instance = FileCoordinator.nextInstance.add(1, ordering: .relaxed).newValue
  /// What the fast path knows of the item this coordinator accessed last (FastAccess.swift).
  let fastPlan = Mutex<FastPlan?>(nil)
  /// A whole access of one item qualified for the fast path once: the next one keeps a plan (a coordinator made
  /// for one access pays nothing for it).
  let qualifiedOnce = Atomic<Bool>(false)

  /// Apple's `init(filePresenter:)`.
  public init(filePresenter: (any FilePresenter)? = nil) {
    self.filePresenter = filePresenter
    self.state = Mutex(State(purposeIdentifier: Self.randomUUID().uuidString))
  }

  /// A random (version 4) UUID from the standard library's generator (`getrandom`): Foundation's `UUID()` opens,
  /// reads and closes `/dev/urandom` on Linux — three system calls per coordinator, and the download agent makes
  /// one coordinator per file it publishes.
  private static func randomUUID() -> UUID {
    var generator = SystemRandomNumberGenerator()
    let high = (generator.next() & ~0xF000) | 0x4000  // version 4: the high nibble of byte 6
    let low = (generator.next() & ~(0xC0 << 56)) | (0x80 << 56)  // variant 10: the top bits of byte 8
    return withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
  }

  /// Identifies this coordinator's accesses to presenters (``ChangeOrigin/purposeIdentifier``).
  public var purposeIdentifier: String {
    get { state.withLock { $0.purposeIdentifier } }
    set { state.withLock { $0.purposeIdentifier = newValue } }
  }

  /// How long to wait for a presenter in another process (default 5 s).
  public var presenterTimeout: Duration {
    get { state.withLock { $0.presenterTimeout } }
    set { state.withLock { $0.presenterTimeout = newValue } }
  }

  /// How long an access waits for its locks; `nil` (the default, as Apple's coordinator) waits as long as it
  /// takes. A waiter behind a stopped or hung holder otherwise waits forever: with a bound, the access fails with
  /// ``FileCoordinatorError/lockTimedOut(item:holderPID:seconds:)``, naming the holder when the kernel knows it.
  /// Presenters already asked to relinquish get their reacquirers, and no "after" callbacks.
  public var lockTimeout: Duration? {
    get { state.withLock { $0.lockTimeout } }
    set { state.withLock { $0.lockTimeout = newValue } }
  }

  /// What an access does when a presenter does not answer within ``presenterTimeout``: go on without it (logged), or
  /// fail.
  public var presenterTimeoutPolicy: PresenterTimeoutPolicy {
    get { state.withLock { $0.presenterTimeoutPolicy } }
    set { state.withLock { $0.presenterTimeoutPolicy = newValue } }
  }

  /// Cancels the accesses of this coordinator that are still waiting (for locks or presenters): their accessors
  /// do not run and they throw ``FileCoordinatorError/cancelled``. Accessors already running finish normally.
  public func cancel() {
    cancelGeneration.add(1, ordering: .sequentiallyConsistent)
  }

  /// Call from a `.forMoving` accessor after moving an item, so presenters follow it.
  public func item(at oldURL: URL, didMoveTo newURL: URL) {
    if let log = Self.runningMoves?.log(of: instance) {
      log.moves.withLock { $0.append((oldURL, newURL)) }
      log.recorded.store(true, ordering: .releasing)
    } else {
      // Not from an accessor's thread or task (a thread it started): the coordinator's, taken by the next end.
      state.withLock {
        $0.moves.append((oldURL, newURL))
        hasStrayMoves.store(true, ordering: .releasing)
      }
    }
  }

  /// Apple's `item(at:willMoveTo:)`; nothing to prepare here.
  public func item(at oldURL: URL, willMoveTo newURL: URL) {}

  // MARK: Presenters

  /// Registers `filePresenter` with every coordinator of every process. Apple's `addFilePresenter(_:)`.
  public static func addFilePresenter(_ filePresenter: any FilePresenter) throws(FileCoordinatorError) {
    guard let url = filePresenter.presentedItemURL else { return }
    let (space, item) = try FileCoordinatorError.wrap { () throws(GroupContainerError) in
      try CoordinationSpace.locate(url)
    }
    try space.host.add(filePresenter, at: item)
  }

  /// Apple's `removeFilePresenter(_:)`.
  public static func removeFilePresenter(_ filePresenter: any FilePresenter) {
    for space in CoordinationSpace.all { space.host.remove(filePresenter) }
  }

  /// The presenters registered in this process.
  public static var filePresenters: [any FilePresenter] { CoordinationSpace.all.flatMap { $0.host.presenters } }

  // MARK: Coordinated access

  /// Apple's `coordinate(readingItemAt:options:error:byAccessor:)`: runs `reader` while no one writes the item.
  public func coordinate<T>(
    readingItemAt url: URL, options: ReadingOptions = [], byAccessor reader: (URL) throws -> T
  ) throws -> T {
    if let access = beginFast(url, .reading(options)) {  // FastAccess.swift
      defer { endFast(access) }
      guard access.logsMoves else { return try reader(access.url) }
      return try Self.$runningMoves.withValue(access.plan.moves) { try reader(access.url) }
    }
    return try perform([.readingIntent(with: url, options: options)]) { try reader($0.url(0)) }
  }

  /// Apple's `coordinate(writingItemAt:options:error:byAccessor:)`: runs `writer` while no one else reads or
  /// writes the item.
  public func coordinate<T>(
    writingItemAt url: URL, options: WritingOptions = [], byAccessor writer: (URL) throws -> T
  ) throws -> T {
    if let access = beginFast(url, .writing(options)) {  // FastAccess.swift
      defer { endFast(access) }
      guard access.logsMoves else { return try writer(access.url) }
      return try Self.$runningMoves.withValue(access.plan.moves) { try writer(access.url) }
    }
    return try perform([.writingIntent(with: url, options: options)]) { try writer($0.url(0)) }
  }

  /// Reads one item and writes another in one access (e.g. a copy).
  public func coordinate<T>(
    readingItemAt readingURL: URL, options readingOptions: ReadingOptions = [],
    writingItemAt writingURL: URL, options writingOptions: WritingOptions = [],
    byAccessor readerWriter: (URL, URL) throws -> T
  ) throws -> T {
    try perform([
      .readingIntent(with: readingURL, options: readingOptions),
      .writingIntent(with: writingURL, options: writingOptions),
    ]) { try readerWriter($0.url(0), $0.url(1)) }
  }

  /// Writes two items in one access (e.g. a move: `.forMoving` and `.forReplacing`).
  public func coordinate<T>(
    writingItemAt url1: URL, options options1: WritingOptions = [],
    writingItemAt url2: URL, options options2: WritingOptions = [],
    byAccessor writer: (URL, URL) throws -> T
  ) throws -> T {
    try perform([
      .writingIntent(with: url1, options: options1),
      .writingIntent(with: url2, options: options2),
    ]) { try writer($0.url(0), $0.url(1)) }
  }

  /// Coordinates all `intents` at once and runs `accessor` — without blocking a Swift-concurrency thread while
  /// waiting. Task cancellation cancels the wait.
  public func coordinate<T: Sendable>(
    with intents: [FileAccessIntent], byAccessor accessor: () async throws -> T
  ) async throws -> T {
    let cancelled = Atomic<Bool>(false)
    let access: CoordinatedAccess = try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
          continuation.resume(
            with: Result { try self.begin(intents, extraCancel: { cancelled.load(ordering: .relaxed) }) })
        }
      }
    } onCancel: {
      cancelled.store(true, ordering: .relaxed)
    }
    let log = MoveLog(instance: instance, outer: Self.runningMoves)
    do {
      let result = try await Self.$runningMoves.withValue(log) {
        try await Self.$nestingOwners.withValue(nesting(access)) { try await accessor() }
      }
      end(access, log)
      return result
    } catch {
      end(access, log)
      throw error
    }
  }

  /// Apple's `coordinate(with:queue:byAccessor:)`: waits off the caller's thread, then runs `accessor` on
  /// `queue` with `nil`, or with the error that prevented the access.
  public func coordinate(
    with intents: [FileAccessIntent], queue: OperationQueue,
    byAccessor accessor: @escaping @Sendable ((any Error)?) -> Void
  ) {
    DispatchQueue.global().async {
      do {
        let access = try self.begin(intents, extraCancel: { false })
        queue.addOperation {
          let log = MoveLog(instance: self.instance, outer: Self.runningMoves)
          Self.$runningMoves.withValue(log) {
            Self.$nestingOwners.withValue(self.nesting(access)) { accessor(nil) }
          }
          self.end(access, log)
        }
      } catch {
        queue.addOperation { accessor(error) }
      }
    }
  }

  private func perform<T>(_ intents: [FileAccessIntent], body: (CoordinatedAccess) throws -> T) throws -> T {
    let access = try begin(intents, extraCancel: { false })
    let log = moveLog()
    do {
      // Only a coordinator made with a presenter has an owner to lend to nested accesses.
      let result = try CheckedWrite.during(access) {
        try Self.$runningMoves.withValue(log) {
          try filePresenter == nil
            ? body(access) : Self.$nestingOwners.withValue(nesting(access)) { try body(access) }
        }
      }
      end(access, log)
      if intents.count == 1 { keepFastPlan(access, intents[0]) }
      return result
    } catch {
      end(access, log)
      throw error
    }
  }

  /// The moves one access's accessor recorded (`item(at:didMoveTo:)`), linked to the logs of the accesses whose
  /// accessors run around it (nested accesses): a list, not a dictionary by instance, so an access pays one object
  /// and no hashing (a dictionary made anew per access, and its hashing, were ~3 % of an empty access).
  final class MoveLog: Sendable {
    /// The coordinator instance whose access this is.
    let instance: UInt64
    let outer: MoveLog?
    let moves = Mutex<[(URL, URL)]>([])
    /// `moves` is not empty: the access's end and the log's reuse take its lock only then.
    let recorded = Atomic<Bool>(false)

    init(instance: UInt64, outer: MoveLog?) {
      self.instance = instance
      self.outer = outer
    }

    /// The innermost running log of coordinator `instance`.
    func log(of instance: UInt64) -> MoveLog? {
      var log: MoveLog? = self
      while let current = log, current.instance != instance { log = current.outer }
      return log
    }
  }

  /// The log of the last outermost access of this instance, given back by `end` (an object per access otherwise).
  private let spareLog = Mutex<MoveLog?>(nil)

  /// A move log for an access starting now: the last one's, emptied, when nothing holds it any more (a child task
  /// of its accessor inherits it with the task-local values, and may still record into it).
  private func moveLog() -> MoveLog {
    let outer = Self.runningMoves
    if outer == nil, var log = spareLog.withLock({ $0.take() }), isKnownUniquelyReferenced(&log) {
      if log.recorded.load(ordering: .acquiring) {
        log.moves.withLock { $0.removeAll(keepingCapacity: true) }
        log.recorded.store(false, ordering: .relaxed)
      }
      return log
    }
    return MoveLog(instance: instance, outer: outer)
  }

  /// The move logs of the accessors running in this thread or task, innermost first: each access tells its
  /// presenters of its own moves. Kept per coordinator, a second access on the same instance cleared the first
  /// one's moves as it began (their presenters never heard of them), or took them as its own as it ended.
  @TaskLocal static var runningMoves: MoveLog?

  /// The owners of the accesses whose accessors are running in this thread or task, by presenter: a nested access
  /// of a coordinator made with the same presenter borrows the outer owner instead of waiting for it (which would
  /// deadlock). Keyed by thread/task, so it never lets two threads in at once.
  @TaskLocal private static var nestingOwners: [ObjectIdentifier: LockOwner] = [:]

  private var owner: LockOwner {
    filePresenter.flatMap { Self.nestingOwners[ObjectIdentifier($0)] } ?? .coordinator(instance)
  }

  /// `nestingOwners` while `access`'s accessor runs.
  private func nesting(_ access: CoordinatedAccess) -> [ObjectIdentifier: LockOwner] {
    guard let filePresenter, let owner = access.owner else { return Self.nestingOwners }
    return Self.nestingOwners.merging([ObjectIdentifier(filePresenter): owner]) { _, new in new }
  }

  /// Steps 1–2 of an access: message presenters and wait for them, then take the locks.
  private func begin(
    _ intents: [FileAccessIntent], extraCancel: @escaping @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> CoordinatedAccess {
    let generation = cancelGeneration.load(ordering: .sequentiallyConsistent)
    let (purpose, timeout, policy, lockTimeout) = state.withLock {
      ($0.purposeIdentifier, $0.presenterTimeout, $0.presenterTimeoutPolicy, $0.lockTimeout)
    }
    // A local function, passed only where it does not escape: no closure context allocated per access.
    @Sendable func isCancelled() -> Bool {
      cancelGeneration.load(ordering: .sequentiallyConsistent) != generation || extraCancel()
    }
    var access = try CoordinatedAccess(intents: intents, filePresenter: filePresenter, purpose: purpose)
    try access.notifyPresenters(timeout: timeout, policy: policy, isCancelled: isCancelled)
    do {
      try access.lock(owner: owner, timeout: lockTimeout, isCancelled: isCancelled)
    } catch {
      access.finish(moves: [], accessorRan: false)
      throw error
    }
    if hasStrayMoves.load(ordering: .acquiring) { takeStrayMoves() }
    return consume access  // moved out: a plain return copied the access (a retain and a release per field)
  }

  /// The moves recorded outside any accessor of this coordinator, taken away.
  @discardableResult func takeStrayMoves() -> [(URL, URL)] {
    state.withLock {
      hasStrayMoves.store(false, ordering: .relaxed)
      var moves: [(URL, URL)] = []
      swap(&moves, &$0.moves)
      return moves
    }
  }

  /// Step 3: release the locks, then tell presenters what happened and let them reacquire.
  private func end(_ access: CoordinatedAccess, _ log: MoveLog) {
    var moves = log.recorded.load(ordering: .acquiring) ? log.moves.withLock { $0 } : []
    if hasStrayMoves.load(ordering: .acquiring) { moves += takeStrayMoves() }
    access.unlock()
    access.finish(moves: moves)
    if log.outer == nil { spareLog.withLock { $0 = log } }
  }
}
