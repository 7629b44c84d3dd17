import Foundation
import GroupContainerCore
import Logging
import SharedDefaults

/// Asks the widgets of a group to reload their timelines, from any process: WidgetKit's `WidgetCenter`.
///
/// On iOS the app calls `WidgetCenter.shared.reloadTimelines(ofKind:)` and the system asks the widget's provider
/// again. Here the request is a counter per kind in a shared defaults suite of the container (named
/// ``suiteName(for:)``), and every ``WidgetTimeline`` or ``TodayWidgetUpdates`` of that kind, in any process,
/// hears the change at once through the suite's change stream. Requests made while a provider is still working
/// are coalesced into one more reload.
///
/// Departure from Apple: there is no `shared` center (a process may use several containers); make one per
/// container. As on iOS the calls do not throw: a request that cannot be written (a full disk) is logged, and the
/// widgets still reload on their own schedule.
public final class WidgetCenter: Sendable {
  /// The container whose widgets this center reloads.
  public let container: GroupContainer
  let defaults: SharedDefaults
  private static let logger = Logger(label: "GroupContainer.WidgetKit")

  /// The suite that carries reload requests for `container`.
  public static func suiteName(for container: GroupContainer) -> String { container.identifier + ".widgetkit" }

  /// The key counting reload requests of `kind`.
  static func key(forKind kind: String) -> String { "reload." + kind }
  /// The key counting requests to reload every kind.
  static let allKindsKey = "reload.*"

  /// The center of `container`'s widgets.
  /// - Throws: the suite cannot be opened (see `SharedDefaultsError`).
  public init(container: GroupContainer) throws(SharedDefaultsError) {
    self.container = container
    defaults = try SharedDefaults(suiteName: Self.suiteName(for: container), container: container)
  }

  /// Asks every widget of `kind` to get a new timeline now.
  public func reloadTimelines(ofKind kind: String) {
    logFailure { try requestReload(ofKind: kind) }
  }

  /// Asks every widget of every kind to get a new timeline now.
  public func reloadAllTimelines() {
    logFailure { try requestReload(ofKind: nil) }
  }

  /// The request behind ``reloadTimelines(ofKind:)`` (`kind`) and ``reloadAllTimelines()`` (`nil`), for tools
  /// that must report a failure.
  /// - Throws: the suite cannot be written (a full disk).
  package func requestReload(ofKind kind: String?) throws {
    _ = try defaults.update(kind.map(Self.key(forKind:)) ?? Self.allKindsKey) { old in
      .integer(.init((old?.intValue ?? 0) &+ 1))
    }
  }

  private func logFailure(_ request: () throws -> Void) {
    do { try request() } catch {
      Self.logger.error("cannot ask widgets to reload (suite \(defaults.suiteName)): \(error)")
    }
  }

  /// Calls `handler` for each request that concerns `kind` (its own or all kinds) from now on, from any process.
  func observeRequests(forKind kind: String, handler: @escaping @Sendable () -> Void) -> DefaultsObservation {
    defaults.observe([Self.key(forKind: kind), Self.allKindsKey]) { _ in handler() }
  }

  /// A stream whose elements `run` yields while reload requests for `kind` signal its ``Wakeup``: the schedule of
  /// a ``WidgetTimeline`` or of ``TodayWidgetUpdates``. It ends when `run` returns or the consumer goes away.
  func scheduleStream<Element: Sendable>(
    forKind kind: String, bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy = .unbounded,
    _ run: @escaping @Sendable (Wakeup, _ yield: @escaping @Sendable (Element) -> Void) async -> Void
  ) -> AsyncStream<Element> {
    AsyncStream(bufferingPolicy: bufferingPolicy) { continuation in
      let wakeup = Wakeup()
      let observation = observeRequests(forKind: kind) { wakeup.signal() }
      let task = Task {
        await run(wakeup) { continuation.yield($0) }
        continuation.finish()
      }
      continuation.onTermination = { _ in
        task.cancel()
        observation.cancel()
      }
    }
  }
}
