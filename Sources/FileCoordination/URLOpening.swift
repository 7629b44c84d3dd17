import Foundation
import Synchronization
import SystemLayer

/// Why a URL could not be opened.
///
/// Tell errors apart by ``code`` (new codes may be added: a `switch` over it needs a `default`).
public struct OpenURLError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure an ``OpenURLError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `unknownScheme`.
    public var description: String { name }

    /// The URL breaks RFC 3986 or a limit.
    public static let invalidURL = Code("invalidURL")
    /// No app registered the URL's scheme in this container.
    public static let unknownScheme = Code("unknownScheme")
    /// The registered app could not be started, or did not install its handler in time.
    public static let launchFailed = Code("launchFailed")
    /// The handler's process died, or did not answer in time.
    public static let noAnswer = Code("noAnswer")
    /// The scheme's registration file may have been written by someone else: its program is not started.
    public static let untrustedRegistration = Code("untrustedRegistration")
    /// `registerURLScheme` was given a program that cannot be started.
    public static let invalidExecutable = Code("invalidExecutable")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case invalidURL(String, rule: String)
    case unknownScheme(String)
    case launchFailed(String, reason: String)
    case noAnswer(String)
    case untrustedRegistration(String, path: String, owner: UInt32, problem: String)
    case invalidExecutable(String, reason: String)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// The URL breaks RFC 3986 or a limit; `rule` says which.
  public static func invalidURL(_ url: String, rule: String) -> Self { Self(.invalidURL(url, rule: rule)) }
  /// No app registered the URL's scheme in this container.
  public static func unknownScheme(_ scheme: String) -> Self { Self(.unknownScheme(scheme)) }
  /// The registered app could not be started, or did not install its handler in time.
  public static func launchFailed(_ url: String, reason: String) -> Self { Self(.launchFailed(url, reason: reason)) }
  /// The handler's process died, or did not answer in time.
  public static func noAnswer(_ url: String) -> Self { Self(.noAnswer(url)) }
  /// The scheme's registration file may have been written by someone else: it is not owned by you or root, or its
  /// group or others may write it, or it has more than one link, or it is not a regular file (`problem` says
  /// which). Its program is not started.
  public static func untrustedRegistration(_ scheme: String, path: String, owner: UInt32, problem: String) -> Self {
    Self(.untrustedRegistration(scheme, path: path, owner: owner, problem: problem))
  }
  /// `registerURLScheme` was given a program that cannot be started (missing, not a regular file, or not
  /// executable); `reason` says which.
  public static func invalidExecutable(_ path: String, reason: String) -> Self {
    Self(.invalidExecutable(path, reason: reason))
  }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .invalidURL: .invalidURL
    case .unknownScheme: .unknownScheme
    case .launchFailed: .launchFailed
    case .noAnswer: .noAnswer
    case .untrustedRegistration: .untrustedRegistration
    case .invalidExecutable: .invalidExecutable
    }
  }

  /// What was refused: the URL (``Code/invalidURL``, ``Code/launchFailed``, ``Code/noAnswer``), the scheme
  /// (``Code/unknownScheme``, ``Code/untrustedRegistration``) or the program (``Code/invalidExecutable``).
  public var subject: String {
    switch detail {
    case .invalidURL(let text, _), .unknownScheme(let text), .launchFailed(let text, _), .noAnswer(let text),
      .untrustedRegistration(let text, _, _, _), .invalidExecutable(let text, _):
      text
    }
  }

  /// The registration file, for ``Code/untrustedRegistration``.
  public var registrationPath: String? {
    if case .untrustedRegistration(_, let path, _, _) = detail { path } else { nil }
  }

  /// The user id owning the registration file, for ``Code/untrustedRegistration``.
  public var registrationOwner: UInt32? {
    if case .untrustedRegistration(_, _, let owner, _) = detail { owner } else { nil }
  }

  /// Why: the broken rule, why the launch failed, what is wrong with the registration or the program; nil for
  /// ``Code/unknownScheme`` and ``Code/noAnswer``.
  public var reason: String? {
    switch detail {
    case .invalidURL(_, let text), .launchFailed(_, let text), .untrustedRegistration(_, _, _, let text),
      .invalidExecutable(_, let text):
      text
    case .unknownScheme, .noAnswer: nil
    }
  }

  /// What was refused and why, naming the URL or the registration file.
  public var description: String {
    switch detail {
    case .invalidURL(let url, let rule): "URL '\(url)' is invalid: \(rule)"
    case .unknownScheme(let scheme):
      "no app handles '\(scheme):' URLs in this container: register one with registerURLScheme(_:launching:)"
    case .launchFailed(let url, let reason): "could not start the app for '\(url)': \(reason)"
    case .noAnswer(let url): "the app handling '\(url)' did not answer"
    case .untrustedRegistration(let scheme, let path, _, let problem):
      "the registration of '\(scheme):' ('\(path)') is not followed, its program not started: \(problem); only a "
        + "registration nobody but you (or root) can write is followed. Register the scheme again yourself "
        + "(registerURLScheme) if you trust that program: that writes a new file only you can change"
    case .invalidExecutable(let path, let reason):
      "cannot register '\(path)' to open URLs: \(reason)"
    }
  }
}

