import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// This process's share of one container's messaging: its name, its liveness lock, its inbox and messenger, the
/// liveness rule for the others (Liveness.swift) — and the parts that registered with it.
///
/// Messaging knows nothing of what the messages are for. The parts above it register what they own (the space
/// that opens the container does, when it starts, and the launching module on first use):
/// - a **receiver per message kind** (`receive(_:_:)`): the presenter host takes prepares and finishes, the URL
///   handlers take `openURL` and `request`; acks stay the messenger's own;
/// - a **cleanup per dead process** (`onReap`): presenter records, handler markers, temp-file sweeps;
/// - what to do on each **liveness tick** and when the **inbox was removed** under this process (the container
///   deleted): the presenter host's checks and its recreation of the container.
package final class MessagingSpace: @unchecked Sendable {  // all `let` but `messenger` (set once in init); parts: Mutex
  package static let logger = Logger(label: "GroupContainer.FileCoordination")

  /// A received message and whether it came as a datagram of the inbox socket. Runs on the watcher thread.
  package typealias Receiver = @Sendable (CoordinationMessage, _ asDatagram: Bool) -> Void

  package let containerPath: String
  /// The container directory, open for the process's life: every container file is reached beneath it.
  package let root: ContainerDirectory
  /// `<container>/.coordination`.
  package let directory: String
  package let fileMode: mode_t
  package let directoryMode: mode_t
  package let me = ProcessName.current
  package private(set) var messenger: Messenger!

  private struct Parts {
    var receivers: [CoordinationMessage.Kind: Receiver] = [:]
    var reapers: [@Sendable (ProcessName) -> Void] = []
    var ticks: [@Sendable () -> Void] = []
    var inboxRemoved: [@Sendable () -> Void] = []
  }
  private let parts = Mutex(Parts())
  /// Held `LOCK_SH` for the life of the process: whoever gets `LOCK_EX` on it knows we are dead.
  private let processLock: SystemFD

  package var inboxDirectory: String { directory + "/" + CoordinationPaths.Name.inbox }
  package var processesDirectory: String { directory + "/" + CoordinationPaths.Name.processes }
  package func inbox(of process: ProcessName) -> String { inboxDirectory + "/\(process)" }
  package func processLockPath(_ process: ProcessName) -> String { processesDirectory + "/\(process).lock" }

  /// Publishes this process's liveness lock and makes its inbox in the container at `root`, whose
  /// `CoordinationPaths.spaceDirectories` exist, and maps its ack board. Nothing is received before `start`.
  package init(root: ContainerDirectory, fileMode: mode_t, directoryMode: mode_t) throws(FileSystemError) {
    self.root = root
    containerPath = root.path
    directory = root.path + "/" + CoordinationPaths.directory
    self.fileMode = fileMode
    self.directoryMode = directoryMode
    processLock = try Self.publishLivenessLock(of: me, root: root, mode: fileMode)
    // The inbox comes after the lock: a reaper that finds an inbox always finds its owner's lock file.
    try root.makeDirectory(CoordinationPaths.inbox(of: me), mode: directoryMode)
    messenger = try Messenger(space: self)
  }

  /// Starts receiving: call once every part registered its receivers.
  package func start() throws(FileSystemError) { try messenger.start() }

  /// Has `receiver` take every received message of `kinds` (one receiver per kind; a later one replaces it).
  package func receive(_ kinds: [CoordinationMessage.Kind], _ receiver: @escaping Receiver) {
    parts.withLock { parts in for kind in kinds { parts.receivers[kind] = receiver } }
  }

  /// The receiver of `kind`, nil when no part took it (the message is dropped).
  package func receiver(of kind: CoordinationMessage.Kind) -> Receiver? {
    parts.withLock { $0.receivers[kind] }
  }

  /// Has `cleanup` run whenever a dead process is reaped (Liveness.swift): it removes what the part keeps for it.
  package func onReap(_ cleanup: @escaping @Sendable (ProcessName) -> Void) {
    parts.withLock { $0.reapers.append(cleanup) }
  }

  func reapers() -> [@Sendable (ProcessName) -> Void] { parts.withLock { $0.reapers } }

  /// Has `body` run on every liveness tick of the watcher thread (`Messenger.start`).
  package func onTick(_ body: @escaping @Sendable () -> Void) { parts.withLock { $0.ticks.append(body) } }

  /// Has `body` run when this process's inbox was removed (the container deleted under it).
  package func onInboxRemoved(_ body: @escaping @Sendable () -> Void) {
    parts.withLock { $0.inboxRemoved.append(body) }
  }

  func tick() { for body in parts.withLock({ $0.ticks }) { body() } }

  func inboxWasRemoved() { for body in parts.withLock({ $0.inboxRemoved }) { body() } }

  /// Publishes `process`'s liveness lock, held `LOCK_SH`, in `.coordination/processes` (also again after the
  /// container was removed: PresenterHost). Only once it is held: a half-made file must never look like a dead
  /// process.
  package static func publishLivenessLock(
    of process: ProcessName, root: ContainerDirectory, mode: mode_t
  ) throws(FileSystemError) -> SystemFD {
    let processes = try root.openDirectory(CoordinationPaths.processes)
    let temp = try AtomicReplace.createTemporary(in: processes, for: "\(process).lock", mode: mode)
    do {
      try temp.fd.writeAll(livenessMarker)
      try temp.fd.lock(.shared)
      try processes.rename(temp.name, to: "\(process).lock")
    } catch {
      try? processes.removeFile(temp.name)
      throw error  // `temp` closes as it goes
    }
    return temp.takeDescriptor()
  }

  package func publishLivenessLock() throws(FileSystemError) -> SystemFD {
    try Self.publishLivenessLock(of: me, root: root, mode: fileMode)
  }
}
