import Foundation
import Logging

/// What a Today widget's update found: the NotificationCenter framework's `NCUpdateResult`.
public enum NCUpdateResult: Sendable, Equatable {
  /// New content: redraw.
  case newData
  /// Nothing changed: keep what is shown.
  case noData
  /// The update failed: keep what is shown.
  case failed
}

/// A Today widget (iOS's NotificationCenter extension): it updates its content when asked and says whether anything
/// changed, so it is redrawn only then.
public protocol NCWidgetProviding: Sendable {
  /// Updates the widget's content and calls `completionHandler` once with what it found.
  func widgetPerformUpdate(completionHandler: @escaping @Sendable (NCUpdateResult) -> Void)
}

/// The updates of a Today widget: iOS calls `widgetPerformUpdate` when it sees fit; here on a schedule and at once
/// when any process of the group calls ``WidgetCenter/reloadTimelines(ofKind:)`` for this kind (or
/// ``WidgetCenter/reloadAllTimelines()``). Each update's result is an element: draw on `.newData` only.
///
/// An update whose completion handler is not called within `updateTimeout` counts as `.failed` (a later call is
/// ignored), so a stuck update never stops the schedule. Requests during an update are coalesced into one more.
/// The sequence ends when the iterating task is cancelled.
public struct TodayWidgetUpdates<Widget: NCWidgetProviding>: AsyncSequence, Sendable {
  /// Every update's result, in order.
  public typealias Element = NCUpdateResult

  /// The widget's kind: the name reload requests use.
  public let kind: String
  let widget: Widget
  let center: WidgetCenter
  let refreshInterval: Duration
  let updateTimeout: Duration
  private static var logger: Logger { Logger(label: "GroupContainer.WidgetKit") }

  /// The updates of `widget`, every `refreshInterval` and on requests made through `center`'s container.
  public init(
    kind: String, widget: Widget, center: WidgetCenter, refreshInterval: Duration = .seconds(60),
    updateTimeout: Duration = .seconds(30)
  ) {
    self.kind = kind
    self.widget = widget
    self.center = center
    self.refreshInterval = refreshInterval
    self.updateTimeout = updateTimeout
  }

  /// The iterator: one result per update.
  public func makeAsyncIterator() -> AsyncStream<Element>.Iterator {
    center.scheduleStream(forKind: kind) { [self] wakeup, report in
      while !Task.isCancelled {
        wakeup.reset()
        report(await update())
        _ = await wakeup.wait(timeout: refreshInterval)
      }
    }.makeAsyncIterator()
  }

  /// One `widgetPerformUpdate`, bounded by `updateTimeout`.
  private func update() async -> NCUpdateResult {
    let (kind, timeout, widget) = (kind, updateTimeout, widget)
    return await withCheckedContinuation { (continuation: CheckedContinuation<NCUpdateResult, Never>) in
      let once = OneAnswer(continuation)
      let timer = Task {
        try? await Task.sleep(for: timeout)
        if once.answer(.failed) { Self.logger.error("the update of widget '\(kind)' did not finish within \(timeout)") }
      }
      widget.widgetPerformUpdate { result in
        if once.answer(result) { timer.cancel() }
      }
    }
  }
}