/// The URL rule: what `open(_:)` accepts (and what a receiver re-checks).
enum OpenURLRule {
  static let maxBytes = 2048
  static let maxSchemeBytes = 64

  /// RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), compared in lower case.
  static func validate(scheme: String) throws(OpenURLError) -> String {
    let lower = scheme.lowercased()
    guard let first = lower.unicodeScalars.first, ("a"..."z").contains(first), lower.utf8.count <= maxSchemeBytes,
      lower.unicodeScalars.allSatisfy({
        ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0)
      })
    else {
      throw .invalidURL(
        scheme, rule: "a scheme is a letter then letters, digits, '+', '-' or '.' (at most \(maxSchemeBytes))")
    }
    return lower
  }

  /// The whole URL: at most 2,048 bytes, only RFC 3986 characters (unreserved, reserved, and '%' with two hex
  /// digits), and a valid scheme. Returns the scheme.
  static func validate(_ url: String) throws(OpenURLError) -> String {
    guard url.utf8.count <= maxBytes else {
      throw .invalidURL(String(url.prefix(64)) + "…", rule: "it is longer than \(maxBytes) bytes")
    }
    let bytes = Array(url.utf8)
    var i = 0
    while i < bytes.count {
      let b = bytes[i]
      if b == UInt8(ascii: "%") {
        guard i + 2 < bytes.count, isHex(bytes[i + 1]), isHex(bytes[i + 2]) else {
          throw .invalidURL(url, rule: "'%' must be followed by two hex digits")
        }
        i += 3
        continue
      }
      guard isAllowed(b) else {
        let shown = b < 0x80 ? String(UnicodeScalar(b)).debugDescription : String(format: "byte 0x%02X", b)
        throw .invalidURL(url, rule: "\(shown) is not allowed in a URL (RFC 3986): percent-encode it")
      }
      i += 1
    }
    guard let colon = url.firstIndex(of: ":"), colon != url.startIndex else {
      throw .invalidURL(url, rule: "it has no scheme (e.g. simpletimer://finished)")
    }
    let scheme = try validate(scheme: String(url[..<colon]))
    guard URL(string: url) != nil else { throw .invalidURL(url, rule: "it does not parse as a URL") }
    return scheme
  }

  private static func isHex(_ b: UInt8) -> Bool {
    (0x30...0x39).contains(b) || (0x41...0x46).contains(b) || (0x61...0x66).contains(b)
  }

  private static func isAllowed(_ b: UInt8) -> Bool {
    (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b)
      || "-._~:/?#[]@!$&'()*+,;=".utf8.contains(b)
  }
}

/// How to start the app that opens a scheme: the `CFBundleURLTypes` analog, stored in the container.
struct SchemeRegistration: Codable, Sendable, Equatable {
  var version = 1
  var scheme: String
  var executable: String
  var arguments: [String]

