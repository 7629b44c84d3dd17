import FileCoordination
import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// This process's URL handler, request handler and the machinery around them (one per container): the one
/// delivery path — registry, launch of the registered app, message, answer — that URLs, handed-over files and
/// requests (app intents) share.
///
/// It is a part of the container's messaging (MessagingSpace), registered on first use in a process: it receives
/// `openURL` and `request` messages, and reaping a dead process removes its handler markers. A process that never
/// used URL opening has no handler and no marker, so no delivery is sent to it; the markers of a dead process are
/// removed by the next reap in a process that uses it (they are never followed meanwhile: `liveHandlers` checks
/// liveness).
final class URLHandlers: @unchecked Sendable {  // `handler` and `requestHandler` are Mutexes; the rest is immutable
  let space: MessagingSpace
  private let handler = Mutex<(schemes: Set<String>, body: @Sendable (URL) async -> Bool)?>(nil)
  private let requestHandler = Mutex<(schemes: Set<String>, body: @Sendable ([UInt8]) async -> [UInt8])?>(nil)
  /// URLs and requests received and not yet answered (a process must not exit before its answers are out).
  private let unanswered = Atomic<Int>(0)
  private var handlersDirectory: String { space.directory + "/" + CoordinationPaths.Name.handlers }
  private var schemesDirectory: String { space.directory + "/" + CoordinationPaths.Name.schemes }

  private init(space: MessagingSpace) { self.space = space }

  /// The URL handlers of every container this process used, by its messaging (kept for the process's life, as the
  /// space is).
  private static let all = Mutex<[ObjectIdentifier: URLHandlers]>([:])

  /// The URL handlers of `space`: made and registered with it (receiver of `openURL` and `request`, cleanup of a
  /// reaped process's markers) the first time.
  static func of(_ space: MessagingSpace) -> URLHandlers {
    all.withLock { all in
      if let known = all[ObjectIdentifier(space)] { return known }
      let handlers = URLHandlers(space: space)
      space.receive([.openURL, .request]) { message, _ in handlers.receive(message) }
      space.onReap { process in handlers.removeAll(of: process) }
      all[ObjectIdentifier(space)] = handlers
      return handlers
    }
  }

  private func relative(_ absolute: String) throws(FileSystemError) -> String {
    guard let relative = space.root.relative(absolute) else {
      throw FileSystemError("resolve", absolute, .improperLink)
    }
    return relative
  }

  func register(scheme: String, executable: String, arguments: [String]) throws(FileCoordinatorError) {
    let scheme = try FileCoordinatorError.wrap { () throws(OpenURLError) in try OpenURLRule.validate(scheme: scheme) }
    // Refused now rather than when a URL needs it, when the user can no longer tell where the registration came from.
    if let problem = ProcessSpawn.executableProblem(executable) {
      throw .openURL(.invalidExecutable(executable, reason: problem))
    }
    let record = SchemeRegistration(scheme: scheme, executable: executable, arguments: arguments)
    let bytes = Array((try? JSONEncoder().encode(record)) ?? Data())
    // A new file by rename, writable by nobody but us even in a group container (OwnerOnlyWritable): it names the
    // program openers start as themselves. Replacing also drops any other member's file or extra link there.
    try FileCoordinatorError.wrap { () throws(FileSystemError) in
      try space.root.replaceFile(
        atPath: schemesDirectory + "/" + scheme, with: bytes, mode: OwnerOnlyWritable.mode(from: space.fileMode))
    }
  }

