import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// A process's ack board: a `MappedCounters` file of the pool `.coordination/acks/<n>`, held by one live process at a
/// time (`LOCK_EX`, taken by the first process that finds it free: `Messenger.openOwnBoard`) and linked into its inbox
/// as `<inbox>/.acks`; its words are declared here once (a test checks `layout`). Answerers of prepares never create
/// one, they only map an existing one, once per file: a board outlives its holder, so a new process mostly takes the
/// board a process before it held, and every presenter already has it mapped (with 64 presenter processes, mapping
/// each new writer's board was a tenth of their CPU); an answerer finds that mapping by the identity of the
/// sender's `.acks` (one `fstatat`) without opening it. A holder's tokens start at random: a late answer to the
/// previous holder's prepare matches none of them; and an answer is stored only into an empty slot (its lender
/// empties it), so such a late answer never overwrites an answer of the new holder's — the loser sends a file.
enum AckBoard {
  static let fileName = ".acks"
  /// Boards a pool may hold: live processes of one container past that keep a board of their own in their inbox.
  static let poolLimit = 4096
  /// A `ChangeSignal` the owner waits on (it listens for good: `listenForever`), posted by whoever stores an ack.
  static let sequence = 0, listeners = 1
  /// The slots, each lent to one pending prepare at a time (`Messenger.reserveAck`): the answerer stores the
  /// prepare's token there. Every other word of the file: as many prepares in flight as that, then acks are files.
  static let slots = 2..<MappedCounters.capacity

  static let layout = MappedLayout(
    file: CoordinationPaths.acks + "/<n>",
    [("sequence", MappedLayout.word(sequence)), ("listeners", MappedLayout.word(listeners)), ("slots", slots)])
}
