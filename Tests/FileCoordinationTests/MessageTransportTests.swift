import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// The message transport (MessageTransport.swift) between real processes: prepares and finishes as datagrams on
/// the receiver's inbox socket, files when the receiver has none or its queue stays full, and the order rules that
/// let both coexist. The writer is this process; presenters are gc-test-helper `.present` children, which print
/// `<event> <coordinated|uncoordinated> <pid>` per callback.
///
/// Mutants these tests were watched failing with (keep the list current):
/// - the watcher does not read the socket before an inotify event (`for readable in readables` removed from
///   `Watcher.run`): `aFinishOnTheSocketNeverLetsItsWritesOwnEventsThrough` (the prepare comes after the write's
///   event: "didChange uncoordinated");
/// - a finish ends its write's suppression at once (no `finishedWrites` in PresenterHost.isSuppressed):
///   `aFinishOnTheSocketNeverLetsItsWritesOwnEventsThrough`;
/// - a sender goes back to datagrams after a file (`filesFromNowOn` stores nothing):
///   `aStoppedReceiverGetsFilesAndHearsEverythingInOrder`;
/// - the sender opens the socket file by path, following links: `aSwappedSocketFileIsNeverFollowed` (the link case:
///   six messages reach the stranger's socket, the presenter hears nothing);
/// - datagrams are never sent (every message taken as over the size limit): `preparesAndFinishesTravelAsDatagrams`,
///   `aStoppedReceiverGetsFilesAndHearsEverythingInOrder`;
/// - a prepare to a process whose socket refuses goes as a file without a liveness check (`unlessDead` ignored in
///   `Messenger.write`): `aKilledPresenterIsFoundDeadWhenItsSocketRefusesAndIsSentNothing`;
/// - a finish read after `poll` ends its suppression without looking at the kernel's queue (no `queuedBytes()` in
///   `Watcher.afterQueuedEvents`): `finishesReadBesideTheirWritesQueuedEventsStillSuppressThem`;
/// - the watcher runs a finish's `afterQueuedEvents` body once its library is drained, without asking the kernel
///   whether events are still queued (no `queuedBytes()` in `Watcher.queueSeenEmpty`):
///   `preparesAndFinishesTravelAsDatagrams`, `strangeDatagramsAreDroppedAndThePresenterGoesOn` ("uncoordinated").
/// - a new writer's board not looked for among those mapped (`Messenger.postAck` opens the sender's `.acks` for
///   each new writer): `aPresenterFindsANewWritersBoardWithoutOpeningIt` (3 boards opened, not 1);
/// - a receiver connected at once, or never (`connectAfter` 0 or unbounded):
///   `aReceiverGetsItsFirstDatagramsThroughItsSocketFileThenAConnectedSocket`;
/// - a full queue met by `sendto` taken as sent: `aFullQueueMetByTheFirstDatagramIsWaitedOnThenFiles` (the first
///   prepare lost);
@Suite(.runSlot(.minutes(5))) struct MessageTransportTests {
  let group = "group.com.example.transport"

  /// A container, a presenter child of `Documents/<name>`, and this process's transport counters at the start.
  private struct Setup {
    let root: TestRoot
    let container: GroupContainer
    let url: URL
    let presenter: Child
    let transport: MessageTransport
    /// The presenter child's process name (`<pid>.<start>`), which names its inbox.
    let presenterProcess: ProcessName
    private let start: (datagrams: Int, files: Int)

    init(_ group: String, _ name: String, stallMS: UInt64 = 0, environment: [String: String] = [:]) async throws {
      root = try TestRoot()
      container = try root.container(group)
      url = container.documentsURL.appendingPathComponent(name)
      presenter = try Child(
        .present(item: "Documents/" + name, stallMS: stallMS), root: root.path, group: group, environment: environment)
      await presenter.line { $0.hasPrefix("ready") }
      let pid = presenter.pid
      presenterProcess = ProcessName(pid: pid, startTime: try #require(CurrentProcess.startTime(of: pid)))
      transport = try CoordinationSpace.locate(url).0.messenger.transport
      start = (transport.datagramsSent.load(ordering: .relaxed), transport.filesSent.load(ordering: .relaxed))
    }

    /// Messages this process sent since the start, each way.
    var sent: (datagrams: Int, files: Int) {
      (
        transport.datagramsSent.load(ordering: .relaxed) - start.datagrams,
        transport.filesSent.load(ordering: .relaxed) - start.files
      )
    }

    /// Stops the presenter (SIGSTOP), makes `count` writes that wait 100 ms for it, and lets it run again: what
    /// they sent waits in its socket and inbox. Returns the coordinator, for writes that follow.
    func writeWhileStopped(_ count: Int) throws -> FileCoordinator {
      presenter.process.signal(SIGSTOP)
      let coordinator = FileCoordinator()
      coordinator.presenterTimeout = .milliseconds(100)
      try write(count, with: coordinator)
      presenter.process.signal(SIGCONT)
      return coordinator
    }

    func write(_ count: Int, from first: Int = 0, with coordinator: FileCoordinator = FileCoordinator()) throws {
      for i in first..<(first + count) {
        try coordinator.coordinate(writingItemAt: url) { try container.write(Data("\(i)".utf8), to: $0) }
      }
    }
  }

  /// The events of coordinated callbacks, in the order the presenter printed them.
  private func coordinatedEvents(_ presenter: Child) -> [String] {
    presenter.output.filter { $0.hasSuffix(" coordinated \(getpid())") }.map { String($0.prefix { $0 != " " }) }
  }

  /// What the message order decides: each write's relinquish (its prepare) before its didChange (its finish), and
  /// that before the next write's relinquish; and one reacquire per write. (Where a reacquire falls is the
  /// presenter's queue's business: one handed over after its finish arrived runs when handed over.)
  private func expectInOrder(_ presenter: Child, writes: Int, sourceLocation: SourceLocation = #_sourceLocation) {
    let events = coordinatedEvents(presenter)
    #expect(
      events.filter { $0 != "reacquire" }
        == Array(repeating: ["relinquishToWriter", "didChange"], count: writes).flatMap { $0 },
      "\(presenter.output)", sourceLocation: sourceLocation)
    #expect(events.filter { $0 == "reacquire" }.count == writes, sourceLocation: sourceLocation)
    // A coordinated write's own inotify events are suppressed: no uncoordinated change. (Recorded as a known issue
    // from session 26 to 38; its likely cause, libinotifytools' name tree left out of order, was fixed in session 28,
    // and a known issue let a presenter that suppressed nothing pass.) Only an overflow's resync may say so.
    #expect(
      !presenter.output.contains { $0.contains("uncoordinated") && !$0.contains("resync") }, "\(presenter.output)",
      sourceLocation: sourceLocation)
  }

  /// Waits until the presenter printed `count` reacquires (each write's last callback), then until it handled
  /// everything queued for it by then: anything wrong that comes late (a callback twice, an uncoordinated one) is
  /// in its output before "drained" (a pause of 0.3 s was not always long enough on a busy machine).
  private func waitForReacquires(_ presenter: Child, _ count: Int, root: TestRoot) async {
    await presenter.line() { _ in
      coordinatedEvents(presenter).filter { $0 == "reacquire" }.count >= count
    }
    await presenter.drained(root: root.path)
  }

  @Test func preparesAndFinishesTravelAsDatagrams() async throws {
    let setup = try await Setup(group, "d.txt")
    let coordinator = FileCoordinator()
    coordinator.presenterTimeoutPolicy = .fail
    try setup.write(20, with: coordinator)
    await waitForReacquires(setup.presenter, 20, root: setup.root)
    expectInOrder(setup.presenter, writes: 20)
    // A prepare and a finish per write. The sender counts after the send, and a finish may go after the write
    // returned (the outbox): the count is waited for.
    #expect(await eventually { setup.sent == (datagrams: 40, files: 0) }, "\(setup.sent)")
    // Nothing went through the inbox directory: only the socket and the ack board are there.
    let child = setup.presenterProcess
    let inbox = try CoordinationSpace.locate(setup.url).0.messaging.inbox(of: child)
    #expect(
      Set(try FileManager.default.contentsOfDirectory(atPath: inbox)) == [
        MessageTransport.socketName, AckBoard.fileName,
      ])
    setup.presenter.kill()
  }

  /// The presenter's watcher reads nothing until the write and its finish are done, so the finish datagram waits
  /// on the socket beside the write's own inotify events: the watcher reads the socket first (the prepare, then the
  /// finish), and the finished write must still suppress those events — reported once, as coordinated.
  /// A receiver's first datagrams go by `sendto` through its socket file (a new process mostly sends it a prepare
  /// and a finish: no socket of its own, no `connect`); from the third on, through a socket connected to it. Every
  /// one arrives, in order, none as a file. Mutants: connected at once (`connectAfter` 0: one socket after the first
  /// write); never connected (none after the second).
  @Test func aReceiverGetsItsFirstDatagramsThroughItsSocketFileThenAConnectedSocket() async throws {
    let setup = try await Setup(group, "first-datagrams.txt")
    defer { setup.presenter.kill() }
    let connected = setup.transport.socketsConnected.load(ordering: .relaxed)
    for round in 1...2 {
      try FileCoordinator().coordinate(writingItemAt: setup.url) { try Data("\(round)".utf8).write(to: $0) }
      #expect(
        await setup.presenter.line { _ in setup.presenter.output.filter { $0.hasPrefix("reacquire") }.count >= round }
          != nil, "write \(round) not answered: \(setup.presenter.output.suffix(5))")
      #expect(
        setup.transport.socketsConnected.load(ordering: .relaxed) - connected == round - 1,
        "sockets connected after write \(round)")
    }
    // Counted once `send` returns, which can be after the receiver answered.
    #expect(await eventually { setup.sent.datagrams == 4 }, "\(setup.sent)")
    #expect(setup.sent.files == 0, "\(setup.sent)")
    #expect(!setup.presenter.output.contains { $0.contains("uncoordinated") }, "\(setup.presenter.output)")
  }

  @Test(arguments: [false, true]) func aFinishOnTheSocketNeverLetsItsWritesOwnEventsThrough(filesOnly: Bool)
    async throws
  {
    let setup = try await Setup(
      group, "s.txt", stallMS: 600_000,
      environment: filesOnly ? [MessageTransport.filesOnlyVariable: "1"] : [:])
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .milliseconds(200)  // the stalled presenter answers nothing: go on without it
    try setup.write(3, with: coordinator)
    _ = FileManager.default.createFile(atPath: setup.root.path + "/resume-watcher", contents: nil)
    await waitForReacquires(setup.presenter, 3, root: setup.root)
    expectInOrder(setup.presenter, writes: 3)
    setup.presenter.kill()
  }

  /// A stopped receiver's queue fills (the kernel keeps ~10 datagrams): the writer then sends it files, and keeps
  /// to files, so once it runs again it hears every write once, in order — each write's prepare before its finish,
  /// each finish before the next prepare.
  @Test func aStoppedReceiverGetsFilesAndHearsEverythingInOrder() async throws {
    let setup = try await Setup(group, "stop.txt")
    let coordinator = try setup.writeWhileStopped(12)
    try setup.write(2, from: 12, with: coordinator)  // while it runs: they must not overtake the files
    await waitForReacquires(setup.presenter, 14, root: setup.root)
    expectInOrder(setup.presenter, writes: 14)
    #expect(setup.sent.datagrams > 0)
    #expect(setup.sent.files > 0)
    setup.presenter.kill()
  }

  /// A stopped receiver whose queue someone else filled: this process's very first datagram to it, by `sendto`,
  /// finds no room; the sender then connects and waits for room as a connected sender does (20 ms), and sends files
  /// from then on. Nothing is lost, nothing overtakes. Mutant: a full queue met by `sendto` taken as sent (the first
  /// prepare lost: its relinquish missing).
  @Test func aFullQueueMetByTheFirstDatagramIsWaitedOnThenFiles() async throws {
    let setup = try await Setup(group, "full-first.txt")
    defer { setup.presenter.kill() }
    setup.presenter.process.signal(SIGSTOP)
    // Every thread stopped before the queue is filled: one still running would drain some of it.
    let tasks = "/proc/\(setup.presenter.pid)/task"
    #expect(
      await eventually {
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
        return !threads.isEmpty
          && threads.allSatisfy { thread in
            let text = (try? String(contentsOfFile: tasks + "/" + thread + "/stat", encoding: .utf8)) ?? ""
            return text.split(separator: ")").last?.split(separator: " ").first == "T"
          }
      }, "the presenter did not stop")
    let space = try CoordinationSpace.locate(setup.url).0
    let file = try space.root.openSocketFile(
      CoordinationPaths.inbox(of: setup.presenterProcess) + "/" + MessageTransport.socketName)
    let stranger = try DatagramSocket.unconnected()
    var queued = 0
    while try stranger.send([0x21], toSocketFile: file), queued < 10_000 { queued += 1 }
    #expect(queued > 0, "the stranger's datagrams were not queued")
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .milliseconds(100)
    try setup.write(2, with: coordinator)
    setup.presenter.process.signal(SIGCONT)
    try setup.write(1, from: 2, with: coordinator)
    await waitForReacquires(setup.presenter, 3, root: setup.root)
    expectInOrder(setup.presenter, writes: 3)
    #expect(setup.sent.datagrams == 0 && setup.sent.files > 0, "\(setup.sent)")
  }

  /// A receiver stopped while idle: when it runs again, one `poll` finds its socket and its inotify queue both
  /// readable, and the socket is read first — each finish there while its write's event still waits in the kernel
  /// queue. The finish must not end the suppression then (the watcher sees the queue is not empty and marks it),
  /// or that event would be heard as an uncoordinated change. Three writes: their six datagrams fit the queue.
  @Test func finishesReadBesideTheirWritesQueuedEventsStillSuppressThem() async throws {
    let setup = try await Setup(group, "beside.txt")
    _ = try setup.writeWhileStopped(3)
    await waitForReacquires(setup.presenter, 3, root: setup.root)
    expectInOrder(setup.presenter, writes: 3)
    #expect(await eventually { setup.sent == (datagrams: 6, files: 0) }, "\(setup.sent)")
    setup.presenter.kill()
  }

  /// A presenter process killed with SIGKILL leaves its record, inbox and socket file behind. The next write's
  /// prepare cannot be sent to it (the socket refuses), so its liveness is checked then: it is dead, reaped, and sent
  /// nothing — no file is written into its inbox for an ack that would never come. A live presenter whose datagram
  /// was taken is never checked (`sendUnlessDead`).
  @Test func aKilledPresenterIsFoundDeadWhenItsSocketRefusesAndIsSentNothing() async throws {
    let setup = try await Setup(group, "killed.txt")
    try setup.write(1)
    await waitForReacquires(setup.presenter, 1, root: setup.root)
    setup.presenter.kill()
    _ = await setup.presenter.exit()
    let space = try CoordinationSpace.locate(setup.url).0
    let inbox = space.messaging.inbox(of: setup.presenterProcess)
    #expect(FileManager.default.fileExists(atPath: inbox))
    let before = setup.sent
    try setup.write(1, from: 1)
    #expect(setup.sent.datagrams == before.datagrams)
    #expect(setup.sent.files == before.files, "a file went to the dead process")
    #expect(!FileManager.default.fileExists(atPath: inbox), "the dead process was not reaped")
    #expect(try setup.container.contents(of: setup.url) == Data("1".utf8))
  }

  /// A receiver without a socket (here by the test switch; elsewhere no `/proc` or no `openat2`) gets files.
  @Test func aReceiverWithoutASocketGetsFiles() async throws {
    let setup = try await Setup(group, "f.txt", environment: [MessageTransport.filesOnlyVariable: "1"])
    try setup.write(5)
    await waitForReacquires(setup.presenter, 5, root: setup.root)
    expectInOrder(setup.presenter, writes: 5)
    #expect(await eventually { setup.sent == (datagrams: 0, files: 10) }, "\(setup.sent)")
    setup.presenter.kill()
  }
}