  /// The registration of `scheme`, nil when there is none (or it is unusable, logged). In group mode any member
  /// can write `schemes/`, and the opener would run the program it names as itself: it is followed only when it
  /// keeps the owner-only-writable rule on the descriptor it is read from (OwnerOnlyWritable, SystemLayer).
  func registration(for scheme: String) throws(OpenURLError) -> SchemeRegistration? {
    let path = schemesDirectory + "/" + scheme
    let bytes: [UInt8]
    do {
      switch try space.root.readOwnerOnlyWritable(try relative(path), limit: SchemeRegistration.maxBytes) {
      case .trusted(let read): bytes = read
      case .untrusted(let owner, let problem):
        throw OpenURLError.untrustedRegistration(scheme, path: path, owner: owner, problem: problem)
      }
    } catch let error as OpenURLError {
      throw error
    } catch {
      // A registration the system failed to read (EIO, EMFILE…) is not a missing one: "no app handles 'x:' URLs,
      // register one" sent the user to fix what was a failing disk (found by the I/O-error loops). What is there
      // but unusable (a FIFO, a link) is ignored, as before.
      if let failure = error as? FileSystemError,
        [.ioError, .tooManyOpenFiles, .tooManyOpenFilesInSystem, .noMemory, .noSpace, .diskQuotaExceeded]
          .contains(failure.errno)
      {
        throw OpenURLError.launchFailed("\(scheme):", reason: "its registration '\(path)' cannot be read: \(failure)")
      }
      if (error as? FileSystemError)?.errno != .noSuchFileOrDirectory {
        MessagingSpace.logger.error("ignoring the scheme registration '\(path)': \(error)")
      }
      return nil
    }
    guard let record = SchemeRegistration.decode(bytes, scheme: scheme) else {
      MessagingSpace.logger.error("ignoring the corrupt scheme registration '\(path)'")
      return nil
    }
    return record
  }

  private static func validSchemes(_ schemes: Set<String>) throws(FileCoordinatorError) -> Set<String> {
    var valid: Set<String> = []
    for scheme in schemes {
      valid.insert(
        try FileCoordinatorError.wrap { () throws(OpenURLError) in try OpenURLRule.validate(scheme: scheme) })
    }
    return valid
  }

  private func publishMarkers(_ schemes: Set<String>, _ channel: DeliveryChannel) throws(FileCoordinatorError) {
    for scheme in schemes {
      try FileCoordinatorError.wrap { () throws(FileSystemError) in
        try space.root.replaceFile(
          atPath: handlersDirectory + "/\(channel.markerPrefix)\(scheme).\(space.me)", with: [UInt8](),
          mode: space.fileMode)
      }
    }
  }

  private func removeMarkers(_ schemes: Set<String>?, _ channel: DeliveryChannel) {
    for scheme in schemes ?? [] {
      try? space.root.removeFile(
        space.privatePath(handlersDirectory + "/\(channel.markerPrefix)\(scheme).\(space.me)"))
    }
  }

  func install(schemes: Set<String>, _ body: @escaping @Sendable (URL) async -> Bool) throws(FileCoordinatorError) {
    let valid = try Self.validSchemes(schemes)
    handler.withLock { $0 = (valid, body) }
    try publishMarkers(valid, .url)
  }

  func uninstall() {
    removeMarkers(
      handler.withLock { old in
        defer { old = nil }; return old?.schemes
      }, .url)
  }

  func installRequests(
    schemes: Set<String>, _ body: @escaping @Sendable ([UInt8]) async -> [UInt8]
  ) throws(FileCoordinatorError) {
    let valid = try Self.validSchemes(schemes)
    requestHandler.withLock { $0 = (valid, body) }
    try publishMarkers(valid, .requests)
  }

  func uninstallRequests() {
    removeMarkers(
      requestHandler.withLock { old in
        defer { old = nil }; return old?.schemes
      }, .requests)
  }

  /// Removes the markers of a dead process (both channels end in `.<process>`).
  func removeAll(of process: ProcessName) {
    for name in (try? FileSystem.listDirectory(handlersDirectory)) ?? [] where name.hasSuffix(".\(process)") {
      try? space.root.removeFile(space.privatePath(handlersDirectory + "/" + name))
    }
  }

  /// Live processes handling `scheme` on `channel`, reaping the dead. Throws when the handlers' directory cannot be
  /// read (an I/O error, no descriptor left), but not when it does not exist: taking a failed read for "none runs"
  /// launched another copy of the app, and the error then named the launch, not what failed.
  func liveHandlers(of scheme: String, _ channel: DeliveryChannel = .url) throws(FileSystemError) -> [ProcessName] {
    let prefix = channel.markerPrefix + scheme + "."
    var names: [String] = []
    do {
      names = try FileSystem.listDirectory(handlersDirectory)
    } catch let failure where failure.errno == .noSuchFileOrDirectory {}
    return names.compactMap { name -> ProcessName? in
      guard name.hasPrefix(prefix), let process = ProcessName(name.dropFirst(prefix.count)) else { return nil }
      return space.isAlive(process) ? process : nil
    }
  }

