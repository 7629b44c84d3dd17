import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// A process's ack board: `<inbox>/.acks`, a `MappedCounters` file its owner creates and sizes; its words are
/// declared here once (a test checks `layout`). Senders of prepares never create one, they only map an existing one.
enum AckBoard {
  static let fileName = ".acks"
  /// A `ChangeSignal` the owner waits on (it listens for good: `listenForever`), posted by whoever stores an ack.
  static let sequence = 0, listeners = 1
  /// The slots, each lent to one pending prepare at a time (`Messenger.reserveAck`): the answerer stores the
  /// prepare's token there. Every other word of the file: as many prepares in flight as that, then acks are files.
  static let slots = 2..<MappedCounters.capacity

  static let layout = MappedLayout(
    file: CoordinationPaths.inbox + "/<p>/" + fileName,
    [("sequence", MappedLayout.word(sequence)), ("listeners", MappedLayout.word(listeners)), ("slots", slots)])
}