extension MessageTransportTests {
  /// Whatever a stranger sends to a presenter's inbox socket — nothing, garbage, a message of the wrong kind or with
  /// a path out of the container, more than the limit — is dropped, and the presenter goes on hearing writes.
  @Test func strangeDatagramsAreDroppedAndThePresenterGoesOn() async throws {
    let setup = try await Setup(group, "h.txt")
    let child = setup.presenterProcess
    let directory = try ContainerDirectory(path: setup.container.path)
    let file = try directory.openSocketFile(".coordination/inbox/\(child)/" + MessageTransport.socketName)
    let socket = try DatagramSocket.connect(to: file)
    file.close()
    let me = ProcessName.current
    let strange: [[UInt8]] = [
      [],
      Array("{".utf8),
      (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) },
      Array(
        #"{"version":1,"id":"\#(me).9","kind":"ack","sender":"\#(me)","item":"","needsAck":false,"events":[]}"#.utf8),
      Array(
        #"{"version":1,"id":"\#(me).9","kind":"prepare","sender":"\#(me)","item":"../out","needsAck":false,"events":[]}"#
          .utf8),
      [UInt8](repeating: UInt8(ascii: " "), count: MessageTransport.maxDatagramBytes + 1000),
    ]
    for bytes in strange { #expect(try socket.send(bytes, waitMilliseconds: 1000)) }
    try setup.write(3)
    await waitForReacquires(setup.presenter, 3, root: setup.root)
    expectInOrder(setup.presenter, writes: 3)
    #expect(setup.presenter.process.isRunning)
    setup.presenter.kill()
  }
}

extension MessageTransportTests {
  /// A group member who swaps a presenter's `.socket` for a link to a socket of theirs, or for a FIFO, gets
  /// nothing: the writer refuses the link (`RESOLVE_NO_SYMLINKS`) and the FIFO (not a socket) without blocking, and
  /// the presenter hears every write as files.
  @Test(arguments: ["link", "fifo"]) func aSwappedSocketFileIsNeverFollowed(plant: String) async throws {
    let setup = try await Setup(group, "p.txt")
    let child = setup.presenterProcess
    let inbox = try CoordinationSpace.locate(setup.url).0.messaging.inbox(of: child)
    let socketPath = inbox + "/" + MessageTransport.socketName
    // The stranger's socket, outside the container.
    let outsideRoot = try TestRoot()
    let outside = outsideRoot.path
    let directory = try SystemFD.open(outside, [.readOnly, .directory])
    let evil = try DatagramSocket.bind("evil", in: directory, mode: 0o600)
    directory.close()
    try FileManager.default.removeItem(atPath: socketPath)
    if plant == "link" {
      try FileManager.default.createSymbolicLink(atPath: socketPath, withDestinationPath: outside + "/evil")
    } else {
      #expect(mkfifo(socketPath, 0o600) == 0)
    }
    try setup.write(3)
    await waitForReacquires(setup.presenter, 3, root: setup.root)
    expectInOrder(setup.presenter, writes: 3)
    #expect(await eventually { setup.sent == (datagrams: 0, files: 6) }, "\(setup.sent)")
    var buffer = [UInt8](repeating: 0, count: 1024)
    #expect(buffer.withUnsafeMutableBytes { evil.receive(into: $0) } == nil, "a message reached the outside socket")
    setup.presenter.kill()
  }
}

extension MessageTransportTests {
  /// A coordinated write announced to a process quiets its watcher: the inotify queue is left unread until the
  /// write's finish (its own events are swallowed anyway), but only for `Watcher.quietLimit`. A writer that holds
  /// its access longer must not hold back the process's other items: here another process holds a write of
  /// `a.txt`, which this process presents, and this process must still hear an uncoordinated change of `b.txt`,
  /// and must still be able to add a presenter (a watch request to the watcher thread, served through its wake
  /// pipe) and hear a change of that item too — all while the write is held.
  ///
  /// Mutants: the quiet never lapses (`quietUntil` ignored in `Watcher.waitForInotifyOrReadables`): neither `b.txt`'s
  /// nor `c.txt`'s change is heard while the write is held. No quiet begun by a write's prepare: `quietsUnderWay`
  /// stays 0. (The wake pipe in the quiet poll only shortens a request's wait: every turn of the loop, a lapsed
  /// poll's too, serves requests, so leaving it out delays them by up to `quietLimit` — not something a test without
  /// timing can tell.)
  ///
  /// A resync — an inotify queue overflow anywhere in this process, whose tests share the watcher — tells `a.txt`'s
  /// presenter too that its item may have changed: seen once under load, before the holder's relinquish. It is no
  /// change of `a.txt`, and is left out of `a`'s events; for `b` and `c` it counts as the change (the overflow may
  /// have dropped its event), and a quiet that never lapses still hides it (the queue is not read).
  @Test func aWriteHeldElsewhereNeverHoldsBackOtherItems() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let urls = ["a.txt", "b.txt", "c.txt"].map { container.documentsURL.appendingPathComponent($0) }
    for url in urls { try Data("0".utf8).write(to: url) }
    let (a, b, c) = (
      RecordingPresenter(url: urls[0]), RecordingPresenter(url: urls[1]), RecordingPresenter(url: urls[2])
    )
    try FileCoordinator.addFilePresenter(a)
    try FileCoordinator.addFilePresenter(b)
    defer { for presenter in [a, b, c] { FileCoordinator.removeFilePresenter(presenter) } }
    let holder = try Child(.hold(mode: .write, item: "Documents/a.txt"), root: root.path, group: group)
    defer { holder.kill() }
    await holder.line { $0 == "locked" }
    #expect(a.eventsBesideResyncs == ["relinquishToWriter coordinated"], "\(a.events)")
    #expect(Watcher.shared.quietsUnderWay >= 1, "the write's prepare began no quiet")