  /// An `openURL` or `request` message for this process (watcher thread): run the handler, answer with its result.
  func receive(_ message: CoordinationMessage) {
    let space = space
    unanswered.add(1, ordering: .relaxed)
    Task.detached { [self] in
      defer { unanswered.subtract(1, ordering: .releasing) }
      var ack = CoordinationMessage(
        id: message.id, kind: .ack, sender: space.me, item: "", needsAck: false, events: [])
      if message.kind == .request {
        ack.requestAnswer = await answer(request: message)
      } else {
        ack.opened = await open(message)
      }
      do { try space.messenger.send(ack, to: message.sender) } catch {
        MessagingSpace.logger.debug("could not answer \(message.id): \(error)")
      }
    }
  }

  /// Runs the URL handler on `message`'s URL. A `file:` URL (a handed-over file, FileHandOver.swift) is taken only
  /// when it names a file in this container's `Documents/Inbox/` and the message names a scheme this process
  /// handles; any other URL only when this process handles its scheme.
  private func open(_ message: CoordinationMessage) async -> Bool {
    guard let installed = handler.withLock({ $0 }), let text = message.url, let url = URL(string: text),
      let scheme = url.scheme?.lowercased()
    else { return false }
    if scheme == "file" {
      guard let target = message.scheme, installed.schemes.contains(target),
        Self.inboxItem(url, container: space.containerPath) != nil
      else { return false }
    } else {
      guard installed.schemes.contains(scheme) else { return false }
    }
    return await installed.body(url)
  }

  /// The item a received `file:` URL names when it lies in the container at `base`, in `Documents/Inbox/`; nil for
  /// anything else (the receiver's one check of a handed-over file's URL, reached by the fuzz harness too). The byte
  /// route first; a name with escapes (`my%20notes.txt`) takes the exact one.
  static func inboxItem(_ url: URL, container base: String) -> ContainerPath? {
    let path = url.standardizedFileURL.path
    let item =
      ContainerPath.lexical(url, in: base)
      ?? (path.hasPrefix(base + "/") ? try? ContainerPath(String(path.dropFirst(base.count + 1))) : nil)
    guard let item, item.isDescendant(of: InboxRule.inbox) else { return nil }
    return item
  }

  /// Runs the request handler on `message`'s body, at most once per delivery id (DeliveryLedger.swift).
  private func answer(request message: CoordinationMessage) async -> RequestAnswerRecord {
    guard let installed = requestHandler.withLock({ $0 }), let scheme = message.scheme,
      installed.schemes.contains(scheme), let body = message.request, let delivery = message.deliveryID
    else { return RequestAnswerRecord(status: .notHandled) }
    switch DeliveryLedger(space: space).claim(delivery) {
    case .claimed:
      let reply = await installed.body(Array(body))
      DeliveryLedger(space: space).record(reply, for: delivery)
      return RequestAnswerRecord(status: .replied, reply: Data(reply))
    case .performed(let reply):
      return RequestAnswerRecord(status: .replied, reply: Data(reply))
    case .interrupted:
      return RequestAnswerRecord(status: .interrupted)
    }
  }

  func waitUntilAnswered(timeout: Duration) async {
    let deadline = ContinuousClock.now + timeout
    while unanswered.load(ordering: .acquiring) > 0 && ContinuousClock.now < deadline {
      try? await Task.sleep(for: .milliseconds(2))
    }
  }

  /// How a delivery ended: the receiver's ack, or why there is none.
  enum Delivered {
    case answered(CoordinationMessage)
    case timedOut
    case receiverDied
  }

