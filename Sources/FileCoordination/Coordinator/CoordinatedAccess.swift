import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// One coordinated access from start to end: which items, which presenters it concerns, the messages it sent
/// and the locks it holds. The steps follow the message protocol (MessageProtocol.swift) and the lock order
/// (LockOrder.swift).
struct CoordinatedAccess: Sendable {
  struct Item: Sendable {
    var path: ContainerPath
    var url: URL
    var isWrite: Bool
    var reading: FileCoordinator.ReadingOptions
    var writing: FileCoordinator.WritingOptions
    var existedBefore: Bool?
    /// No symbolic link was on the item's path when the access was set up (`CheckedWrite`).
    var linkFree = false
  }

  /// A prepare sent for item `item` to `process`.
  private struct Sent: Sendable {
    var id: String
    var process: ProcessName
    var item: Int
  }

  let space: CoordinationSpace
  private(set) var items: [Item]
  private let ownPresenter: String?
  private let purpose: String
  private var records: [PresenterRecord] = []
  private var sent: [Sent] = []
  private var held: [LockTable.Hold] = []
  /// Who holds `held` (set once the locks are taken).
  private(set) var owner: LockOwner?
  /// What a coordinator's fast path keeps of this access (FastAccess.swift): where spaces stood when the item was
  /// placed (`CoordinationSpace.placements`), the version its link-free answer from memory holds at (one item only),
  /// the registry's generation when nobody presented anything that concerns these items, and no record was damaged
  /// (set by `notifyPresenters`).
  let placements: UInt64
  private(set) var linkFreeVersion: UInt64?
  private(set) var presentersGeneration: UInt64?

  /// The URL of item `index`, for the accessor (no array made for the one- and two-item calls).
  func url(_ index: Int) -> URL { items[index].url }

  init(intents: [FileAccessIntent], filePresenter: (any FilePresenter)?, purpose: String) throws(FileCoordinatorError) {
    var space: CoordinationSpace?
    var items: [Item] = []
    var linkFreeVersion: UInt64?
    placements = CoordinationSpace.placements.load(ordering: .acquiring)  // before any URL is placed
    for intent in intents {
      let (found, lexical) = try FileCoordinatorError.wrap { () throws(GroupContainerError) in
        try CoordinationSpace.locate(intent.url)
      }
      if let space, space !== found {
        throw .container(.invalidPath(intent.url.path, rule: "all items of one access must be in one container"))
      }
      if space == nil { items = found.spareItems.take() }
      space = found
      // Nothing may lead outside the container, whatever the options. Most paths have no link on the way: the
      // kernel says so in one call, or less with the space's memory (LinkFreePaths.swift); then there is no walk.
      let resolved =
        found.linkFreePaths.isLinkFree(lexical, remembered: &linkFreeVersion)
        ? nil
        : try FileCoordinatorError.wrap { () throws(GroupContainerError) in
          try resolveBeneath(lexical, containerPath: found.containerPath)
        }
      switch intent.kind {
      case .reading(let options):
        let path = options.contains(.resolvesSymbolicLink) ? (resolved ?? lexical) : lexical
        items.append(Item(path: path, url: found.url(for: path), isWrite: false, reading: options, writing: []))
      case .writing(let options):
        try FileCoordinatorError.wrap { () throws(GroupContainerError) in
          try InboxRule.check(writing: lexical, resolved: resolved, options: options)
        }
        items.append(
          Item(path: lexical, url: intent.url, isWrite: true, reading: [], writing: options, linkFree: resolved == nil))
      }
    }
    guard let space else { throw .container(.invalidPath("", rule: "an access needs at least one item")) }
    self.space = space
    self.items = items
    self.purpose = purpose
    self.ownPresenter = filePresenter.flatMap { space.host.id(of: $0) }
    self.linkFreeVersion = items.count == 1 ? linkFreeVersion : nil
  }

  // MARK: Step 1: before

