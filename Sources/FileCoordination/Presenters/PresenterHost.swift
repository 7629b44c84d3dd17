import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// The presenters this process registered in one container: it runs their callbacks for messages from
/// coordinators (any process, this one included) and turns inotify events for writes that bypassed
/// coordination into `presentedItemDidChange` / subitem callbacks.
final class PresenterHost: @unchecked Sendable {  // every mutable field is guarded by `lock`
  final class Local: @unchecked Sendable {  // mutable fields are guarded by the host's `lock`
    let presenter: any FilePresenter
    var id: String
    var item: ContainerPath
    let isDirectory: Bool
    var watches: [Watcher.Token] = []
    /// The watch on the directory of its record (`watchRecord`).
    var recordWatch: Watcher.Token?
    /// Coalescing: a queued "did change" absorbs later events until it runs.
    var changeQueued = false
    /// Coalescing keys by bytes: NFC and NFD spellings are two files on Linux (String `==` would merge them).
    var subitemsQueued: Set<[UInt8]> = []

    init(presenter: any FilePresenter, id: String, item: ContainerPath, isDirectory: Bool) {
      self.presenter = presenter
      self.id = id
      self.item = item
      self.isDirectory = isDirectory
    }
  }

  /// A coordinated write in progress somewhere: inotify events under `item` belong to it.
  private struct Pending {
    /// The accessed item as the message gave it (checked when decoded); made a `ContainerPath` only when used —
    /// after the handshake, not during it.
    var itemString: String
    var item: ContainerPath { (try? ContainerPath(itemString)) ?? .root }
    var sender: ProcessName
    var purpose: String?
    var isWrite: Bool
    /// Its prepare quieted the watcher (`Watcher.beginQuiet`): a write's, come as a datagram.
    var quiets = false
    var reacquirers: [(Local, @Sendable () -> Void)] = []
  }

  private let space: CoordinationSpace
  private let lock = NSLock()
  private var locals: [String: Local] = [:]
  private var byObject: [ObjectIdentifier: Local] = [:]
  private var pending: [String: Pending] = [:]
  /// Items of finished coordinated writes whose own inotify events may still be queued (a finish can come on the
  /// inbox socket before them: MessageTransport.swift), with how many such writes: still suppressed until the
  /// watcher has handled every event queued when the finish was handled (`Watcher.afterQueuedEvents`).
  private var finishedWrites: [ContainerPath: Int] = [:]
  private let nextPresenter = Atomic<UInt64>(0)
  /// The liveness lock published again after the container was removed (the first one is the space's).
  private var republishedLivenessLock: DescriptorBox?
  private let rearming = Atomic<Bool>(false)

  init(space: CoordinationSpace) {
    self.space = space
    _ = Watcher.shared.onOverflow { [weak self] in self?.resync() }
  }

  // MARK: Registration

  func add(_ presenter: any FilePresenter, at item: ContainerPath) throws(FileCoordinatorError) {
    if id(of: presenter) != nil { return }
    // A presenter without inotify would never hear a message (its inbox is not watched): refuse it clearly.
    if let reason = Watcher.shared.unavailableReason { throw .presentersUnavailable(reason) }
    let isDirectory = (try? FileSystem.status(space.absolutePath(item)))??.kind == .directory
    let local = Local(presenter: presenter, id: newID(), item: item, isDirectory: isDirectory)
    lock.withLock {
      locals[local.id] = local
      byObject[ObjectIdentifier(presenter)] = local
    }
    watch(local)
    do {
      try FileCoordinatorError.wrap { () throws(FileSystemError) in
        try space.registry.register(record(of: local))
      }
      watchRecord(local)
    } catch {
      remove(presenter)
      throw error
    }
  }

  func remove(_ presenter: any FilePresenter) {
    let local = lock.withLock { () -> Local? in
      guard let local = byObject.removeValue(forKey: ObjectIdentifier(presenter)) else { return nil }
      locals[local.id] = nil
      return local
    }
    guard let local else { return }
    space.registry.unregister(record(of: local))
    let tokens = lock.withLock { () -> [Watcher.Token] in
      defer { (local.watches, local.recordWatch) = ([], nil) }
      return local.watches + [local.recordWatch].compactMap { $0 }
    }
    for token in tokens { Watcher.shared.cancel(token) }
  }

