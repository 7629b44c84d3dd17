import FileCoordination
import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

extension GroupContainer {
  /// Registers the app that opens `scheme:` URLs in this container: when `open(_:)` finds no running handler, it
  /// starts `executable` with `arguments` followed by the URL. Apple's `CFBundleURLTypes`, at run time.
  ///
  /// The registration is a file in the container, owned by the user who registered and writable by nobody else
  /// (mode 0640 in a group-shared container, 0600 otherwise; registering again replaces it with a new file).
  /// `open(_:)` follows a registration only when, checked on the descriptor it reads, it is a regular file with one
  /// link, no group or other write permission, and owned by the opener's own user or by root: in a group-shared
  /// container another member could otherwise make your process start their program as you
  /// (`OpenURLError/untrustedRegistration(_:path:owner:problem:)`).
  ///
  /// - Throws: `FileCoordinatorError/openURL(_:)` with `OpenURLError/invalidExecutable(_:reason:)` when
  ///   `executable` does not exist, is not a regular file or is not executable.
  public func registerURLScheme(
    _ scheme: String, launching executable: URL, arguments: [String] = []
  ) throws(FileCoordinatorError) {
    try urlHandlers().register(scheme: scheme, executable: executable.path, arguments: arguments)
  }

  /// Makes this process the handler of `schemes` URLs: `handler` answers whether it opened the URL (SwiftUI's
  /// `onOpenURL`). Validate what you receive: take only the hosts, paths and query items you expect.
  public func onOpenURL(
    schemes: Set<String>, perform handler: @escaping @Sendable (URL) async -> Bool
  ) throws(FileCoordinatorError) {
    try urlHandlers().install(schemes: schemes, handler)
  }

  /// Waits until every URL this process received has been answered: call it before exiting right after handling
  /// one, or the opener may see no answer.
  public func waitForOpenURLAnswers(timeout: Duration = .seconds(2)) async {
    try? await urlHandlers().waitUntilAnswered(timeout: timeout)
  }

  /// Stops handling URLs in this process.
  public func removeOpenURLHandler() {
    try? urlHandlers().uninstall()
  }

  /// Opens `url` in the app registered for its scheme — running, or started for it — and returns what its
  /// handler answered. Throws `OpenURLError` for unknown schemes, malformed or oversized URLs, characters
  /// outside RFC 3986, and registrations someone else could have written (only a file owned by your own user or
  /// root, with one link and no group or other write permission, is followed).
  public func open(_ url: URL, timeout: Duration = .seconds(10)) async throws -> Bool {
    try await urlHandlers().open(url, timeout: timeout)
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
    try urlHandlers().installRequests(schemes: schemes, body)
  }

  /// Stops receiving requests in this process.
  package func stopHandlingRequests() {
    try? urlHandlers().uninstallRequests()
  }

  /// Sends `body` to the request handler of `scheme` — running, or its registered app started for it — and
  /// returns the answer. Throws `OpenURLError` for an unknown scheme, an untrusted registration or a failed launch.
  package func sendRequest(
    _ body: [UInt8], deliveryID: String, toScheme scheme: String, timeout: Duration
  ) async throws -> RequestAnswer {
    try await urlHandlers().request(body, deliveryID: deliveryID, scheme: scheme, timeout: timeout)
  }

  /// This process's URL handlers in this container, registered with its messaging on first use (URLHandlers.swift).
  func urlHandlers() throws(FileCoordinatorError) -> URLHandlers {
    URLHandlers.of(try FileCoordinatorError.wrap { () throws(GroupContainerError) in try messagingSpace() })
  }
}

extension FileCoordinatorError {
  static func wrap<T: ~Copyable>(_ body: () throws(OpenURLError) -> T) throws(FileCoordinatorError) -> T {
    do { return try body() } catch { throw .openURL(error) }
  }
}