  /// Sends the prepares and waits for the acks.
  mutating func notifyPresenters(
    timeout: Duration, policy: FileCoordinator.PresenterTimeoutPolicy, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) {
    // Only the presenters of these items, their ancestors and descendants: the cost does not grow with others.
    // Only the buckets of these items and their ancestors (and the items' `below`): the cost does not grow with
    // presenters of other items, in a new process either (PresenterRegistry).
    if let generation = space.registry.emptyGeneration() {  // nobody in the container presents anything
      presentersGeneration = generation
      return
    }
    // Read before the lookup: a registration after it moves the generation on (the fast path then asks again).
    let generation = space.registry.generation()
    let found = space.registry.lookup(items.map(\.path))  // the paths made only if someone presents
    if !found.damaged.isEmpty { try cannotAsk(found.damaged, policy: policy) }
    let quiet = found.damaged.isEmpty ? generation : nil
    guard !found.records.isEmpty else {  // nobody presents anything that concerns us
      presentersGeneration = quiet
      return
    }
    // A bucket also holds paths that share its hash: keep the related records only.
    records = found.records.filter { record in items.contains { Relation(record.path, $0.path) != .unrelated } }
    guard !records.isEmpty else {
      presentersGeneration = quiet
      return
    }
    var awaited: [Messenger.AwaitedAck] = []
    for (index, item) in items.enumerated() {
      var events: [ProcessName: [PresenterEvent]] = [:]
      for record in records {
        let relation = Relation(record.path, item.path)
        guard relation != .unrelated else { continue }
        if item.isWrite { events[record.process, default: []] += [] }  // suppression even without callbacks
        guard record.id != ownPresenter else { continue }
        let before = beforeEvents(record, relation, item)
        if !before.isEmpty { events[record.process, default: []] += before }
      }
      for (process, list) in events {
        var message = CoordinationMessage(
          id: space.messenger.nextMessageID(), kind: .prepare, sender: space.me, purpose: purpose,
          item: item.path.string, needsAck: !list.isEmpty, isWrite: item.isWrite, events: list)
        if message.needsAck { space.messenger.reserveAck(for: &message) }
        do {
          guard try space.messenger.sendUnlessDead(message, to: process) else {
            space.messenger.returnAck(of: message)  // a dead process never answers: its slot is free again
            continue
          }
        } catch {
          CoordinationSpace.logger.debug("process \(process) did not take a message: \(error)")
          continue
        }
        sent.append(Sent(id: message.id, process: process, item: index))
        if message.needsAck {
          awaited.append(
            Messenger.AwaitedAck(id: message.id, process: process, slot: message.ackSlot, token: message.ackToken ?? 0))
        }
      }
    }
    guard !awaited.isEmpty else { return }
    let outcome: Messenger.AckOutcome
    do {
      outcome = try space.messenger.awaitAcks(awaited, timeout: timeout, isCancelled: isCancelled)
    } catch {
      finish(moves: [], accessorRan: false)
      throw .cancelled
    }
    let item = items[0].path.string
    if !outcome.timedOut.isEmpty {
      space.messenger.discardAcks(awaited.map(\.id))
      let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
      for process in outcome.timedOut {
        CoordinationSpace.logger.warning(
          "a presenter of '\(item)' in process \(process.pid) did not answer within \(seconds) s",
          metadata: ["policy": "\(policy)"])
      }
      if policy == .fail {
        finish(moves: [], accessorRan: false)
        throw .presenterTimedOut(item: item, processID: outcome.timedOut[0].pid, seconds: seconds)
      }
    }
    if let (process, message) = outcome.failures.first {
      finish(moves: [], accessorRan: false)
      throw .presenterFailed(item: item, processID: process.pid, message: message)
    }
  }

  /// Damaged records (PresenterRegistry): each may be a presenter of these items that cannot be asked — treated as
  /// one that did not answer (its item is unknown, so it concerns every access): skipped (the registry logged it
  /// as an error) or, under `.fail`, the access fails. A record of a dead process is no presenter (reaped here).
  private func cannotAsk(
    _ damaged: [DamagedRecord], policy: FileCoordinator.PresenterTimeoutPolicy
  ) throws(FileCoordinatorError) {
    guard policy == .fail else { return }
    for record in damaged {
      if let process = record.process, !space.isAlive(process) { continue }
      throw .presenterUnreachable(
        item: items[0].path.string, record: record.name, processID: record.process?.pid, reason: record.reason)
    }
  }