  func id(of presenter: any FilePresenter) -> String? {
    lock.withLock { byObject[ObjectIdentifier(presenter)]?.id }
  }

  var presenters: [any FilePresenter] { lock.withLock { locals.values.map(\.presenter) } }

  private func newID() -> String { "\(space.me).\(nextPresenter.add(1, ordering: .relaxed).newValue)" }

  private func record(of local: Local) -> PresenterRecord {
    PresenterRecord(id: local.id, process: space.me, item: local.item.string, isDirectory: local.isDirectory)
  }

  /// After a coordinated move: the presenter follows its item under a new record (records are immutable).
  private func move(_ local: Local, to newItem: ContainerPath) {
    let old = lock.withLock { () -> PresenterRecord in
      let old = record(of: local)
      locals[old.id] = nil
      local.id = newID()
      local.item = newItem
      locals[local.id] = local
      return old
    }
    try? space.registry.register(record(of: local))
    watchRecord(local)
    space.registry.unregister(old)
    watch(local)
  }

  // MARK: Own records kept intact

  /// Watches the directory of the record of `local` (its bucket): a record removed, truncated or edited by someone
  /// else would silently end coordination with the presenter (writers would no longer ask it), so it is written
  /// again at once. Presenters of one item share the directory and its watch descriptor.
  private func watchRecord(_ local: Local) {
    let prefix = "\(space.me)."
    let mask =
      Watcher.modify | Watcher.closeWrite | Watcher.delete | Watcher.movedFrom | Watcher.movedTo | Watcher.attrib
    let bucket = lock.withLock { space.registry.bucketPath(of: local.item) }
    // Called once the record is written (its directory exists); returns once the watch is in place.
    let token = try? Watcher.shared.watch(bucket, mask: mask) { [weak self, weak local] event in
      guard let self, let local, event.name.hasPrefix(prefix) else { return }
      guard self.lock.withLock({ self.locals[event.name] === local }) else { return }
      // Off the watcher thread (checking and rewriting is file work), and a little later: `rm -rf` of the whole
      // container removes the record first, and writing it again at once would make rm fail on a directory no
      // longer empty (that removal is `containerRemoved`'s to handle).
      DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) { self.keepRecord(of: local) }
    }
    let old = lock.withLock { () -> Watcher.Token? in
      guard byObject[ObjectIdentifier(local.presenter)] === local else { return token }  // removed meanwhile
      defer { local.recordWatch = token }
      return local.recordWatch
    }
    if let old { Watcher.shared.cancel(old) }
  }

  /// Writes the record of `local` again unless its file holds exactly it — not while the container is being
  /// removed (this process's liveness lock or inbox gone: `containerRemoved` makes everything again after).
  private func keepRecord(of local: Local) {
    let current: PresenterRecord? = lock.withLock { locals[local.id] === local ? self.record(of: local) : nil }
    guard let record = current, !space.registry.isIntact(record) else { return }
    guard (try? FileSystem.status(space.messaging.processLockPath(space.me))) ?? nil != nil,
      (try? FileSystem.status(space.messaging.inbox(of: space.me))) ?? nil != nil
    else { return }
    CoordinationSpace.logger.error(
      """
      the presenter record '\(space.registry.bucketPath(of: record.path))/\(record.id)' was removed or damaged by \
      someone else: writing it again
      """)
    do { try space.registry.register(record) } catch {
      CoordinationSpace.logger.critical("cannot write the presenter record '\(record.id)' again: \(error)")
    }
    watchRecord(local)  // its directory may have been removed and made again: watch the new one
  }

  // MARK: Coordinated messages (watcher thread)

  /// `asDatagram`: it came on the inbox socket (its finish will too, unless the sender turns to files meanwhile).
  func receive(_ message: CoordinationMessage, asDatagram: Bool) {
    switch message.kind {
    case .prepare: prepare(message, asDatagram: asDatagram)
    case .finish: finish(id: message.id, events: message.events, origin: origin(of: message))
    case .ack, .openURL, .request: break
    }
  }

  private func origin(of message: CoordinationMessage) -> ChangeOrigin {
    ChangeOrigin(processID: message.sender.pid, isCoordinated: true, purposeIdentifier: message.purpose)
  }

  private func prepare(_ message: CoordinationMessage, asDatagram: Bool) {
    // The write's own events will be swallowed: the watcher need not wake for them (its finish ends the quiet).
    // Not for a prepare that came as a file: its finish will too, and files are read only from the inotify queue.
    let quiets = message.isWrite && asDatagram
    let (groups, replaced) = lock.withLock { () -> ([(Local, [PresenterEvent])], Pending?) in
      let old = pending.updateValue(
        Pending(
          itemString: message.item, sender: message.sender, purpose: message.purpose, isWrite: message.isWrite,
          quiets: quiets),
        forKey: message.id)
      return (group(message.events), old)
    }
    if replaced?.quiets == true { Watcher.shared.endQuiet() }
    if quiets { Watcher.shared.beginQuiet() }
    guard message.needsAck else { return }
    let failures = FailureList(remaining: groups.count)
    let origin = origin(of: message)
    // The last presenter to finish sends the ack from its own completion handler: no extra thread hop.
    let sendAck: @Sendable () -> Void = { [space] in
      if failures.list.withLock({ $0.isEmpty }) && space.messenger.postAck(for: message) { return }
      let ack = CoordinationMessage(
        id: message.id, kind: .ack, sender: space.me, item: message.item, needsAck: false, events: [],
        failures: failures.list.withLock { $0 })
      do { try space.messenger.send(ack, to: message.sender) } catch {
        CoordinationSpace.logger.debug("could not ack \(message.id) to \(message.sender): \(error)")
      }
    }
    if groups.isEmpty { return sendAck() }
    for (local, events) in groups {
      runBefore(events[...], on: local, messageID: message.id, origin: origin, failures: failures) {
        if failures.remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { sendAck() }
      }
    }
  }

  /// Runs the "before" callbacks of one presenter one after another: each waits for the previous one's
  /// completion handler, as Apple's coordinator does.
  private func runBefore(
    _ events: ArraySlice<PresenterEvent>, on local: Local, messageID: String, origin: ChangeOrigin,
    failures: FailureList, done: @escaping @Sendable () -> Void
  ) {
    guard let event = events.first else { return done() }
    let rest = events.dropFirst()
    // The usual prepare has one event: its completion is the prepare's.
    let next: @Sendable () -> Void
    if rest.isEmpty {
      next = done
    } else {
      next = { [self] in
        runBefore(rest, on: local, messageID: messageID, origin: origin, failures: failures, done: done)
      }
    }
    let presenter = local.presenter
    let space = space
    local.presenter.presentedItemOperationQueue.addOperation { [self] in
      ChangeOrigin.$current.withValue(origin) {
        // Each completion handler is made only for the callback that takes it.
        switch event.kind {
        case .relinquishToReader:
          presenter.relinquishPresentedItem(toReader: keeper(local, messageID: messageID, origin: origin, next: next))
        case .relinquishToWriter:
          presenter.relinquishPresentedItem(toWriter: keeper(local, messageID: messageID, origin: origin, next: next))
        case .save: presenter.savePresentedItemChanges(completionHandler: Self.failer(failures, next: next))
        case .accommodateDeletion:
          presenter.accommodatePresentedItemDeletion(completionHandler: Self.failer(failures, next: next))
        case .accommodateSubitemDeletion:
          // Made here, for this event only: a file URL is a `stat` (is it a directory?), and every prepare came
          // this way.
          let subitem = space.url(for: event.path.flatMap { try? ContainerPath($0) } ?? local.item)
          presenter.accommodatePresentedSubitemDeletion(
            at: subitem, completionHandler: Self.failer(failures, next: next))
        default: next()
        }
      }
    }
  }

  /// The completion handler of a save or an accommodation: notes the error, if any, then `next`.
  private static func failer(
    _ failures: FailureList, next: @escaping @Sendable () -> Void
  ) -> @Sendable ((any Error)?) -> Void {
    { error in
      if let error { failures.list.withLock { $0.append(String(describing: error)) } }
      next()
    }
  }

  /// The completion handler of a relinquish: keeps the reacquirer for the finish of `messageID`, then `next`.
  private func keeper(
    _ local: Local, messageID: String, origin: ChangeOrigin, next: @escaping @Sendable () -> Void
  ) -> @Sendable ((@Sendable () -> Void)?) -> Void {
    { [self] reacquirer in
      if let reacquirer {
        let stored = lock.withLock { pending[messageID]?.reacquirers.append((local, reacquirer)) != nil }
        // An answer after the sender's timeout can come after its finish: the access is over, so the
        // reacquirer runs now (Apple always runs it; a presenter paused until it reacquires would stay paused).
        if !stored { runReacquirers([(local, reacquirer)], origin: origin) }
      }
      next()
    }
  }

  /// Delivers the "after" callbacks and runs the reacquirers of message `id`.
  private func finish(id: String, events: [PresenterEvent], origin: ChangeOrigin) {
    let (groups, reacquirers, written, quieted) = lock.withLock {
      () -> ([(Local, [PresenterEvent])], [(Local, @Sendable () -> Void)], ContainerPath?, Bool) in
      let ended = pending.removeValue(forKey: id)
      let written = ended.flatMap { $0.isWrite ? $0.item : nil }
      if let written { finishedWrites[written, default: 0] += 1 }
      return (group(events), ended?.reacquirers ?? [], written, ended?.quiets == true)
    }
    if quieted { Watcher.shared.endQuiet() }
    if let written {
      Watcher.shared.afterQueuedEvents { [self] in
        lock.withLock {
          finishedWrites[written, default: 1] -= 1
          if finishedWrites[written] == 0 { finishedWrites[written] = nil }
        }
      }
    }
    // One operation per presenter: its "after" callbacks, then its reacquirers (an operation each was a twentieth
    // of a presenter process's CPU with 64 of them).
    var work: [(Local, [@Sendable () -> Void])] = groups.map { local, events in
      (local, events.compactMap { afterCallback($0, to: local) })
    }
    for (local, reacquirer) in reacquirers {
      if let index = work.firstIndex(where: { $0.0 === local }) {
        work[index].1.append(reacquirer)
      } else {
        work.append((local, [reacquirer]))
      }
    }
    for (local, bodies) in work where !bodies.isEmpty { run(bodies, on: local, origin: origin) }
  }

  private func runReacquirers(_ reacquirers: [(Local, @Sendable () -> Void)], origin: ChangeOrigin) {
    for (local, reacquirer) in reacquirers { run([reacquirer], on: local, origin: origin) }
  }

  /// Runs `bodies` in order, in one operation of the presenter's queue, as coordinated by `origin`.
  private func run(_ bodies: [@Sendable () -> Void], on local: Local, origin: ChangeOrigin) {
    local.presenter.presentedItemOperationQueue.addOperation {
      ChangeOrigin.$current.withValue(origin) { for body in bodies { body() } }
    }
  }

  /// The "after" callback `event` asks of `local`'s presenter (a `didMove` moves its record now).
  private func afterCallback(_ event: PresenterEvent, to local: Local) -> (@Sendable () -> Void)? {
    let presenter = local.presenter
    let path = event.path.flatMap { try? ContainerPath($0) }
    let newPath = event.newPath.flatMap { try? ContainerPath($0) }
    if event.kind == .didMove, let path { move(local, to: path) }
    let space = space
    if event.kind == .didChange { return { presenter.presentedItemDidChange() } }
    guard let path else { return nil }
    switch event.kind {
    case .didMove: return { presenter.presentedItemDidMove(to: space.url(for: path)) }
    case .subitemDidAppear: return { presenter.presentedSubitemDidAppear(at: space.url(for: path)) }
    case .subitemDidChange: return { presenter.presentedSubitemDidChange(at: space.url(for: path)) }
    case .subitemDidMove:
      guard let newPath else { return nil }
      return { presenter.presentedSubitem(at: space.url(for: path), didMoveTo: space.url(for: newPath)) }
    default: return nil
    }
  }

  /// Called with `lock` held: the events for presenters this process still has, grouped, in order.
  private func group(_ events: [PresenterEvent]) -> [(Local, [PresenterEvent])] {
    // The usual message is for one presenter: no dictionary then (one per message was measurable at 64 processes).
    if let first = events.first?.presenter, events.allSatisfy({ $0.presenter == first }) {
      return locals[first].map { [($0, events)] } ?? []
    }
    var order: [String] = []
    var byID: [String: [PresenterEvent]] = [:]
    for event in events where locals[event.presenter] != nil {
      if byID[event.presenter] == nil { order.append(event.presenter) }
      byID[event.presenter, default: []].append(event)
    }
    return order.map { (locals[$0]!, byID[$0]!) }
  }

  /// Liveness tick: a coordinator that died between prepare and finish still releases our presenters.
  func checkSenders() {
    let senders = lock.withLock { pending.map { ($0.key, $0.value.sender, $0.value.item) } }
    for (id, sender, item) in senders where !space.isAlive(sender) {
      CoordinationSpace.logger.info("process \(sender) died during a coordinated access of '\(item)'")
      let affected = lock.withLock { locals.values.filter { $0.item == item || $0.item.isDescendant(of: item) } }
      finish(id: id, events: [], origin: ChangeOrigin(processID: sender.pid, isCoordinated: true))
      for local in affected { queueChange(local, origin: ChangeOrigin(processID: sender.pid, isCoordinated: true)) }
    }
  }

  // MARK: Uncoordinated changes (inotify)

  private func watch(_ local: Local) {
    let itemPath = space.absolutePath(local.item)
    var tokens: [Watcher.Token] = []
    let parent = local.item.parent.map { space.absolutePath($0) } ?? space.containerPath
    let name = local.item.lastComponent
    if !local.item.isRoot,
      let token = try? Watcher.shared.watch(
        parent,
        handler: { [weak self, weak local] event in
          guard let self, let local, event.name == name else { return }
          self.itemEvent(local, event)
        })
    {
      tokens.append(token)
    }
    if local.isDirectory,
      let token = try? Watcher.shared.watch(
        itemPath,
        handler: { [weak self, weak local] event in
          guard let self, let local, !event.name.isEmpty else { return }
          self.subitemEvent(local, event)
        })
    {
      tokens.append(token)
    }
    if tokens.isEmpty {
      CoordinationSpace.logger.debug("'\(itemPath)' cannot be watched: only coordinated changes will be reported")
    }
    // Swapped under the lock (`remove`, a move and a re-arm after the container's removal run on different
    // threads): the watches replaced are cancelled, and so are the new ones of a presenter removed meanwhile.
    let stale = lock.withLock { () -> [Watcher.Token] in
      guard byObject[ObjectIdentifier(local.presenter)] === local else { return tokens }
      defer { local.watches = tokens }
      return local.watches
    }
    for token in stale { Watcher.shared.cancel(token) }
  }

  private static let changeMask =
    Watcher.closeWrite | Watcher.movedTo | Watcher.movedFrom | Watcher.create | Watcher.delete | Watcher.attrib

  private func itemEvent(_ local: Local, _ event: Watcher.Event) {
    guard event.mask & Self.changeMask != 0, !isSuppressed(local.item) else { return }
    queueChange(local, origin: ChangeOrigin(processID: nil, isCoordinated: false))
  }

  private func subitemEvent(_ local: Local, _ event: Watcher.Event) {
    guard !event.name.hasPrefix(AtomicReplace.temporaryPrefix) else { return }
    guard event.mask & Self.changeMask != 0 else { return }
    let path = local.item.appending(event.name)
    guard !isSuppressed(path) else { return }
    let appeared = event.mask & (Watcher.create | Watcher.movedTo) != 0
    let key = Array(((appeared ? "+" : "~") + event.name).utf8)
    let queued = lock.withLock { local.subitemsQueued.insert(key).inserted }
    guard queued else { return }
    let url = space.url(for: path)
    let presenter = local.presenter
    presenter.presentedItemOperationQueue.addOperation { [self] in
      lock.withLock { _ = local.subitemsQueued.remove(key) }
      ChangeOrigin.$current.withValue(ChangeOrigin(processID: nil, isCoordinated: false)) {
        if appeared {
          presenter.presentedSubitemDidAppear(at: url)
        } else {
          presenter.presentedSubitemDidChange(at: url)
        }
      }
    }
  }

  private func queueChange(_ local: Local, origin: ChangeOrigin) {
    let queued = lock.withLock { () -> Bool in
      if local.changeQueued { return false }
      local.changeQueued = true
      return true
    }
    guard queued else { return }
    let presenter = local.presenter
    presenter.presentedItemOperationQueue.addOperation { [self] in
      lock.withLock { local.changeQueued = false }
      ChangeOrigin.$current.withValue(origin) { presenter.presentedItemDidChange() }
    }
  }

  /// Whether a coordinated write under way covers `path` (its events will be reported by the finish message).
  private func isSuppressed(_ path: ContainerPath) -> Bool {
    lock.withLock {
      pending.values.contains { pending in
        guard pending.isWrite else { return false }
        let item = pending.item
        return path == item || path.isDescendant(of: item)
      }
        || finishedWrites.keys.contains { path == $0 || path.isDescendant(of: $0) }
    }
  }

  // MARK: The container removed under us

  /// The container (or its `.coordination`) was deleted while this process runs, say by `rm -rf`: every watch,
  /// the inbox, the liveness lock and the presenter records are gone, and the presenters would be deaf for good.
  /// Waits for the deletion to finish (at most 2 s), then recreates the layout this process needs, publishes its
  /// liveness lock, re-arms the inbox, re-registers and re-watches every presenter, and tells each one with
  /// `presentedItemDidChange` (uncoordinated): its item is gone or changed. `accommodatePresentedItemDeletion` is
  /// not used — it asks a presenter to prepare for a deletion a coordinator is about to make, and this one is over.
  func containerRemoved() {
    guard !rearming.exchange(true, ordering: .acquiringAndReleasing) else { return }
    DispatchQueue.global().async { [self] in
      defer { rearming.store(false, ordering: .releasing) }
      // rm -rf removes bottom-up: recreating too early would make it fail on a directory that is not empty.
      let deadline = MonotonicClock.nanoseconds() + 2_000_000_000
      while (try? FileSystem.status(space.containerPath)) ?? nil != nil && MonotonicClock.nanoseconds() < deadline {
        MonotonicClock.sleep(nanoseconds: 20_000_000)
      }
      let all = lock.withLock { Array(locals.values) }
      CoordinationSpace.logger.error(
        """
        the container '\(space.containerPath)' was removed while this process used it: recreating its layout and \
        re-registering \(all.count) presenter(s); their items are gone (other processes recreate the rest)
        """)
      do {
        try rearm(all)
      } catch {
        CoordinationSpace.logger.critical(
          "cannot recreate '\(space.containerPath)' after its removal: \(error); presenters here hear nothing more")
        return
      }
      for local in all { queueChange(local, origin: ChangeOrigin(processID: nil, isCoordinated: false)) }
    }
  }

  private func rearm(_ all: [Local]) throws(FileSystemError) {
    try space.recreateAfterRemoval(parents: all.compactMap { $0.item.parent })
    let lockFD = DescriptorBox(try space.messaging.publishLivenessLock())
    lock.withLock { republishedLivenessLock = lockFD }  // closes the one it replaces
    try space.messenger.watchInbox()
    for local in all {
      try? space.registry.register(record(of: local))
      watchRecord(local)
      watch(local)
    }
  }

  /// After an inotify overflow: events may be lost, so every presenter hears that its item may have changed, and
  /// every record of ours is checked (an event that would have shown it damaged may be among those lost).
  private func resync() {
    let all = lock.withLock { Array(locals.values) }
    DispatchQueue.global().async { [self] in for local in all { keepRecord(of: local) } }
    for local in all {
      queueChange(local, origin: ChangeOrigin(processID: nil, isCoordinated: false, isResync: true))
    }
  }
}

/// Errors presenters gave while answering one prepare, and how many presenters have yet to answer.
private final class FailureList: Sendable {
  let list = Mutex<[String]>([])
  let remaining: Atomic<Int>

  init(remaining: Int) { self.remaining = Atomic(remaining) }
}
