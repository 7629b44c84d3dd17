import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// Sends messages, receives this process's inbox, and matches acks to waiting senders. Every other message goes to
/// the part that registered for its kind (`MessagingSpace.receive`).
// `acks` is guarded by `condition`; the rest is immutable or a Mutex.
package final class Messenger: @unchecked Sendable {
  private let space: MessagingSpace
  private let sequence = Atomic<UInt64>(0)
  private let condition = NSCondition()
  private var acks: [String: CoordinationMessage] = [:]
  /// Ids nobody waits for any more (timed out): their late acks are dropped instead of kept forever.
  private var abandoned: Set<String> = []
  private var inbox: String { space.inbox(of: space.me) }
  private let board: MappedCounters
  private let boardSignal: ChangeSignal
  /// Slots of our board free to lend. A slot whose ack never came is not given back: a late ack must not answer
  /// the next prepare that would borrow it.
  private let freeSlots = Mutex<[Int]>(Array(AckBoard.slots.reversed()))
  /// Tokens count up from a random start: a board is reused by later processes (`openOwnBoard`), and a late answer
  /// to its previous holder's prepare must not match a token of ours.
  private let tokens = Atomic<UInt64>(UInt64.random(in: 0...(UInt64.max >> 1)))
  /// Other processes' boards, mapped on first use; processes that hold one board in turn share its mapping.
  private let boards = Mutex<[ProcessName: MappedCounters]>([:])
  /// Other processes' boards opened to answer a prepare (tests: a known board is not opened again).
  package let boardsOpened = Atomic<Int>(0)
  private let outbox = DispatchQueue(label: "GroupContainer.outbox")
  private let queued = Atomic<Int>(0)
  private let inboxWatch = Mutex<Watcher.Token?>(nil)
  /// This process's inbox, opened beneath the container when it is watched (again when the container is made anew):
  /// each message is read and removed relative to it — one `openat` and one `unlinkat` — instead of from the
  /// container's descriptor down (three more system calls and two path walks per message).
  private let inboxDirectory = Mutex<DescriptorBox?>(nil)
  /// How long a waiting sender polls its board before sleeping: longer than a typical answer on an idle machine.
  static let spinNanoseconds: UInt64 = 500_000
  /// Up to how many answering processes a sender spins at all.
  static let spinProcesses = 4
  /// Datagrams for prepares and finishes, files for the rest (MessageTransport.swift).
  let transport: MessageTransport

  init(space: MessagingSpace) throws(FileSystemError) {
    self.space = space
    transport = MessageTransport(space: space)
    board = try MappedCounters(fd: Self.openOwnBoard(space))
    boardSignal = ChangeSignal(board, sequence: AckBoard.sequence, listeners: AckBoard.listeners)
    boardSignal.listenForever()
    Self.flushAtExit
    Self.all.withLock { $0.append(self) }
  }

  /// Every messenger of this process (one per container, kept for the process's life): emptied at exit.
  private static let all = Mutex<[Messenger]>([])

  /// After the container was removed and made again (CoordinationSpace.recreateAfterRemoval): this process's board
  /// is mapped onto a new `.acks` file, and other processes' boards, mapped from deleted files, are forgotten.
  package func rebindBoard() throws(FileSystemError) {
    try board.rebind(to: Self.openOwnBoard(space))
    boards.withLock { $0.removeAll() }
  }

  func start() throws(FileSystemError) {
    if let reason = Watcher.shared.unavailableReason {
      // Locks need no inotify, and acks come on the board; ack files (failures, openURL answers) are read by
      // `awaitAcks` scanning the inbox. Only presenters need the watcher, and they are refused.
      MessagingSpace.logger.warning("coordination works without presenters in this process: \(reason)")
      return
    }
    try watchInbox()
    _ = Watcher.shared.onOverflow { [self] in scanInbox() }
    _ = Watcher.shared.onTick { [self] in
      space.tick()
      // The container removed under us. The inbox's own IN_DELETE_SELF cannot be relied on: the mapped `.acks`
      // (and `counters`) pin the directories' dentries, so the kernel reports their deletion only at unmap.
      if (try? FileSystem.status(inbox)) ?? nil == nil { space.inboxWasRemoved() }
    }
    scanInbox()
  }

  /// Watches this process's inbox. Its removal (the container deleted under us) is told to the parts
  /// (`MessagingSpace.onInboxRemoved`: the presenter host recreates and re-arms everything); the liveness tick checks
  /// for it too (see `start`).
  package func watchInbox() throws(FileSystemError) {
    // A watch of a removed inbox may still be in place (its deletion not yet reported): drop it, so the new one
    // watches the new directory instead of joining the old watch.
    if let old = inboxWatch.withLock({ $0.take() }) { Watcher.shared.cancel(old) }
    let directory = DescriptorBox(try space.root.openDirectory(CoordinationPaths.inbox(of: space.me)))
    inboxDirectory.withLock { $0 = directory }  // the one it replaces closes once no receive uses it
    transport.bind(in: directory.fd) { [self] bytes in receive(datagram: bytes) }
    // Messages arrive by rename only: asking for nothing else (but the inbox's own deletion) keeps the temp file's
    // own events from waking the watcher thread (twice per message otherwise).
    let token = try Watcher.shared.watch(inbox, mask: Watcher.movedTo | Watcher.deleteSelf) { [self] event in
      if event.mask & (Watcher.deleteSelf | Watcher.ignored) != 0 {
        if (try? FileSystem.status(inbox)) ?? nil == nil { space.inboxWasRemoved() }
        return
      }
      guard event.mask & Watcher.movedTo != 0, !event.name.hasPrefix(".") else { return }
      receive(fileNamed: event.name)
    }
    inboxWatch.withLock { $0 = token }
  }

  package func nextMessageID() -> String {
    "\(space.me).\(sequence.add(1, ordering: .relaxed).newValue)"
  }

  /// Lends a slot of our board to a prepare that needs an ack (nil when all are lent: the ack comes as a file).
  package func reserveAck(for message: inout CoordinationMessage) {
    guard let slot = freeSlots.withLock({ $0.popLast() }) else { return }
    let token = tokens.add(1, ordering: .relaxed).newValue
    board.store(slot, 0)
    message.ackSlot = slot
    message.ackToken = token
  }

  /// Gives back the slot `reserveAck` lent to a prepare that was never sent.
  package func returnAck(of message: CoordinationMessage) {
    guard let slot = message.ackSlot else { return }
    freeSlots.withLock { $0.append(slot) }
  }

  /// This process's board: the first board of the pool, `.coordination/acks/<n>`, that no live process holds
  /// (created and sized when missing), held `LOCK_EX` for as long as it is mapped — the kernel lets it go when the
  /// process dies — and linked into the inbox as `.acks`, where answerers find it (AckBoard.swift says why). Without
  /// the pool (past `AckBoard.poolLimit`, or a link refused) the board is the inbox's own file, as before.
  private static func openOwnBoard(_ space: MessagingSpace) throws(FileSystemError) -> SystemFD {
    let inbox = try space.root.openDirectory(CoordinationPaths.inbox(of: space.me))
    let size = Int64(MappedCounters.fileSize)
    if let pool = try? space.root.openDirectory(CoordinationPaths.acks) {
      for n in 0..<AckBoard.poolLimit {
        let name = String(n)
        let board: SystemFD
        do { board = try pool.open(name, .readWrite) } catch {
          guard error.errno == .noSuchFileOrDirectory,
            let made = try? pool.openOrCreate(name, mode: space.fileMode, size: size)
          else { continue }
          board = made
        }
        // Not a file (a FIFO or socket made there: it would never map), or a live process's.
        guard (try? board.status())?.kind == .regular, (try? board.lock(.exclusive, nonBlocking: true)) == true
        else { continue }
        try? inbox.removeFile(AckBoard.fileName)  // a link of before (the container made anew)
        do { try pool.link(name, into: inbox, as: AckBoard.fileName) } catch {
          MessagingSpace.logger.warning("this process's ack board stays in its inbox: \(error)")
          break
        }
        return board
      }
    }
    return try inbox.openOrCreate(AckBoard.fileName, mode: space.fileMode, size: size)
  }

  /// Answers `prepare` on its sender's board; false when that is not possible (then send an ack file).
  package func postAck(for prepare: CoordinationMessage) -> Bool {
    guard let slot = prepare.ackSlot, let token = prepare.ackToken else { return false }
    let sender = prepare.sender
    // Bounded (senders come and go), one board let go per board mapped, and unmapped after the answer: emptying
    // the whole table had every presenter unmap 64 boards before answering the same new process's prepare.
    var evicted: MappedCounters?
    let remote = boards.withLock { boards -> MappedCounters? in
      if let known = boards[sender] { return known }
      let relative = CoordinationPaths.inbox(of: sender) + "/" + AckBoard.fileName
      // A new process mostly holds a board that processes before it held, mapped here already: one `fstatat` finds
      // it (an open, an `fstat` and a close per new writer before). A link on the way is followed, where the open
      // below refuses one: it can only name a board this process opened safely before — as a hard link planted as
      // `.acks`, which the open takes too, could.
      if let status = try? space.root.fd.status(of: relative),
        let mapped = boards.values.first(where: { $0.identity == (status.device, status.inode) })
      {
        if boards.count >= 64 { evicted = boards.remove(at: boards.startIndex).value }
        boards[sender] = mapped
        return mapped
      }
      // Only an existing board, beneath the container (never created here); MappedCounters refuses non-files.
      guard let fd = try? space.root.openFile(relative, .readWrite), let status = try? fd.status() else { return nil }
      boardsOpened.add(1, ordering: .relaxed)
      // The board of a process that held it before (a new process takes the first free board of the pool): mapped
      // again, it cost every presenter an mmap, a page fault and later an munmap per new writer process.
      let opened: MappedCounters
      if let mapped = boards.values.first(where: { $0.identity == (status.device, status.inode) }) {
        opened = mapped
      } else {
        guard let made = try? MappedCounters(fd: fd) else { return nil }
        opened = made
      }
      if boards.count >= 64 { evicted = boards.remove(at: boards.startIndex).value }
      boards[sender] = opened
      return opened
    }
    guard let remote else { return false }
    return withExtendedLifetime(evicted) {
      // Only into the slot its lender emptied: a board outlives its holder, and a late answer to the previous
      // holder's prepare must not overwrite the answer the new holder found there (nor be overwritten). Either
      // way the loser's answer goes as an ack file.
      guard remote.storeIfZero(slot, token) else { return false }
      ChangeSignal(remote, sequence: AckBoard.sequence, listeners: AckBoard.listeners).post()
      return true
    }
  }

  /// Publishes `message` in `process`'s inbox. A missing inbox means the process is gone.
  package func send(_ message: CoordinationMessage, to process: ProcessName) throws(FileSystemError) {
    flushOutbox()
    _ = try write(message, to: process)
  }

  /// Sends a prepare to `process` unless it is dead; false when it is (nothing was sent). Liveness is asked only
  /// when the prepare cannot go as a datagram: one that the kernel took is queued on a socket its receiver holds
  /// open, and a receiver that dies after that is found by the sender's periodic check while it waits for acks.
  /// (Asked for every receiver, liveness was four system calls per presenter process in the writer's own time.)
  package func sendUnlessDead(_ message: CoordinationMessage, to process: ProcessName) throws(FileSystemError) -> Bool {
    flushOutbox()
    return try write(message, to: process, unlessDead: true)
  }

  private func write(
    _ message: CoordinationMessage, to process: ProcessName, unlessDead: Bool = false
  ) throws(FileSystemError) -> Bool {
    let bytes = message.encoded()
    if message.kind == .prepare || message.kind == .finish, transport.send(bytes, to: process) { return true }
    if unlessDead && !space.isAlive(process) { return false }
    try space.root.replaceFile(
      atPath: space.inbox(of: process) + "/" + message.fileName, with: bytes, mode: space.fileMode)
    transport.sentFile()
    return true
  }

  /// Sends `messages` from the outbox queue, in order with every other message of this process. One block for all
  /// of an access's finishes: the caller returns after one enqueue, not one per presenter process.
  package func sendLater(_ messages: [(CoordinationMessage, ProcessName)]) {
    guard !messages.isEmpty else { return }
    queued.add(1, ordering: .relaxed)
    outbox.async { [self] in
      defer { queued.subtract(1, ordering: .releasing) }
      for (message, process) in messages {
        do { _ = try write(message, to: process) } catch {
          MessagingSpace.logger.debug("process \(process) did not take a message: \(error)")
        }
      }
    }
  }

  /// Returns once every `sendLater` message is sent.
  package func flushOutbox() {
    if queued.load(ordering: .acquiring) > 0 { outbox.sync {} }
  }

  /// Empties the outboxes of every space when the process exits normally (`exit` or the end of `main`).
  private static let flushAtExit: Void = {
    atexit { for messenger in Messenger.all.withLock({ $0 }) { messenger.flushOutbox() } }
  }()

  /// Everything in the inbox, oldest messages first (after an overflow the kernel may have dropped their events).
  package func scanInbox() {
    let names = ((try? FileSystem.listDirectory(inbox)) ?? []).filter { !$0.hasPrefix(".") }
    // A prepare before the finish of the same id.
    for name in names.sorted(by: { ($0.hasSuffix(".finish") ? 1 : 0, $0) < ($1.hasSuffix(".finish") ? 1 : 0, $1) }) {
      receive(fileNamed: name)
    }
  }

  /// Reads, deletes and dispatches one inbox file. Runs on the watcher thread.
  private func receive(fileNamed name: String) {
    let path = inbox + "/" + name
    let bytes: [UInt8]
    do {
      // Under the lock: `watchInbox` may swap the descriptor meanwhile (the container made anew).
      bytes = try inboxDirectory.withLock { directory throws(FileSystemError) -> [UInt8] in
        guard let directory else { return try space.root.readFile(atPath: path, limit: CoordinationMessage.maxBytes) }
        let file = try directory.fd.open(name, .readOnly)
        return try file.readRegularFile(limit: CoordinationMessage.maxBytes).bytes
      }
    } catch {
      if error.errno == .noSuchFileOrDirectory { return }  // gone: already handled by a scan
      if error.isPassing, let delay = readAgainDelay(name) {
        // Kept and read again on this thread (in order with every other receive): an answer dropped here made its
        // sender report "did not answer" although the receiver had done the work.
        MessagingSpace.logger.warning("inbox entry '\(path)' did not read (\(error)); read again in \(delay) ms")
        if Watcher.shared.unavailableReason == nil {
          DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) { [weak self] in
            guard let messenger = self else { return }
            Watcher.shared.afterQueuedEvents { messenger.receive(fileNamed: name) }
          }
        }  // else the waiting sender's own scans read it again (`awaitAcks`)
        return
      }
      MessagingSpace.logger.error("dropping unreadable inbox entry '\(path)': \(error)")
      try? space.root.removeTree(atPath: path)
      return
    }
    unreadable.withLock { tries in if !tries.isEmpty { tries[name] = nil } }
    // Removed once dispatched: the unlink (a journaled metadata write) stays off the handshake's critical path.
    // Both happen on this thread, so a rescan never sees a dispatched message again.
    defer {
      inboxDirectory.withLock { directory in
        if let directory { try? directory.fd.removeFile(name) } else { try? space.root.removeFile(atPath: path) }
      }
    }
    let message: CoordinationMessage
    do { message = try CoordinationMessage.decode(bytes, fileName: name) } catch {
      MessagingSpace.logger.error("dropping inbox entry '\(path)': \(error)")
      return
    }
    dispatch(message)
  }

  /// Inbox entries that failed to read for a passing reason, and how many times.
  private let unreadable = Mutex<[String: Int]>([:])

  /// How long to wait before reading `name` again (10 ms, doubling: about 2.5 s in all), or nil once it has failed
  /// too often: then it is dropped like any unreadable entry.
  private func readAgainDelay(_ name: String) -> Int? {
    unreadable.withLock { tries in
      if tries.count > 1024 { tries.removeAll() }  // bounded: names come and go
      let n = tries[name, default: 0] + 1
      guard n <= 8 else {
        tries[name] = nil
        return nil
      }
      tries[name] = n
      return 10 << (n - 1)
    }
  }

  /// Decodes and dispatches one datagram of the inbox socket (only prepares and finishes come so). Runs on the
  /// watcher thread.
  private func receive(datagram bytes: UnsafeBufferPointer<UInt8>) {
    let message: CoordinationMessage
    do { message = try CoordinationMessage.decode(bytes, fileName: nil) } catch {
      MessagingSpace.logger.error("dropping a datagram of the inbox socket: \(error)")
      return
    }
    guard message.kind == .prepare || message.kind == .finish else {
      MessagingSpace.logger.error(
        "dropping a datagram of the inbox socket: a \(message.kind.rawValue) comes as a file")
      return
    }
    dispatch(message, asDatagram: true)
  }

  /// Acks to the waiting senders; every other kind to the part that registered for it (MessagingSpace), or dropped.
  private func dispatch(_ message: CoordinationMessage, asDatagram: Bool = false) {
    if message.kind == .ack {
      condition.lock()
      if abandoned.remove(message.id) == nil { acks[message.id] = message }
      condition.unlock()
      boardSignal.post()  // wakes the waiting sender
    } else if let receiver = space.receiver(of: message.kind) {
      receiver(message, asDatagram)
    } else {
      MessagingSpace.logger.debug("dropping \(message.id): no part of this process receives a \(message.kind.rawValue)")
    }
  }

  /// What `awaitAcks` found.
  package struct AckOutcome {
    package var failures: [(ProcessName, String)] = []
    package var timedOut: [ProcessName] = []
    package var acks: [String: CoordinationMessage] = [:]
  }

  /// A message whose ack is waited for: its id, the process it went to, and the slot of our board it lent with its
  /// token (`reserveAck`; nil when the ack comes as a file).
  package struct AwaitedAck: Sendable {
    package var id: String
    package var process: ProcessName
    package var slot: Int?
    package var token: UInt64

    package init(id: String, process: ProcessName, slot: Int? = nil, token: UInt64 = 0) {
      (self.id, self.process, self.slot, self.token) = (id, process, slot, token)
    }
  }

  /// Waits for the acks of `awaited` until `timeout`, skipping targets that die. Throws when `isCancelled` says so.
  /// An array, looked through on each wake-up without hashing: answers on the board are found by their slots, and
  /// ids are looked up only while an ack file is waiting (dictionaries by id were a sixth of a 64-presenter write's
  /// own CPU, walked on each of its wake-ups).
  package func awaitAcks(
    _ awaited: [AwaitedAck], timeout: Duration, isCancelled: @Sendable () -> Bool
  ) throws(CancellationError) -> AckOutcome {
    var outcome = AckOutcome()
    var waiting = awaited  // the unanswered ones, in no order
    var freed: [Int] = []
    let start = MonotonicClock.nanoseconds()
    let deadline =
      start + UInt64(timeout.components.seconds) * 1_000_000_000
      + UInt64(timeout.components.attoseconds / 1_000_000_000)
    // Spin only for a few answers: many take longer than the spin anyway, and a spinning sender takes a core from
    // the very processes it waits for.
    let spinUntil = start + (Self.fewProcesses(awaited) ? Self.spinNanoseconds : 0)
    var nextLivenessCheck = start + 20_000_000
    while true {
      let seen = boardSignal.sequenceValue  // before looking: a post after this wakes the wait below
      // One pass: an answer on the board by its slot, else (only while an ack file waits) by its id.
      condition.lock()
      var index = 0
      while index < waiting.count {
        let entry = waiting[index]
        if let slot = entry.slot, board.load(slot) == entry.token {
          freed.append(slot)
        } else if !acks.isEmpty, let ack = acks.removeValue(forKey: entry.id) {
          outcome.acks[entry.id] = ack
          outcome.failures += (ack.failures ?? []).map { (entry.process, $0) }
          if let slot = entry.slot { freed.append(slot) }
        } else {
          index += 1
          continue
        }
        waiting.swapAt(index, waiting.count - 1)
        waiting.removeLast()
      }
      condition.unlock()
      if !freed.isEmpty {
        freeSlots.withLock { $0 += freed }
        freed.removeAll(keepingCapacity: true)
      }
      if waiting.isEmpty { break }
      if isCancelled() { throw CancellationError() }
      var now = MonotonicClock.nanoseconds()
      if now >= deadline {
        outcome.timedOut = Array(Set(waiting.map(\.process)))
        break
      }
      if now >= nextLivenessCheck {
        if Watcher.shared.unavailableReason != nil { scanInbox() }  // no watcher delivers ack files here
        // Clock work: how many checks a wait makes is how long the answer took (a count per operation leaves it out).
        let dead = IOFaultInjection.clockWork { Set(waiting.map(\.process)).filter { !space.isAlive($0) } }
        waiting.removeAll { dead.contains($0.process) }
        nextLivenessCheck = MonotonicClock.nanoseconds() + 20_000_000
        continue
      }
      // Poll first (the answer usually comes within the spin, and then no thread has to be woken), then sleep.
      while now < spinUntil && boardSignal.sequenceValue == seen { now = MonotonicClock.nanoseconds() }
      // The spin may end past the next check (a preempted thread): then no sleep, and no UInt64 underflow trap.
      let wakeAt = min(deadline, nextLivenessCheck)
      if boardSignal.sequenceValue == seen && wakeAt > now {
        boardSignal.wait(whileSequenceIs: seen, nanoseconds: wakeAt - now)
      }
    }
    return outcome
  }

  /// Whether `awaited` goes to at most `spinProcesses` processes (compared, not hashed: stops at one more).
  private static func fewProcesses(_ awaited: [AwaitedAck]) -> Bool {
    var distinct: [ProcessName] = []
    for entry in awaited where !distinct.contains(entry.process) {
      if distinct.count == spinProcesses { return false }
      distinct.append(entry.process)
    }
    return true
  }

  /// Forgets acks that arrive after their sender stopped waiting.
  package func discardAcks(_ ids: some Sequence<String>) {
    condition.lock()
    if abandoned.count > 4096 { abandoned.removeAll() }  // bounded: a dead process never acks
    for id in ids where acks.removeValue(forKey: id) == nil { abandoned.insert(id) }
    condition.unlock()
  }
}