  private enum Relation {
    case same, ancestor, descendant, unrelated
    /// How the presented item `presented` relates to the accessed `item`.
    init(_ presented: ContainerPath, _ item: ContainerPath) {
      if presented == item {
        self = .same
      } else if item.isDescendant(of: presented) {
        self = .ancestor
      } else if presented.isDescendant(of: item) {
        self = .descendant
      } else {
        self = .unrelated
      }
    }
  }

  private func beforeEvents(_ record: PresenterRecord, _ relation: Relation, _ item: Item) -> [PresenterEvent] {
    func event(_ kind: PresenterEvent.Kind, _ path: ContainerPath? = nil) -> PresenterEvent {
      PresenterEvent(presenter: record.id, kind: kind, path: path?.string)
    }
    if !item.isWrite {
      // Apple: a read messages the item's own presenters, not those of what a directory holds (a directory read
      // does not lock its contents either). See the CoordinationSemantics article.
      guard relation == .same else { return [] }
      return [event(.relinquishToReader)] + (item.reading.contains(.withoutChanges) ? [] : [event(.save)])
    }
    let options = item.writing
    switch relation {
    case .same:
      return [event(.relinquishToWriter)] + (options.contains(.forMerging) ? [event(.save)] : [])
        + (options.contains(.forDeleting) ? [event(.accommodateDeletion)] : [])
    case .descendant where options.excludesContents:
      return [event(.relinquishToWriter)] + (options.contains(.forDeleting) ? [event(.accommodateDeletion)] : [])
    case .ancestor where options.contains(.forDeleting) && record.isDirectory:
      return [event(.accommodateSubitemDeletion, item.path)]
    default:
      return []
    }
  }

  // MARK: Step 2: locks

  /// Takes the access's locks; with a `timeout`, gives up after it with ``FileCoordinatorError/lockTimedOut(item:holderPID:seconds:)``.
  mutating func lock(
    owner: LockOwner, timeout: Duration? = nil, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) {
    let deadline = timeout.map { MonotonicClock.nanoseconds() + Self.nanoseconds($0) }
    do {
      if let deadline {
        held = try takeLocks(owner: owner, isCancelled: { isCancelled() || MonotonicClock.nanoseconds() >= deadline })
      } else {
        held = try takeLocks(owner: owner, isCancelled: isCancelled)  // no closure per access
      }
    } catch {
      guard error.code == .cancelled, !isCancelled(), let timeout, let deadline,
        MonotonicClock.nanoseconds() >= deadline
      else { throw error }
      let plan = LockOrder.plan(items.map { ($0.path, Self.access($0)) })
      throw .lockTimedOut(item: items[0].path.string, holderPID: holder(of: plan), seconds: Self.seconds(timeout))
    }
    self.owner = owner
    // Whether a written item is new decides "appeared" vs "changed" for directory presenters.
    if !sent.isEmpty {
      for index in items.indices where items[index].isWrite {
        items[index].existedBefore = exists(items[index].path)
      }
    }
  }

  static func access(_ item: Item) -> LockOrder.Access {
    !item.isWrite ? .read : item.writing.excludesContents ? .writeTree : .write
  }

  /// The lock table's `acquire`: for one item by its path (the table keeps its plan and entries for the next time).
  private func takeLocks(
    owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> [LockTable.Hold] {
    guard items.count == 1 else {
      return try space.locks.acquire(
        LockOrder.plan(items.map { ($0.path, Self.access($0)) }), owner: owner, isCancelled: isCancelled)
    }
    return try space.locks.acquire(items[0].path, Self.access(items[0]), owner: owner, isCancelled: isCancelled)
  }

  /// Another process holding one of `plan`'s lock files, from the kernel's lock list (exclusive holders first).
  private func holder(of plan: [LockOrder.Request]) -> Int32? {
    let inodes = Set(
      plan.compactMap { request in
        ((try? FileSystem.status(space.directory + "/" + CoordinationPaths.Name.locks + "/" + request.key.fileName))
          ?? nil)?.inode
      })
    return KernelLocks.flocks().filter { inodes.contains($0.inode) && $0.pid != space.me.pid }
      .sorted { $0.exclusive && !$1.exclusive }.first?.pid
  }

  static func nanoseconds(_ duration: Duration) -> UInt64 {
    UInt64(max(0, duration.components.seconds)) * 1_000_000_000
      + UInt64(max(0, duration.components.attoseconds) / 1_000_000_000)
  }

  static func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
  }