    try Data("1".utf8).write(to: urls[1])
    #expect(await b.heardUncoordinatedChange(), "a change of another item was held back by the quiet")
    try FileCoordinator.addFilePresenter(c)
    try Data("1".utf8).write(to: urls[2])
    #expect(await c.heardUncoordinatedChange(), "a presenter added during the quiet heard nothing")
    #expect(holder.process.isRunning, "the write was no longer held: the test proves nothing")
    #expect(a.eventsBesideResyncs == ["relinquishToWriter coordinated"], "\(a.events)")
    // The holder dies: the liveness tick finishes its access here, and `a.txt`'s presenter gets its item back.
    holder.kill()
    #expect(await a.waitFor(["reacquire coordinated"]))
  }

  /// A write's prepare quiets the receiver's watcher only when it came on the socket. One that came as a file has a
  /// finish that comes as a file too, and files are read from the inotify queue: a quiet would hold that finish
  /// back until it lapsed. The presenter child prints how many quiets its watcher is in when it relinquishes.
  ///
  /// Mutant: every write's prepare quiets (`asDatagram` ignored in PresenterHost.prepare): the second write's
  /// relinquish reports `quiets=1`.
  @Test func onlyAPrepareOnTheSocketQuietsTheWatcher() async throws {
    let setup = try await Setup(group, "q.txt", environment: ["GC_TEST_REPORT_QUIETS": "1"])
    try setup.write(1)
    let coordinator = FileCoordinator()
    // Over the datagram limit: this write's prepare and finish go as files.
    coordinator.purposeIdentifier = String(repeating: "p", count: MessageTransport.maxDatagramBytes)
    try setup.write(1, from: 1, with: coordinator)
    await setup.presenter.line { _ in setup.presenter.output.filter { $0.hasPrefix("reacquire") }.count == 2 }
    // Each write's prepare and finish. The sender counts a file once it is published, so the presenter may have
    // read the last finish and reacquired before the count (seen once at load 10: files 1).
    #expect(await eventually { setup.sent == (datagrams: 2, files: 2) }, "\(setup.sent)")
    let reported = setup.presenter.output.filter { $0.hasPrefix("relinquishToWriter") }.map {
      $0.split(separator: " ").last
    }
    #expect(reported == ["quiets=1", "quiets=0"], "\(setup.presenter.output)")
    setup.presenter.kill()
  }

