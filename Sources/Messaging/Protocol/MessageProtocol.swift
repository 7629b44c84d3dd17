import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The message protocol, in one place.
///
/// A coordinated access talks to every process that presents an affected item through that process's inbox,
/// `.coordination/inbox/<pid>.<start>/`: prepares and finishes as datagrams on its socket, everything else as files
/// (MessageTransport.swift says how, and the order rules that let both coexist):
///
/// 1. **prepare** (`<id>.prepare`), before the accessor runs: the "before" callbacks (relinquish, save,
///    accommodate deletion) for that process's presenters. It also tells the process that a coordinated write
///    of the item is under way, so inotify events it causes are not reported a second time as uncoordinated (and
///    its watcher need not wake for them: `Watcher.beginQuiet`).
///    When it carries callbacks the receiver answers with **ack** (`<id>.ack` in the sender's inbox) once every
///    callback called its completion handler, listing any errors the presenters gave. The sender checks a
///    receiver's liveness before a prepare only when the prepare cannot go as a datagram: a dead receiver's socket
///    refuses, and a dead one is reaped and sent nothing (`Messenger.sendUnlessDead`).
///    An ack that carries nothing (no presenter failed) skips the file: the prepare names a slot of the sender's
///    **ack board** (`.acks` in its inbox, a shared mapping) and a token; the receiver stores the token in the slot
///    and posts the board's futex, which wakes the waiting thread itself — two thread hops and five file system
///    calls fewer than an ack file, whose path (inotify → watcher thread → waiting thread) stays for acks with
///    failures and for `openURL` answers.
/// 2. The sender waits for all acks — bounded by its timeout, and never for a dead process (liveness is checked
///    while waiting) — then takes its locks and runs the accessor. It spins briefly on its board before sleeping
///    on the futex: an answer within the spin costs no wake-up at all.
/// 3. **finish** (`<id>.finish`), after the accessor and after the locks are released: the "after" callbacks
///    (didChange, didMove, subitem events); then the receiver runs the reacquirers its presenters handed over
///    for this id. If the sender dies first, the receiver notices on its next liveness tick and runs them anyway.
///    Finishes leave from the sender's outbox queue, so the coordinated call returns without waiting for them (as
///    Apple's presenters, ours hear "after" callbacks asynchronously); any later message of the sender waits until
///    the outbox is empty, so a process always receives one access's finish before the next access's prepare, and
///    the outbox is emptied when the process exits normally.
///
/// Every message is JSON: one datagram, or a file written to a temp name and renamed into the inbox (atomic
/// publish: inotify's IN_MOVED_TO means it is complete). Receivers treat both as untrusted: size-limited, strictly
/// decoded, paths validated, anything else dropped (a file deleted) with a logged error.
package struct CoordinationMessage: Codable, Sendable {
  /// `openURL` asks a process's URL handler to open `url` (URLOpening.swift); its ack carries `opened`.
  /// `request` asks its request handler (app intents) to answer `request`; its ack carries `requestAnswer`.
  package enum Kind: String, Codable, Sendable, CaseIterable { case prepare, finish, ack, openURL, request }

  package static let formatVersion = 1
  package static let maxBytes = 1 << 20
  package static let maxEvents = 65_536

  package var version: Int = CoordinationMessage.formatVersion
  /// `<sender pid>.<start>.<n>`; an ack repeats the id of its prepare.
  package var id: String
  package var kind: Kind
  package var sender: ProcessName
  package var purpose: String?
  /// The accessed item.
  package var item: String
  package var needsAck: Bool
  /// A write (its inotify events are the coordinator's, not an outside tool's).
  package var isWrite: Bool = false
  package var events: [PresenterEvent]
  /// Ack only: errors presenters passed to their completion handlers.
  package var failures: [String]?
  /// `openURL` only: the URL to open.
  package var url: String?
  /// Ack of an `openURL` only: what the handler answered.
  package var opened: Bool?
  /// `request`, and `openURL` of a handed-over `file:` URL: the scheme whose handler it is for.
  package var scheme: String?
  /// `request` only: the request's bytes (their format is the sender's and receiver's business).
  package var request: Data?
  /// `request` only: the delivery's id, the same on a retry (DeliveryLedger.swift).
  package var deliveryID: String?
  /// Ack of a `request` only: what the receiver answered.
  package var requestAnswer: RequestAnswerRecord?
  /// Prepare only: where on the sender's ack board to store `ackToken` instead of sending an ack file.
  package var ackSlot: Int?
  package var ackToken: UInt64?

  package init(
    id: String, kind: Kind, sender: ProcessName, purpose: String? = nil, item: String, needsAck: Bool,
    isWrite: Bool = false, events: [PresenterEvent], failures: [String]? = nil
  ) {
    self.id = id
    self.kind = kind
    self.sender = sender
    self.purpose = purpose
    self.item = item
    self.needsAck = needsAck
    self.isWrite = isWrite
    self.events = events
    self.failures = failures
  }

  package var fileName: String { "\(id).\(kind.rawValue)" }

  /// The message in `bytes`, validated; `fileName` is the inbox file it came in (nil: a datagram of the inbox
  /// socket, MessageTransport.swift), which must be the message's own.
  package static func decode(
    _ bytes: [UInt8], fileName inbox: String?
  ) throws(GroupContainerError) -> CoordinationMessage {
    let decoded = bytes.withUnsafeBufferPointer { bytes in
      Result { () throws(GroupContainerError) in
        try decode(bytes, fileName: inbox)
      }
    }
    return try decoded.get()
  }

  /// `decode(_:fileName:)` on bytes in place (a datagram, in the receive buffer).
  package static func decode(
    _ bytes: UnsafeBufferPointer<UInt8>, fileName inbox: String?
  ) throws(GroupContainerError) -> CoordinationMessage {
    let fileName = inbox ?? "a datagram"  // what errors name
    guard bytes.count <= maxBytes else { throw .corruptFile(fileName, reason: "message over \(maxBytes) bytes") }
    let message: CoordinationMessage
    do {
      message =
        try MessageJSON.decode(bytes) ?? UntrustedJSON.decode(CoordinationMessage.self, from: bytes)
    } catch {
      throw .corruptFile(fileName, reason: "message is not valid JSON of the expected shape")
    }
    guard message.version == formatVersion else {
      throw .corruptFile(fileName, reason: "message version \(message.version) is not \(formatVersion)")
    }
    // An id is `<sender>.<number>`; an ack repeats the id of the prepare it answers, which names that prepare's
    // sender.
    guard inbox == nil || message.fileName == inbox, let idSender = Self.sender(inID: message.id),
      message.kind == .ack || idSender == message.sender
    else {
      throw .corruptFile(fileName, reason: "message id '\(message.id)' does not match its file and sender")
    }
    guard message.events.count <= maxEvents, (message.failures?.count ?? 0) <= maxEvents else {
      throw .corruptFile(fileName, reason: "message has too many entries")
    }
    if let slot = message.ackSlot {
      guard AckBoard.slots.contains(slot), message.ackToken ?? 0 != 0 else {
        throw .corruptFile(fileName, reason: "ack slot \(slot) or its token is out of range")
      }
    }
    if !message.item.isEmpty { try ContainerPath.check(message.item) }
    if message.kind == .openURL {
      guard let url = message.url else { throw .corruptFile(fileName, reason: "an openURL message without a URL") }
      do { _ = try OpenURLRule.validate(url) } catch { throw .corruptFile(fileName, reason: error.description) }
    }
    if let scheme = message.scheme {
      do { _ = try OpenURLRule.validate(scheme: scheme) } catch {
        throw .corruptFile(fileName, reason: error.description)
      }
    }
    if message.kind == .request {
      guard message.scheme != nil, message.request != nil, let delivery = message.deliveryID,
        DeliveryID.isValid(delivery)
      else {
        throw .corruptFile(fileName, reason: "a request without a scheme, a body or a valid delivery id")
      }
    }
    for event in message.events {
      if let path = event.path, !path.isEmpty { try ContainerPath.check(path) }
      if let path = event.newPath, !path.isEmpty { try ContainerPath.check(path) }
      guard Self.sender(inID: event.presenter) != nil else {
        throw .corruptFile(fileName, reason: "message names an invalid presenter '\(event.presenter)'")
      }
      if message.kind == .prepare && !event.kind.isBefore || message.kind == .finish && event.kind.isBefore {
        throw .corruptFile(fileName, reason: "\(event.kind.rawValue) does not belong in a \(message.kind.rawValue)")
      }
    }
    return message
  }

  /// The process named by an id of the form `<pid>.<start>.<number>` (a message's, or a presenter's), or nil when
  /// `id` is not of that form.
  package static func sender(inID id: String) -> ProcessName? {
    // On the bytes: every received message names one id, and a prepare one more per event (String views,
    // `Substring`s and `UInt64(_:)` were a tenth of decoding one).
    var id = id
    return id.withUTF8 { bytes -> ProcessName? in
      guard let dot = bytes.lastIndex(of: UInt8(ascii: ".")),
        DecimalDigits.value(of: UnsafeBufferPointer(rebasing: bytes[(dot + 1)...])) != nil
      else { return nil }
      return ProcessName(utf8: UnsafeBufferPointer(rebasing: bytes[..<dot]))
    }
  }

  package func encoded() -> [UInt8] {
    MessageJSON.encode(self) ?? Array((try? JSONEncoder().encode(self)) ?? Data())
  }
}
