import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// How messages travel between processes (the message protocol's transport, MessageProtocol.swift), and the order
/// rule that lets two ways coexist.
///
/// **Datagrams.** Every process that watches its inbox binds a Unix datagram socket there, `<inbox>/.socket`.
/// Prepares and finishes — the messages of every coordinated access — go to it as one datagram each: a file per
/// message (create, write, rename, then on the other side an inotify event, open, read, close, unlink) was most
/// of a presenter handshake's kernel time, and on ext4 each new inode made it slower run after run. The socket is
/// served by the watcher thread, with inotify (`Watcher.watchReadable`), so a datagram and an inotify event are
/// handled on one thread.
///
/// **Files.** Everything else (acks with failures, `openURL`, requests) still goes as a file in the inbox, and so
/// does a prepare or finish when the receiver has no socket (no `/proc`, no `openat2`, a receiver without a
/// watcher), when it is larger than `maxDatagramBytes`, or when the receiver's queue stays full for
/// `fullQueueWaitMilliseconds` (a stopped process: the kernel queues only `net.unix.max_dgram_qlen` datagrams).
///
/// **Order.** A process must receive one access's finish before the next access's prepare, and whatever a sender
/// sent before a change before that change's inotify event (the prepare of a write suppresses its events). Both
/// hold by two rules:
/// 1. The receiver's watcher thread reads every waiting datagram before it handles any inotify event — an inbox
///    file's or an item's (`Watcher.watchReadable`). A datagram sent before a file was published, or before an item
///    changed, is queued by the time that event is read.
/// 2. Once one prepare or finish from a sender to a receiver went as a file, every later one to that receiver goes
///    as a file too (`Peer.files`, never forgotten while the receiver lives): a datagram sent after a file could
///    overtake it.
// `buffer` is used on the watcher thread only; the rest is immutable or a Mutex.
final class MessageTransport: @unchecked Sendable {
  static let socketName = ".socket"
  /// The largest message sent as a datagram (the socket's send buffer holds ~208 KB; most messages are ~200 bytes).
  static let maxDatagramBytes = 65_536
  /// How long a sender waits for room in a full receiver queue before it sends that receiver files instead.
  static let fullQueueWaitMilliseconds: Int32 = 20
  /// Set to "1" in a process's environment, it binds no socket and takes every message as a file (as a process
  /// where the watcher cannot serve descriptors does). A test hook: read only in a build with the `TestHooks` trait.
  #if GROUPCONTAINER_TEST_HOOKS
    package static let filesOnlyVariable = "GROUP_CONTAINER_INBOX_FILES_ONLY"
    private static var filesOnly: Bool { Environment.value(filesOnlyVariable) == "1" }
  #else
    private static let filesOnly = false
  #endif

  private enum Peer {
    case socket(DatagramSocket)
    /// Its socket file (`O_PATH`), not connected yet: datagrams go by `sendto` from one socket of this process,
    /// `sent` so far. A new process mostly sends a receiver one prepare and one finish, for which a socket, a
    /// `connect` and a `close` per receiver were a fifth of its write's own CPU with 64 receivers; a receiver sent
    /// more than `connectAfter` datagrams gets a connected socket (no path lookup per datagram).
    case file(DescriptorBox, sent: Int)
    /// Files from now on (rule 2).
    case files

    func isSame(as other: Peer?) -> Bool {
      switch (self, other) {
      case (.socket(let a), .socket(let b)?): a === b
      case (.file(let a, _), .file(let b, _)?): a === b
      default: false
      }
    }
  }

  /// Datagrams a receiver gets through its socket file before this process connects a socket to it.
  static let connectAfter = 2