  /// Back-to-back writes bring one write's finish and the next one's prepare to the watcher in the same turn: a
  /// quiet ends and the next begins without the inotify queue ever being polled. So a quiet begins only once the
  /// queue was polled since the last began, and a process presenting an item that another process writes without
  /// pause still hears an uncoordinated change of its other items while those writes go on.
  ///
  /// Whether a finish and the next prepare meet in one turn depends on timing here: a quiet begun whatever was
  /// polled (no `queuePolled` in `Watcher.beginQuiet`) passed on this machine. The mutant is caught where the pairs
  /// are made to meet: `WatcherReadablesTests.quietAfterQuietStillPollsTheQueue`.
  @Test func backToBackWritesNeverStarveTheQueue() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let urls = ["a.txt", "b.txt"].map { container.documentsURL.appendingPathComponent($0) }
    for url in urls { try Data("0".utf8).write(to: url) }
    let (a, b) = (RecordingPresenter(url: urls[0]), RecordingPresenter(url: urls[1]))
    try FileCoordinator.addFilePresenter(a)
    try FileCoordinator.addFilePresenter(b)
    defer { for presenter in [a, b] { FileCoordinator.removeFilePresenter(presenter) } }
    let log = root.path + "/writes.log"
    let writer = try Child(
      .access(mode: .write, item: "Documents/a.txt", count: 1000000, holdMS: 0, log: log), root: root.path,
      group: group)
    defer { writer.kill() }
    #expect(await a.waitFor(Array(repeating: "relinquishToWriter coordinated", count: 20)), "the writes did not start")
    try Data("1".utf8).write(to: urls[1])
    #expect(await b.waitFor(["didChange uncoordinated"]), "back-to-back writes of another item kept the queue unread")
    #expect(writer.process.isRunning, "the writes stopped: the test proves nothing")
  }

  /// A presenter answers each prepare on its sender's ack board, mapped once per board (Messenger.postAck). The
  /// table of those mappings is bounded, one let go for each new one: 70 writer processes, one after the other, each
  /// made to take a board of the pool no writer took before (this process holds every board a writer let go), leave
  /// the presenter with 64 of their boards mapped — not 70 (no bound), and not 6 (the table emptied at 64, which had
  /// every presenter unmap 64 boards before answering the same new process).
  @Test func aPresenterKeepsAtMost64OtherBoardsMappedAndLetsThemGoOneAtATime() async throws {
    let setup = try await Setup(group, "boards.txt")
    defer { setup.presenter.kill() }
    var held: [DescriptorBox] = []
    for i in 0..<70 {
      let run = try await groupctl(["write", group, "Documents/boards.txt", "--root", setup.root.path])
      try #require(run.status == 0, "writer \(i): \(run.err)")
      held += Self.holdFreeBoards(of: setup.container)
    }
    #expect(held.count >= 70, "boards the writers let go: \(held.count)")
    #expect(
      await setup.presenter.line { _ in setup.presenter.output.filter { $0.hasPrefix("reacquire") }.count >= 70 }
        != nil,
      "the presenter did not answer 70 writers: \(setup.presenter.output.suffix(5))")
    let others = try Self.otherBoardsMapped(by: setup)
    #expect(others == 64, "other processes' boards mapped in the presenter: \(others)")
  }

  /// Boards outlive their holders (AckBoard.swift): 70 writer processes, one after the other, take the same board of
  /// the pool, and the presenter maps it once — not once per writer, which cost every presenter an mmap, a page
  /// fault and an munmap per new writer process.
  @Test func writerProcessesOneAfterTheOtherShareOneBoardThePresenterMapsOnce() async throws {
    let setup = try await Setup(group, "shared-board.txt")
    defer { setup.presenter.kill() }
    for i in 0..<70 {
      let run = try await groupctl(["write", group, "Documents/shared-board.txt", "--root", setup.root.path])
      try #require(run.status == 0, "writer \(i): \(run.err)")
    }
    #expect(
      await setup.presenter.line { _ in setup.presenter.output.filter { $0.hasPrefix("reacquire") }.count >= 70 }
        != nil,
      "the presenter did not answer 70 writers: \(setup.presenter.output.suffix(5))")
    let others = try Self.otherBoardsMapped(by: setup)
    #expect(others == 1, "other processes' boards mapped in the presenter: \(others)")
  }

  /// Three writer processes, one after the other, take the same board of the pool, and the presenter (this process)
  /// opens it once — for the first; the next two it finds among the boards it has mapped, by the identity of their
  /// `.acks`. Each answer is stored on the board, none goes as a file. Mutant: no lookup by identity before the open
  /// (the board opened for each writer: 3).
  @Test func aPresenterFindsANewWritersBoardWithoutOpeningIt() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("named-board.txt")
    let presenter = RecordingPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    defer { FileCoordinator.removeFilePresenter(presenter) }
    let messenger = try CoordinationSpace.locate(url).0.messenger
    let filesBefore = messenger.transport.filesSent.load(ordering: .relaxed)
    for i in 0..<3 {
      let run = try await groupctl(["write", group, "Documents/named-board.txt", "--root", root.path])
      try #require(run.status == 0, "writer \(i): \(run.err)")
    }
    #expect(
      await eventually { presenter.events.filter { $0.hasPrefix("reacquire") }.count == 3 },
      "the presenter did not answer 3 writers: \(presenter.events)")
    #expect(messenger.boardsOpened.load(ordering: .relaxed) == 1, "boards opened by path")
    #expect(messenger.transport.filesSent.load(ordering: .relaxed) == filesBefore, "an answer went as a file")
  }

  /// Any member of the group can make a name of the pool something that is no board: a FIFO, a directory, a
  /// symlink. A new process passes over each (a FIFO opens and locks, but would never map) and takes the next free
  /// name; its write of a presented item is answered. Mutant: the FIFO not passed over (the writer fails: its board
  /// does not map).
  @Test func aNameOfTheBoardPoolThatIsNoFileIsPassedOver() async throws {
    let setup = try await Setup(group, "odd-board.txt")
    defer { setup.presenter.kill() }
    let held = Self.holdFreeBoards(of: setup.container)  // the writer must go past the plants
    let pool = setup.container.url.appendingPathComponent(CoordinationPaths.acks).path
    let names = (try FileManager.default.contentsOfDirectory(atPath: pool)).compactMap { Int($0) }
    let next = (names.max() ?? -1) + 1
    #expect(mkfifo(pool + "/\(next)", 0o600) == 0)
    try FileManager.default.createDirectory(atPath: pool + "/\(next + 1)", withIntermediateDirectories: false)
    try FileManager.default.createSymbolicLink(atPath: pool + "/\(next + 2)", withDestinationPath: "\(next)")
    let run = try await groupctl(["write", group, "Documents/odd-board.txt", "--root", setup.root.path])
    #expect(run.status == 0, "the writer: \(run.err)")
    #expect(
      await setup.presenter.line { $0.hasPrefix("reacquire") } != nil,
      "the presenter did not answer: \(setup.presenter.output.suffix(5))")
    #expect(FileManager.default.fileExists(atPath: pool + "/\(next + 3)"), "the writer took no board past the plants")
    withExtendedLifetime(held) {}
  }

  /// A board outlives its holder, so a late answer to its previous holder's prepare can land in a slot the new holder
  /// lent: answers are stored only into an empty slot (Messenger.postAck), and whichever comes second is refused (it
  /// then goes as an ack file) — never one written over the other.
  @Test func anAnswerIsStoredOnlyIntoAnEmptySlot() throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let space = try CoordinationSpace.locate(container.documentsURL.appendingPathComponent("slot.txt")).0
    let messenger = space.messenger
    var prepare = CoordinationMessage(
      id: messenger.nextMessageID(), kind: .prepare, sender: space.me, item: "Documents/slot.txt", needsAck: true,
      events: [])
    messenger.reserveAck(for: &prepare)
    let token = try #require(prepare.ackToken)
    var late = prepare
    late.ackToken = token &+ 1_000  // the previous holder's, answered late
    #expect(messenger.postAck(for: late), "the late answer found the slot empty")
    #expect(!messenger.postAck(for: prepare), "an answer was written over another one")
    messenger.returnAck(of: prepare)
  }

  /// Takes `LOCK_EX` on every board of `container`'s pool that no live process holds: the next process must take a
  /// board nobody took before.
  private static func holdFreeBoards(of container: GroupContainer) -> [DescriptorBox] {
    let pool = container.url.appendingPathComponent(CoordinationPaths.acks).path
    var held: [DescriptorBox] = []
    for name in (try? FileManager.default.contentsOfDirectory(atPath: pool)) ?? [] {
      guard let fd = try? SystemFD.open(pool + "/" + name, .readWrite) else { continue }
      if (try? fd.lock(.exclusive, nonBlocking: true)) == true { held.append(DescriptorBox(fd)) }
    }
    return held
  }

  /// How many mappings of other processes' boards the presenter of `setup` has (one file mapped twice counts twice).
  private static func otherBoardsMapped(by setup: Setup) throws -> Int {
    // Read to the end (a /proc file says its size is 0: `String(contentsOfFile:)` stops after the first block).
    let handle = try #require(FileHandle(forReadingAtPath: "/proc/\(setup.presenter.pid)/maps"))
    let maps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
    let own = "/" + CoordinationPaths.inbox(of: setup.presenterProcess) + "/" + AckBoard.fileName
    let ownFile = try #require(try FileSystem.status(setup.container.url.path + own))
    // Fields: address, perms, offset, device, inode, path (and " (deleted)" for a name removed since).
    return maps.split(separator: "\n").filter { line in
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      return fields.count >= 6 && fields[5].contains("/.coordination/")
        && (fields[5].hasSuffix("/" + AckBoard.fileName) || fields[5].contains("/" + CoordinationPaths.Name.acks + "/"))
        && UInt64(fields[4]) != ownFile.inode
    }.count
  }
}
