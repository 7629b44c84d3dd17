import Foundation
import Synchronization
import SystemLayer

/// One callback a process must run on one of its presenters.
struct PresenterEvent: Codable, Sendable, Hashable {
  enum Kind: String, Codable, Sendable {
    // Before the access (the sender waits for the ack).
    case relinquishToReader, relinquishToWriter, save, accommodateDeletion, accommodateSubitemDeletion
    // After it.
    case didChange, didMove, subitemDidAppear, subitemDidChange, subitemDidMove

    var isBefore: Bool {
      switch self {
      case .relinquishToReader, .relinquishToWriter, .save, .accommodateDeletion, .accommodateSubitemDeletion: true
      default: false
      }
    }
  }

  var presenter: String
  var kind: Kind
  /// The subitem (subitem events) or the new location (`didMove`), container-relative.
  var path: String?
  /// The destination of `subitemDidMove`.
  var newPath: String?
}

/// The message protocol, in one place.
///
/// A coordinated access talks to every process that presents an affected item through files in that process's
/// inbox, `.coordination/inbox/<pid>.<start>/`:
///
/// 1. **prepare** (`<id>.prepare`), before the accessor runs: the "before" callbacks (relinquish, save,
///    accommodate deletion) for that process's presenters. It also tells the process that a coordinated write
///    of the item is under way, so inotify events it causes are not reported a second time as uncoordinated.
///    When it carries callbacks the receiver answers with **ack** (`<id>.ack` in the sender's inbox) once every
///    callback called its completion handler, listing any errors the presenters gave.
/// 2. The sender waits for all acks — bounded by its timeout, and never for a dead process (liveness is checked
///    while waiting) — then takes its locks and runs the accessor.
/// 3. **finish** (`<id>.finish`), after the accessor and after the locks are released: the "after" callbacks
///    (didChange, didMove, subitem events); then the receiver runs the reacquirers its presenters handed over
///    for this id. If the sender dies first, the receiver notices on its next liveness tick and runs them anyway.
///
/// Every message is a JSON file written to a temp name and renamed into the inbox (atomic publish: inotify's
/// IN_MOVED_TO means it is complete). Receivers treat inbox files as untrusted: size-limited, strictly decoded,
/// paths validated, anything else deleted with a logged error.
struct CoordinationMessage: Codable, Sendable {
  /// `openURL` asks a process's URL handler to open `url` (URLOpening.swift); its ack carries `opened`.
  enum Kind: String, Codable, Sendable { case prepare, finish, ack, openURL }

  static let formatVersion = 1
  static let maxBytes = 1 << 20
  static let maxEvents = 65_536

  var version: Int = CoordinationMessage.formatVersion
  /// `<sender pid>.<start>.<n>`; an ack repeats the id of its prepare.
  var id: String
  var kind: Kind
  var sender: ProcessName
  var purpose: String?
  /// The accessed item.
  var item: String
  var needsAck: Bool
  /// A write (its inotify events are the coordinator's, not an outside tool's).
  var isWrite: Bool = false
  var events: [PresenterEvent]
  /// Ack only: errors presenters passed to their completion handlers.
  var failures: [String]?
  /// `openURL` only: the URL to open.
  var url: String?
  /// Ack of an `openURL` only: what the handler answered.
  var opened: Bool?

  var fileName: String { "\(id).\(kind.rawValue)" }

  static func decode(_ bytes: [UInt8], fileName: String) throws(GroupContainerError) -> CoordinationMessage {
    guard bytes.count <= maxBytes else { throw .corruptFile(fileName, reason: "message over \(maxBytes) bytes") }
    let message: CoordinationMessage
    do { message = try JSONDecoder().decode(CoordinationMessage.self, from: Data(bytes)) } catch {
      throw .corruptFile(fileName, reason: "message is not valid JSON of the expected shape")
    }
    guard message.version == formatVersion else {
      throw .corruptFile(fileName, reason: "message version \(message.version) is not \(formatVersion)")
    }
    // An ack repeats the id of the prepare it answers, which names the prepare's sender.
    let idParts = message.id.split(separator: ".", omittingEmptySubsequences: false)
    guard message.fileName == fileName, idParts.count == 3,
      ProcessName(message.id.dropLast(idParts[2].count + 1)) != nil, UInt64(idParts[2]) != nil,
      message.kind == .ack || message.id.hasPrefix("\(message.sender).")
    else {
      throw .corruptFile(fileName, reason: "message id '\(message.id)' does not match its file and sender")
    }
    guard message.events.count <= maxEvents, (message.failures?.count ?? 0) <= maxEvents else {
      throw .corruptFile(fileName, reason: "message has too many entries")
    }
    if !message.item.isEmpty { _ = try ContainerPath(message.item) }
    if message.kind == .openURL {
      guard let url = message.url else { throw .corruptFile(fileName, reason: "an openURL message without a URL") }
      do { _ = try OpenURLRule.validate(url) } catch { throw .corruptFile(fileName, reason: error.description) }
    }
    for event in message.events {
      for path in [event.path, event.newPath].compactMap({ $0 }) where !path.isEmpty { _ = try ContainerPath(path) }
      guard event.presenter.split(separator: ".").count == 3 else {
        throw .corruptFile(fileName, reason: "message names an invalid presenter '\(event.presenter)'")
      }
      if message.kind == .prepare && !event.kind.isBefore || message.kind == .finish && event.kind.isBefore {
        throw .corruptFile(fileName, reason: "\(event.kind.rawValue) does not belong in a \(message.kind.rawValue)")
      }
    }
    return message
  }