  static let maxBytes = 64 * 1024

  /// The registration of `scheme` in a file's bytes, nil unless it is one this version wrote for that scheme (the
  /// one parse of the file, reached by the fuzz harness too).
  static func decode(_ bytes: [UInt8], scheme: String) -> SchemeRegistration? {
    guard bytes.count <= maxBytes, let record = try? JSONDecoder().decode(Self.self, from: Data(bytes)),
      record.version == 1, record.scheme == scheme, record.executable.hasPrefix("/")
    else { return nil }
    return record
  }
}

/// Which receiver of a process a delivery is for. Each has its own marker in `handlers/`, so a process that
/// handles a scheme's URLs but has not installed its request handler yet (still starting) is not sent requests.
enum DeliveryChannel: Sendable {
  /// `onOpenURL`: `handlers/<scheme>.<proc>`.
  case url
  /// Requests (app intents, AppIntents module): `handlers/@requests.<scheme>.<proc>`. A scheme starts with a
  /// letter, so no URL marker can begin with `@`.
  case requests

  var markerPrefix: String { self == .url ? "" : "@requests." }
}

/// What a request's receiver answered (`GroupContainer.sendRequest`).
package enum RequestAnswer: Sendable, Equatable {
  /// The handler's reply (also when the delivery id had been performed before: its recorded reply, DeliveryLedger.swift).
  case replied([UInt8])
  /// The delivery id (given) was claimed before by a process that died before replying: not performed again
  /// (at most once).
  case interrupted(String)
  /// The receiving process has no request handler for the scheme (any more).
  case notHandled
  /// No answer within the timeout; the receiver is still alive.
  case timedOut
  /// The receiver died before answering, also after the one retry (with the same delivery id).
  case receiverDied
}

/// This process's URL handler, request handler and the machinery around them (one per container): the one
/// delivery path — registry, launch of the registered app, message, answer — that URLs, handed-over files and
/// requests (app intents) share.
final class URLHandlers: @unchecked Sendable {  // `handler` and `requestHandler` are Mutexes; the rest is immutable
  private let space: CoordinationSpace
  private let handler = Mutex<(schemes: Set<String>, body: @Sendable (URL) async -> Bool)?>(nil)
  private let requestHandler = Mutex<(schemes: Set<String>, body: @Sendable ([UInt8]) async -> [UInt8])?>(nil)
  /// URLs and requests received and not yet answered (a process must not exit before its answers are out).
  private let unanswered = Atomic<Int>(0)
  private var handlersDirectory: String { space.directory + "/" + CoordinationPaths.Name.handlers }
  private var schemesDirectory: String { space.directory + "/" + CoordinationPaths.Name.schemes }

  init(space: CoordinationSpace) { self.space = space }

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
        CoordinationSpace.logger.error("ignoring the scheme registration '\(path)': \(error)")
      }
      return nil
    }
    guard let record = SchemeRegistration.decode(bytes, scheme: scheme) else {
      CoordinationSpace.logger.error("ignoring the corrupt scheme registration '\(path)'")
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
        CoordinationSpace.logger.debug("could not answer \(message.id): \(error)")
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
    let pending = [message.id: target!]
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
    guard DeliveryLedger.isValid(deliveryID) else {
      throw OpenURLError.invalidURL(deliveryID, rule: DeliveryLedger.idRule)
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
        CoordinationSpace.logger.notice("the receiver of \(what) died before answering: delivering it again")
      }
    }
    return .receiverDied
  }
}