  func unlock() {
    if let owner { space.locks.release(held, owner: owner) }
    space.spareItems.keep(items)
  }

  private func exists(_ path: ContainerPath) -> Bool {
    ((try? FileSystem.status(space.absolutePath(path))) ?? nil) != nil
  }

  // MARK: Step 3: after

  /// Sends the finishes: "after" callbacks, and the go-ahead for reacquirers. An access whose accessor never ran
  /// (refused save, cancelled, timed out under `.fail`) changed nothing: its finish carries no "after" callbacks,
  /// only the go-ahead (as Apple: a failed coordination runs no accessor, and presenters hear no change).
  func finish(moves: [(URL, URL)], accessorRan: Bool = true) {
    guard !sent.isEmpty else { return }
    let movedTo: [ContainerPath: ContainerPath] = Dictionary(
      moves.compactMap { old, new in
        guard let (s1, o) = try? CoordinationSpace.locate(old), let (s2, n) = try? CoordinationSpace.locate(new),
          s1 === space, s2 === space
        else { return nil }
        return (o, n)
      }, uniquingKeysWith: { _, last in last })
    // Once per process and per item, not per presenter: with 64 presenters of one file, a stat and a scan of every
    // record for each of them were a tenth of the access.
    let recordsOf = accessorRan ? Dictionary(grouping: records.filter { $0.id != ownPresenter }, by: \.process) : [:]
    // Per item, by index (an array: a dictionary keyed by `Int` made a new process look up `Int: Hashable` at run
    // time, a scan of every conformance record loaded).
    var existsAfter = [Bool?](repeating: nil, count: items.count)
    var finishes: [(CoordinationMessage, ProcessName)] = []
    finishes.reserveCapacity(sent.count)
    for message in sent {
      let item = items[message.item]
      var events: [PresenterEvent] = []
      if item.isWrite, let records = recordsOf[message.process] {
        let exists = existsAfter[message.item] ?? exists(item.path)
        existsAfter[message.item] = exists
        for record in records { events += afterEvents(record, item, existsAfter: exists, movedTo: movedTo) }
      }
      let finish = CoordinationMessage(
        id: message.id, kind: .finish, sender: space.me, purpose: purpose, item: item.path.string, needsAck: false,
        isWrite: item.isWrite, events: events)
      finishes.append((finish, message.process))
    }
    space.messenger.sendLater(finishes)
  }

  private func afterEvents(
    _ record: PresenterRecord, _ item: Item, existsAfter: Bool, movedTo: [ContainerPath: ContainerPath]
  ) -> [PresenterEvent] {
    let relation = Relation(record.path, item.path)
    func event(_ kind: PresenterEvent.Kind, _ path: ContainerPath? = nil, _ newPath: ContainerPath? = nil)
      -> PresenterEvent
    {
      PresenterEvent(presenter: record.id, kind: kind, path: path?.string, newPath: newPath?.string)
    }
    if let destination = movedTo[item.path] {
      switch relation {
      case .same: return [event(.didMove, destination)]
      case .descendant: return [event(.didMove, record.path.rebased(from: item.path, to: destination))]
      case .ancestor where record.isDirectory: return [event(.subitemDidMove, item.path, destination)]
      default: return []
      }
    }
    // The destination of a move: a directory presenter that heard "moved" for the source hears nothing more; one
    // that the item entered from elsewhere hears "appeared" below.
    if relation == .ancestor,
      movedTo.contains(where: { $0.value == item.path && $0.key.isDescendant(of: record.path) })
    {
      return []
    }
    if item.writing.contains(.forDeleting) && !existsAfter { return [] }  // they accommodated the deletion
    switch relation {
    case .same:
      return [event(.didChange)]
    case .descendant where item.writing.excludesContents:
      return [event(.didChange)]
    case .ancestor where record.isDirectory:
      return [event(item.existedBefore == false && existsAfter ? .subitemDidAppear : .subitemDidChange, item.path)]
    default:
      return []
    }
  }
}
