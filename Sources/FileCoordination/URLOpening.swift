import Foundation
import Synchronization
import SystemLayer

/// Why a URL could not be opened.
public enum OpenURLError: Error, CustomStringConvertible, Sendable, Equatable {
  /// The URL breaks RFC 3986 or a limit; `rule` says which.
  case invalidURL(String, rule: String)
  /// No app registered the URL's scheme in this container.
  case unknownScheme(String)
  /// The registered app could not be started, or did not install its handler in time.
  case launchFailed(String, reason: String)
  /// The handler's process died, or did not answer in time.
  case noAnswer(String)
  /// The scheme's registration file was written by another user (only your own or root's are followed).
  case untrustedRegistration(String, path: String, owner: UInt32)
  /// `registerURLScheme` was given a program that cannot be started (missing, not a regular file, or not
  /// executable); `reason` says which.
  case invalidExecutable(String, reason: String)

  /// What was refused and why, naming the URL or the registration file.
  public var description: String {
    switch self {
    case .invalidURL(let url, let rule): "URL '\(url)' is invalid: \(rule)"
    case .unknownScheme(let scheme):
      "no app handles '\(scheme):' URLs in this container: register one with registerURLScheme(_:launching:)"
    case .launchFailed(let url, let reason): "could not start the app for '\(url)': \(reason)"
    case .noAnswer(let url): "the app handling '\(url)' did not answer"
    case .untrustedRegistration(let scheme, let path, let owner):
      "the registration of '\(scheme):' ('\(path)') belongs to uid \(owner), neither you nor root: its program is not "
        + "started; register the scheme again yourself (registerURLScheme) if you trust that app"
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
}

/// This process's URL handler and the machinery around it (one per container).
final class URLHandlers: @unchecked Sendable {  // `handler` is a Mutex; the rest is immutable
  private let space: CoordinationSpace
  private let handler = Mutex<(schemes: Set<String>, body: @Sendable (URL) async -> Bool)?>(nil)
  /// URLs received and not yet answered (a process must not exit before its answers are out).
  private let unanswered = Atomic<Int>(0)
  private var handlersDirectory: String { space.directory + "/handlers" }
  private var schemesDirectory: String { space.directory + "/schemes" }

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
    try FileCoordinatorError.wrap { () throws(FileSystemError) in
      try space.root.replaceFile(atPath: schemesDirectory + "/" + scheme, with: bytes, mode: space.fileMode)
    }
  }

  /// The registration of `scheme`, nil when there is none (or it is unusable, logged). In group mode any member
  /// can write `schemes/`, and the opener would run the program it names as itself: only a file owned by the
  /// opener's user or by root (`fstat` of the opened file) is followed.
  func registration(for scheme: String) throws(OpenURLError) -> SchemeRegistration? {
    let path = schemesDirectory + "/" + scheme
    let bytes: [UInt8]
    do {
      let file = try space.root.readFile(try relative(path), limit: SchemeRegistration.maxBytes)
      guard file.status.owner == CurrentProcess.userID || file.status.owner == 0 else {
        throw OpenURLError.untrustedRegistration(scheme, path: path, owner: file.status.owner)
      }
      bytes = file.bytes
    } catch let error as OpenURLError {
      throw error
    } catch {
      if (error as? FileSystemError)?.errno != .noSuchFileOrDirectory {
        CoordinationSpace.logger.error("ignoring the scheme registration '\(path)': \(error)")
      }
      return nil
    }
    guard let record = try? JSONDecoder().decode(SchemeRegistration.self, from: Data(bytes)), record.version == 1,
      record.scheme == scheme, record.executable.hasPrefix("/")
    else {
      CoordinationSpace.logger.error("ignoring the corrupt scheme registration '\(path)'")
      return nil
    }
    return record
  }

  func install(schemes: Set<String>, _ body: @escaping @Sendable (URL) async -> Bool) throws(FileCoordinatorError) {
    var valid: Set<String> = []
    for scheme in schemes {
      valid.insert(
        try FileCoordinatorError.wrap { () throws(OpenURLError) in try OpenURLRule.validate(scheme: scheme) })
    }
    handler.withLock { $0 = (valid, body) }
    for scheme in valid {
      try FileCoordinatorError.wrap { () throws(FileSystemError) in
        try space.root.replaceFile(
          atPath: handlersDirectory + "/\(scheme).\(space.me)", with: [UInt8](), mode: space.fileMode)
      }
    }
  }

  func uninstall() {
    guard
      let schemes = handler.withLock({ old -> Set<String>? in
        defer { old = nil }
        return old?.schemes
      })
    else { return }
    for scheme in schemes {
      try? space.root.removeFile(space.privatePath(handlersDirectory + "/\(scheme).\(space.me)"))
    }
  }

  func removeAll(of process: ProcessName) {
    for name in (try? FileSystem.listDirectory(handlersDirectory)) ?? [] where name.hasSuffix(".\(process)") {
      try? space.root.removeFile(space.privatePath(handlersDirectory + "/" + name))
    }
  }

  /// Live processes handling `scheme`, reaping the dead.
  func liveHandlers(of scheme: String) -> [ProcessName] {
    ((try? FileSystem.listDirectory(handlersDirectory)) ?? []).compactMap { name -> ProcessName? in
      guard name.hasPrefix(scheme + "."), let process = ProcessName(name.dropFirst(scheme.count + 1)) else {
        return nil
      }
      return space.isAlive(process) ? process : nil
    }
  }

  /// An `openURL` message for this process (watcher thread): run the handler, answer with its result.
  func receive(_ message: CoordinationMessage) {
    let installed = handler.withLock { $0 }
    let space = space
    unanswered.add(1, ordering: .relaxed)
    Task.detached { [self] in
      defer { unanswered.subtract(1, ordering: .releasing) }
      var opened = false
      if let installed, let text = message.url, let url = URL(string: text),
        let scheme = url.scheme?.lowercased(), installed.schemes.contains(scheme)
      {
        opened = await installed.body(url)
      }
      var ack = CoordinationMessage(
        id: message.id, kind: .ack, sender: space.me, item: "", needsAck: false, events: [])
      ack.opened = opened
      do { try space.messenger.send(ack, to: message.sender) } catch {
        CoordinationSpace.logger.debug("could not answer \(message.id): \(error)")
      }
    }
  }

  func waitUntilAnswered(timeout: Duration) async {
    let deadline = ContinuousClock.now + timeout
    while unanswered.load(ordering: .acquiring) > 0 && ContinuousClock.now < deadline {
      try? await Task.sleep(for: .milliseconds(2))
    }
  }

  /// Delivers `url` to a running handler, launching the registered app first when none runs.
  func open(_ url: URL, timeout: Duration) async throws -> Bool {
    let text = url.absoluteString
    let scheme = try OpenURLRule.validate(text)
    guard let registration = try registration(for: scheme) else { throw OpenURLError.unknownScheme(scheme) }
    var target = liveHandlers(of: scheme).first
    if target == nil {
      let child = Process()
      child.executableURL = URL(fileURLWithPath: registration.executable)
      child.arguments = registration.arguments + [text]
      // A program that vanished since it was registered: say so (Foundation's error would be a Cocoa dump).
      if let problem = ProcessSpawn.executableProblem(registration.executable) {
        throw OpenURLError.launchFailed(
          text, reason: "its registered program '\(registration.executable)' cannot be started: \(problem); "
            + "register the scheme again (registerURLScheme) with the program's current path")
      }
      do { try child.run() } catch {
        throw OpenURLError.launchFailed(
          text, reason: "its registered program '\(registration.executable)' could not be started")
      }
      let deadline = ContinuousClock.now + timeout
      while target == nil {
        guard child.isRunning else {
          throw OpenURLError.launchFailed(
            text, reason: "it exited (status \(child.terminationStatus)) before handling URLs")
        }
        guard ContinuousClock.now < deadline else {
          throw OpenURLError.launchFailed(text, reason: "it installed no URL handler within \(timeout)")
        }
        try await Task.sleep(for: .milliseconds(10))
        target = liveHandlers(of: scheme).first
      }
    }
    var message = CoordinationMessage(
      id: space.messenger.nextMessageID(), kind: .openURL, sender: space.me, item: "", needsAck: true, events: [])
    message.url = text
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
    guard let ack = outcome.acks[message.id] else { throw OpenURLError.noAnswer(text) }
    return ack.opened ?? false
  }
}

extension GroupContainer {
  /// Registers the app that opens `scheme:` URLs in this container: when `open(_:)` finds no running handler, it
  /// starts `executable` with `arguments` followed by the URL. Apple's `CFBundleURLTypes`, at run time.
  ///
  /// The registration is a file in the container, owned by the user who registered. `open(_:)` follows only a
  /// registration owned by its own user or by root: in a group-shared container another member's registration
  /// would otherwise make your process start their program as you (``OpenURLError/untrustedRegistration(_:path:owner:)``).
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
  /// outside RFC 3986, and registrations written by another user (only your own user's or root's are followed).
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

  func space() throws(FileCoordinatorError) -> CoordinationSpace {
    try FileCoordinatorError.wrap { () throws(GroupContainerError) in try coordinationSpace() }
  }
}

extension FileCoordinatorError {
  static func wrap<T>(_ body: () throws(OpenURLError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .openURL(error) }
  }
}