  private let space: MessagingSpace
  private let peers = Mutex<[ProcessName: Peer]>([:])
  /// Sends to the receivers not connected yet (`Peer.file`); made on first use.
  private let unconnected = Mutex<DatagramSocket?>(nil)
  /// This process's inbox socket and its watcher token; nil when it takes files only.
  private let inbox = Mutex<(socket: DatagramSocket, token: Watcher.Token)?>(nil)
  /// Sockets replaced by a new bind (the container made anew), drained until empty, then dropped.
  private let retired = Mutex<[ObjectIdentifier: Watcher.Token]>([:])
  private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maxDatagramBytes, alignment: 16)
  /// Messages sent each way, for tests and benchmarks.
  let datagramsSent = Atomic<Int>(0)
  let filesSent = Atomic<Int>(0)
  /// Sockets connected to receivers (`Peer.file` turned `Peer.socket`), for tests.
  let socketsConnected = Atomic<Int>(0)

  init(space: MessagingSpace) { self.space = space }

  deinit { buffer.deallocate() }

  // MARK: Sending

  /// Sends `bytes` (a prepare or finish) to `process` as a datagram; false when it must go as a file — and from
  /// then on every prepare and finish to that process (rule 2).
  func send(_ bytes: [UInt8], to process: ProcessName) -> Bool {
    guard bytes.count <= Self.maxDatagramBytes else {
      return filesFromNowOn(process, "a message of \(bytes.count) bytes")
    }
    for attempt in 0..<2 {
      let peer = peers.withLock { peers -> Peer in
        switch peers[process] {
        case .file(let file, let sent)? where sent >= Self.connectAfter:
          let connected = Self.connect(file, process)
          socketsConnected.add(1, ordering: .relaxed)
          peers[process] = connected
          return connected
        case let known?:
          return known
        case nil:
          let found = open(process)
          if peers.count >= 256 { prune(&peers) }
          peers[process] = found
          return found
        }
      }
      do {
        switch peer {
        case .files:
          return false
        case .file(let file, let sent):
          if let sender = sharedSender(), try sender.send(bytes, toSocketFile: file.fd) {
            peers.withLock { if peer.isSame(as: $0[process]) { $0[process] = .file(file, sent: sent + 1) } }
            datagramsSent.add(1, ordering: .relaxed)
            return true
          }
          // Its queue is full (or this process has no socket to spare): a connected socket waits for room.
          peers.withLock { if peer.isSame(as: $0[process]) { $0[process] = .file(file, sent: Self.connectAfter) } }
          continue
        case .socket(let socket):
          if try socket.send(bytes, waitMilliseconds: Self.fullQueueWaitMilliseconds) {
            datagramsSent.add(1, ordering: .relaxed)
            return true
          }
          return filesFromNowOn(process, "its queue stayed full for \(Self.fullQueueWaitMilliseconds) ms")
        }
      } catch {
        // Nobody receives there any more: the process is gone, or it bound a new socket (the container made
        // anew; everything sent to the old one was received before it closed). Open its socket file again, once.
        let refused = [.connectionRefused, .brokenPipe, .socketNotConnected].contains(error.errno)
        guard refused, attempt == 0 else { return filesFromNowOn(process, "\(error)") }
        peers.withLock { if peer.isSame(as: $0[process]) { $0[process] = nil } }
      }
    }
    return false
  }

  /// Counts a message that went as a file.
  func sentFile() { filesSent.add(1, ordering: .relaxed) }

  private func filesFromNowOn(_ process: ProcessName, _ why: String) -> Bool {
    peers.withLock { $0[process] = .files }
    MessagingSpace.logger.debug("messages to process \(process) go as files from now on: \(why)")
    return false
  }

  /// `process`'s inbox socket file, opened beneath the container without following any link; files when there is
  /// none.
  private func open(_ process: ProcessName) -> Peer {
    do {
      return .file(
        DescriptorBox(try space.root.openSocketFile(CoordinationPaths.inbox(of: process) + "/" + Self.socketName)),
        sent: 0)
    } catch {
      MessagingSpace.logger.debug("process \(process) takes messages as files: \(error)")
      return .files
    }
  }

  /// A socket connected to the socket file `file` of `process`; files when that is not possible.
  private static func connect(_ file: DescriptorBox, _ process: ProcessName) -> Peer {
    do { return .socket(try DatagramSocket.connect(to: file.fd)) } catch {
      MessagingSpace.logger.debug("process \(process) takes messages as files: \(error)")
      return .files
    }
  }

  /// The socket that sends to receivers not connected yet; nil when none can be made (they are connected then).
  private func sharedSender() -> DatagramSocket? {
    unconnected.withLock { socket in
      if socket == nil { socket = try? DatagramSocket.unconnected() }
      return socket
    }
  }

  /// Bounds the table (called with it locked): forgets dead processes, then, if still full, the sockets (connected
  /// again when needed; a `.files` of a live process is never forgotten: rule 2).
  private func prune(_ peers: inout [ProcessName: Peer]) {
    peers = peers.filter { space.isAlive($0.key) }
    if peers.count >= 256 { peers = peers.filter { if case .files = $0.value { true } else { false } } }
  }

  // MARK: Receiving

  /// Binds this process's inbox socket in `directory` (its inbox) and has the watcher thread serve it: `deliver`
  /// gets each datagram's bytes there. A socket bound before (the container was made anew) is shut down — senders
  /// then connect again — and drained of what it already holds. Without a watcher that serves descriptors, or when
  /// binding fails, the process takes files.
  func bind(in directory: borrowing SystemFD, deliver: @escaping @Sendable (UnsafeBufferPointer<UInt8>) -> Void) {
    guard Watcher.shared.servesDescriptors, !Self.filesOnly else { return }
    let socket: DatagramSocket?
    do { socket = try DatagramSocket.bind(Self.socketName, in: directory, mode: space.fileMode) } catch {
      MessagingSpace.logger.warning("this process takes coordination messages as files only: \(error)")
      socket = nil
    }
    let current = socket.map { socket in
      (socket, Watcher.shared.watchReadable(socket.fd) { [self] in drain(socket, to: deliver) })
    }
    guard
      let old = inbox.withLock({ inbox in
        defer { inbox = current }; return inbox
      })
    else { return }
    // Shut down first (no datagram arrives after: senders get EPIPE and connect again), then retired: the next
    // drain empties it and lets it go (a shut-down socket is always readable, so that drain comes).
    old.socket.shutDown()
    retired.withLock { $0[ObjectIdentifier(old.socket)] = old.token }
  }

  /// Hands every datagram waiting on `socket` to `deliver` (on the watcher thread), in place in the receive
  /// buffer. All of them before anything else: the order rules above count on it. An empty one is dropped (only
  /// a stranger sends one); a shut-down socket's `recv` says EAGAIN once empty, so the loop ends.
  private func drain(_ socket: DatagramSocket, to deliver: @Sendable (UnsafeBufferPointer<UInt8>) -> Void) {
    while let count = socket.receive(into: buffer) {
      guard count > 0 else { continue }
      guard count <= buffer.count else {
        MessagingSpace.logger.error("dropping a datagram of \(count) bytes from \(socket.path): over the limit")
        continue
      }
      deliver(UnsafeRawBufferPointer(rebasing: buffer[..<count]).assumingMemoryBound(to: UInt8.self))
    }
    if let token = retired.withLock({ $0.removeValue(forKey: ObjectIdentifier(socket)) }) {
      Watcher.shared.cancel(token)
    }
  }
}