  /// The one delivery path: finds a live receiver of `scheme` on `channel` — launching the registered app first
  /// when none runs, with `launchArguments` after the registration's own — sends `message` (its id and sender are
  /// set here) and waits for the answer. `what` names the delivery in errors (the URL, or the request).
  func deliver(
    _ message: CoordinationMessage, scheme: String, channel: DeliveryChannel, launchArguments: [String],
    what: String, timeout: Duration
  ) async throws -> Delivered {
    guard let registration = try registration(for: scheme) else { throw OpenURLError.unknownScheme(scheme) }
    var target = try liveHandlers(of: scheme, channel).first
    if target == nil {
      // A program that vanished since it was registered: say so (posix_spawn's errno alone would not say why).
      if let problem = ProcessSpawn.executableProblem(registration.executable) {
        throw OpenURLError.launchFailed(
          what,
          reason: "its registered program '\(registration.executable)' cannot be started: \(problem); "
            + "register the scheme again (registerURLScheme) with the program's current path")
      }
      let child: ProcessSpawn.Reaped
      do {
        child = try ProcessSpawn.Reaped(
          executable: registration.executable, arguments: registration.arguments + launchArguments)
      } catch {
        throw OpenURLError.launchFailed(
          what, reason: "its registered program '\(registration.executable)' could not be started (\(error))")
      }
      let deadline = ContinuousClock.now + timeout
      while target == nil {
        if let ended = child.termination {
          let how: String
          switch ended {
          case .exited(let status): how = "status \(status)"
          case .signaled(let signal): how = "signal \(signal)"
          }
          throw OpenURLError.launchFailed(
            what,
            reason: "it exited (\(how)) before handling "
              + (channel == .url ? "URLs" : "requests"))
        }
        guard ContinuousClock.now < deadline else {
          throw OpenURLError.launchFailed(
            what, reason: "it installed no \(channel == .url ? "URL" : "request") handler within \(timeout)")
        }
        try await Task.sleep(for: .milliseconds(10))
        target = try liveHandlers(of: scheme, channel).first
      }
    }
    var message = message
    message.id = space.messenger.nextMessageID()
    message.sender = space.me
    message.needsAck = true
    try FileCoordinatorError.wrap { () throws(FileSystemError) in try space.messenger.send(message, to: target!) }
    let pending = [Messenger.AwaitedAck(id: message.id, process: target!)]
    let outcome = try await withCheckedThrowingContinuation { continuation in
      DispatchQueue.global().async { [space] in
        continuation.resume(
          with: Result {
            try space.messenger.awaitAcks(pending, timeout: timeout, isCancelled: { false })
          })
      }
    }
    if let ack = outcome.acks[message.id] { return .answered(ack) }
    if !outcome.timedOut.isEmpty {
      space.messenger.discardAcks([message.id])
      return .timedOut
    }
    return .receiverDied
  }

  /// Delivers `url` to a running handler, launching the registered app first when none runs. A `file:` URL goes
  /// to the handler of `scheme` (a handed-over file); any other URL to the handler of its own scheme.
  func open(_ url: URL, scheme fileScheme: String? = nil, timeout: Duration) async throws -> Bool {
    let text = url.absoluteString
    let urlScheme = try OpenURLRule.validate(text)
    let scheme = try fileScheme.map { s throws(OpenURLError) in try OpenURLRule.validate(scheme: s) } ?? urlScheme
    var message = CoordinationMessage(
      id: "", kind: .openURL, sender: space.me, item: "", needsAck: true, events: [])
    message.url = text
    if fileScheme != nil { message.scheme = scheme }
    switch try await deliver(
      message, scheme: scheme, channel: .url, launchArguments: [text], what: text, timeout: timeout)
    {
    case .answered(let ack): return ack.opened ?? false
    case .timedOut, .receiverDied: throw OpenURLError.noAnswer(text)
    }
  }

  /// Sends a request to the request handler of `scheme`, launching the registered app first when none runs. A
  /// receiver that dies before answering is tried once more (launched again) with the same `deliveryID`: the
  /// ledger makes sure the second try does not perform what the first started.
  func request(
    _ body: [UInt8], deliveryID: String, scheme: String, timeout: Duration
  ) async throws -> RequestAnswer {
    let scheme = try OpenURLRule.validate(scheme: scheme)
    guard DeliveryID.isValid(deliveryID) else {
      throw OpenURLError.invalidURL(deliveryID, rule: DeliveryID.rule)
    }
    var message = CoordinationMessage(
      id: "", kind: .request, sender: space.me, item: "", needsAck: true, events: [])
    message.scheme = scheme
    message.request = Data(body)
    message.deliveryID = deliveryID
    let what = "a request to '\(scheme):' (delivery \(deliveryID))"
    for attempt in 0..<2 {
      switch try await deliver(
        message, scheme: scheme, channel: .requests, launchArguments: [], what: what, timeout: timeout)
      {
      case .answered(let ack):
        guard let record = ack.requestAnswer else { return .notHandled }
        switch record.status {
        case .replied: return .replied(Array(record.reply ?? Data()))
        case .interrupted: return .interrupted(deliveryID)
        case .notHandled: return .notHandled
        }
      case .timedOut: return .timedOut
      case .receiverDied:
        if attempt == 1 { return .receiverDied }
        MessagingSpace.logger.notice("the receiver of \(what) died before answering: delivering it again")
      }
    }
    return .receiverDied
  }
}