extension GroupContainer {
  /// Registers the app that opens `scheme:` URLs in this container: when `open(_:)` finds no running handler, it
  /// starts `executable` with `arguments` followed by the URL. Apple's `CFBundleURLTypes`, at run time.
  ///
  /// The registration is a file in the container, owned by the user who registered and writable by nobody else
  /// (mode 0640 in a group-shared container, 0600 otherwise; registering again replaces it with a new file).
  /// `open(_:)` follows a registration only when, checked on the descriptor it reads, it is a regular file with one
  /// link, no group or other write permission, and owned by the opener's own user or by root: in a group-shared
  /// container another member could otherwise make your process start their program as you
  /// (``OpenURLError/untrustedRegistration(_:path:owner:problem:)``).
  ///
  /// - Throws: ``FileCoordinatorError/openURL(_:)`` with ``OpenURLError/invalidExecutable(_:reason:)`` when
  ///   `executable` does not exist, is not a regular file or is not executable.
  public func registerURLScheme(
    _ scheme: String, launching executable: URL, arguments: [String] = []
  ) throws(FileCoordinatorError) {
    try space().urlHandlers.register(scheme: scheme, executable: executable.path, arguments: arguments)
  }

  /// Makes this process the handler of `schemes` URLs: `handler` answers whether it opened the URL (SwiftUI's
  /// `onOpenURL`). Validate what you receive: take only the hosts, paths and query items you expect.
  public func onOpenURL(
    schemes: Set<String>, perform handler: @escaping @Sendable (URL) async -> Bool
  ) throws(FileCoordinatorError) {
    try space().urlHandlers.install(schemes: schemes, handler)
  }

  /// Waits until every URL this process received has been answered: call it before exiting right after handling
  /// one, or the opener may see no answer.
  public func waitForOpenURLAnswers(timeout: Duration = .seconds(2)) async {
    try? await space().urlHandlers.waitUntilAnswered(timeout: timeout)
  }

  /// Stops handling URLs in this process.
  public func removeOpenURLHandler() {
    try? space().urlHandlers.uninstall()
  }

  /// Opens `url` in the app registered for its scheme — running, or started for it — and returns what its
  /// handler answered. Throws ``OpenURLError`` for unknown schemes, malformed or oversized URLs, characters
  /// outside RFC 3986, and registrations someone else could have written (only a file owned by your own user or
  /// root, with one link and no group or other write permission, is followed).
  public func open(_ url: URL, timeout: Duration = .seconds(10)) async throws -> Bool {
    try await space().urlHandlers.open(url, timeout: timeout)
  }

  /// Checks raw URL text as ``open(_:timeout:)`` does (at most 2,048 bytes, RFC 3986 characters only, a valid
  /// scheme) and returns its scheme in lower case. Use it on text from outside before making a `URL` of it:
  /// Foundation may silently percent-encode what the rule refuses.
  @discardableResult
  public static func validateURL(_ text: String) throws(OpenURLError) -> String {
    try OpenURLRule.validate(text)
  }

  /// Makes this process the receiver of requests (app intents: the AppIntents module) sent to `schemes`: `body`
  /// gets each request's bytes and returns the reply's. Each delivery id runs `body` at most once in the container
  /// (DeliveryLedger.swift), whichever process receives it.
  package func handleRequests(
    schemes: Set<String>, _ body: @escaping @Sendable ([UInt8]) async -> [UInt8]
  ) throws(FileCoordinatorError) {
    try space().urlHandlers.installRequests(schemes: schemes, body)
  }

  /// Stops receiving requests in this process.
  package func stopHandlingRequests() {
    try? space().urlHandlers.uninstallRequests()
  }

  /// Sends `body` to the request handler of `scheme` — running, or its registered app started for it — and
  /// returns the answer. Throws ``OpenURLError`` for an unknown scheme, an untrusted registration or a failed launch.
  package func sendRequest(
    _ body: [UInt8], deliveryID: String, toScheme scheme: String, timeout: Duration
  ) async throws -> RequestAnswer {
    try await space().urlHandlers.request(body, deliveryID: deliveryID, scheme: scheme, timeout: timeout)
  }

  func space() throws(FileCoordinatorError) -> CoordinationSpace {
    try FileCoordinatorError.wrap { () throws(GroupContainerError) in try coordinationSpace() }
  }
}

extension FileCoordinatorError {
  static func wrap<T>(_ body: () throws(OpenURLError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .openURL(error) }
  }
}