  func encoded() -> [UInt8] { Array((try? JSONEncoder().encode(self)) ?? Data()) }
}

/// Sends messages, receives this process's inbox, and matches acks to waiting senders.
final class Messenger: @unchecked Sendable {  // `acks` is guarded by `condition`; the rest is immutable
  private let space: CoordinationSpace
  private let sequence = Atomic<UInt64>(0)
  private let condition = NSCondition()
  private var acks: [String: CoordinationMessage] = [:]
  /// Ids nobody waits for any more (timed out): their late acks are dropped instead of kept forever.
  private var abandoned: Set<String> = []
  private var inbox: String { space.inbox(of: space.me) }

  init(space: CoordinationSpace) { self.space = space }

  func start() throws(FileSystemError) {
    _ = try Watcher.shared.watch(inbox) { [self] event in
      guard event.mask & (Watcher.movedTo | Watcher.closeWrite) != 0, !event.name.hasPrefix(".") else { return }
      receive(fileNamed: event.name)
    }
    _ = Watcher.shared.onOverflow { [self] in scanInbox() }
    _ = Watcher.shared.onTick { [self] in space.host.checkSenders() }
    scanInbox()
  }

  func nextMessageID() -> String {
    "\(space.me).\(sequence.add(1, ordering: .relaxed).newValue)"
  }

  /// Publishes `message` in `process`'s inbox. A missing inbox means the process is gone.
  func send(_ message: CoordinationMessage, to process: ProcessName) throws(FileSystemError) {
    try AtomicReplace.write(
      message.encoded(), to: space.inbox(of: process) + "/" + message.fileName, mode: space.fileMode)
  }

  /// Everything in the inbox, oldest messages first (after an overflow the kernel may have dropped their events).
  func scanInbox() {
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
      bytes = try FileSystem.readFile(path, limit: CoordinationMessage.maxBytes)
    } catch {
      if error.errno != .noSuchFileOrDirectory {  // gone: already handled by a scan
        CoordinationSpace.logger.error("dropping unreadable inbox entry '\(path)': \(error)")
        try? FileSystem.removeTree(path)
      }
      return
    }
    try? FileSystem.removeFile(path)
    let message: CoordinationMessage
    do { message = try CoordinationMessage.decode(bytes, fileName: name) } catch {
      CoordinationSpace.logger.error("dropping inbox entry '\(path)': \(error)")
      return
    }
    if message.kind == .openURL {
      space.urlHandlers.receive(message)
    } else if message.kind == .ack {
      condition.lock()
      if abandoned.remove(message.id) == nil { acks[message.id] = message }
      condition.broadcast()
      condition.unlock()
    } else {
      space.host.receive(message)
    }
  }

  struct AckOutcome {
    var failures: [(ProcessName, String)] = []
    var timedOut: [ProcessName] = []
    var acks: [String: CoordinationMessage] = [:]
  }

  /// Waits for the acks of `pending` (message id → target process) until `timeout`, skipping targets that die.
  func awaitAcks(
    _ pending: [String: ProcessName], timeout: Duration, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> AckOutcome {
    var outcome = AckOutcome()
    var waiting = pending
    let deadline =
      MonotonicClock.nanoseconds() + UInt64(timeout.components.seconds) * 1_000_000_000
      + UInt64(timeout.components.attoseconds / 1_000_000_000)
    var nextLivenessCheck = MonotonicClock.nanoseconds() + 20_000_000
    condition.lock()
    defer { condition.unlock() }
    while !waiting.isEmpty {
      for id in Array(waiting.keys) {
        if let ack = acks.removeValue(forKey: id) {
          outcome.acks[id] = ack
          outcome.failures += (ack.failures ?? []).map { (waiting[id]!, $0) }
          waiting[id] = nil
        }
      }
      if waiting.isEmpty { break }
      if isCancelled() { throw .cancelled }
      let now = MonotonicClock.nanoseconds()
      if now >= deadline {
        outcome.timedOut = Array(Set(waiting.values))
        break
      }
      if now >= nextLivenessCheck {
        condition.unlock()
        let dead = Set(waiting.values).filter { !space.isAlive($0) }
        condition.lock()
        waiting = waiting.filter { !dead.contains($0.value) }
        nextLivenessCheck = MonotonicClock.nanoseconds() + 20_000_000
        continue
      }
      let wake = min(deadline, nextLivenessCheck) - now
      _ = condition.wait(until: Date(timeIntervalSinceNow: Double(wake) / 1e9))
    }
    return outcome
  }

  /// Forgets acks that arrive after their sender stopped waiting.
  func discardAcks(_ ids: some Sequence<String>) {
    condition.lock()
    if abandoned.count > 4096 { abandoned.removeAll() }  // bounded: a dead process never acks
    for id in ids where acks.removeValue(forKey: id) == nil { abandoned.insert(id) }
    condition.unlock()
  }
}
