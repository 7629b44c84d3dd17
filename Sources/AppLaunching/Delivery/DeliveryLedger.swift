import Foundation
import GroupContainerCore
import Messaging
import SystemLayer

/// The at-most-once rule of requests (app intents): a delivery id is performed at most once in a container.
///
/// The sender gives each request a delivery id and keeps it when it delivers again (its receiver died before
/// answering, and was launched again). Before running its handler, the receiver **claims** the id: it creates
/// `.coordination/deliveries/<id>` with `O_EXCL` — one creator wins, in any process — and afterwards writes the
/// reply into it (atomic replace). A later delivery of the same id finds the file: a reply there is sent back
/// without running the handler again (the caller sees exactly one perform), an empty file means the claimer died
/// while performing, and the answer is "interrupted", never a second perform.
///
/// *Why at most once and not at least once*: an intent such as "like" or "add a goal" is not idempotent, and the
/// host cannot tell how far a dead process got. The caller learns that the outcome is unknown and decides.
///
/// Records older than a day are removed when a new id is claimed (a retry comes within seconds).
struct DeliveryLedger {
  let space: MessagingSpace

  /// What a claim found.
  enum Claim: Equatable {
    /// This process performs the delivery now.
    case claimed
    /// It was performed: its recorded reply.
    case performed([UInt8])
    /// It was claimed by a process that has not replied (it died, or still performs it).
    case interrupted
  }

  static let maxReplyBytes = 1 << 20
  static let maxAgeNanoseconds: Int64 = 24 * 3600 * 1_000_000_000

  private var directory: String { CoordinationPaths.deliveries }

  /// Claims `id` for this process; see the type's discussion.
  func claim(_ id: String) -> Claim {
    try? space.root.makeDirectory(directory, mode: space.directoryMode)
    do {
      let file = try space.root.openFile(directory + "/" + id, [.writeOnly, .exclusiveCreate], mode: space.fileMode)
      file.close()
      sweep()
      return .claimed
    } catch {
      guard error.errno == .fileExists else {
        // No ledger, no perform: refusing is the at-most-once side of an unknown.
        MessagingSpace.logger.error("cannot claim delivery \(id): \(error); not performing it")
        return .interrupted
      }
    }
    guard let (bytes, _) = try? space.root.readFile(directory + "/" + id, limit: Self.maxReplyBytes), !bytes.isEmpty
    else { return .interrupted }
    return .performed(bytes)
  }

  /// Records the reply of a claimed delivery.
  func record(_ reply: [UInt8], for id: String) {
    do { try space.root.replaceFile(directory + "/" + id, with: reply, mode: space.fileMode) } catch {
      MessagingSpace.logger.error("cannot record the reply of delivery \(id): \(error)")
    }
  }

  /// Removes records older than a day.
  private func sweep() {
    guard let dir = try? space.root.openDirectory(directory) else { return }
    let now = RealtimeClock.nanoseconds()
    for entry in (try? dir.entries()) ?? [] where !entry.isDirectory {
      guard let st = try? dir.status(of: entry.name), now - st.modificationNanoseconds > Self.maxAgeNanoseconds
      else { continue }
      try? dir.removeFile(entry.name)
    }
  }
}
