import Foundation

/// The entries a widget shows, each when its date comes: what iOS's widget system does with a ``TimelineProvider``,
/// as an `AsyncSequence` a widget process iterates and draws.
///
/// ```swift
/// let center = try WidgetCenter(container: container)
/// for await entry in WidgetTimeline(kind: "video", provider: VideoProvider(), center: center) {
///   draw(entry)
/// }
/// ```
///
/// ## Behavior
/// - Asks the provider for a timeline at once, then shows (yields) the latest entry whose date has passed, and each
///   later entry when its date comes.
/// - Asks again by the timeline's policy: `.atEnd` once the last entry is shown, `.after(date)` at `date`, `.never`
///   only on request; and at once, from any process, on ``WidgetCenter/reloadTimelines(ofKind:)`` for this kind or
///   ``WidgetCenter/reloadAllTimelines()``. Requests that come while the provider works are coalesced into one
///   more reload.
/// - Two reloads are at least `minimumReloadInterval` apart (iOS budgets them, some 40–70 a day; here the floor
///   only keeps a provider whose timeline is always over from spinning).
/// - The sequence ends when the iterating task is cancelled.
public struct WidgetTimeline<Provider: TimelineProvider>: AsyncSequence, Sendable {
  /// The entries, in the order they are shown.
  public typealias Element = Provider.Entry

  /// The widget's kind: the name reload requests use.
  public let kind: String
  let provider: Provider
  let center: WidgetCenter
  let context: TimelineProviderContext
  let minimumReloadInterval: Duration

  /// The timeline of the widget `kind`, made by `provider`, reloaded on requests made through `center`'s container.
  public init(
    kind: String, provider: Provider, center: WidgetCenter, context: TimelineProviderContext = .init(),
    minimumReloadInterval: Duration = .seconds(1)
  ) {
    self.kind = kind
    self.provider = provider
    self.center = center
    self.context = context
    self.minimumReloadInterval = minimumReloadInterval
  }

  /// The iterator: entries as they come due.
  public func makeAsyncIterator() -> AsyncStream<Element>.Iterator {
    // Only the newest entry matters to a widget that draws slower than entries come.
    center.scheduleStream(forKind: kind, bufferingPolicy: .bufferingNewest(1)) { [self] wakeup, show in
      await run(wakeup, show: show)
    }.makeAsyncIterator()
  }

  private func run(_ wakeup: Wakeup, show: @Sendable (Element) -> Void) async {
    let clock = ContinuousClock()
    var lastReload: ContinuousClock.Instant?
    while !Task.isCancelled {
      if let lastReload, clock.now < lastReload + minimumReloadInterval {
        try? await clock.sleep(until: lastReload + minimumReloadInterval)
      }
      lastReload = clock.now
      wakeup.reset()
      let timeline = await provider.timeline(in: context)
      let entries = timeline.entries.sorted { $0.date < $1.date }
      let current = entries.lastIndex { $0.date.timeIntervalSinceNow <= 0 }
      if let current { show(entries[current]) }
      var reloadNow = false
      for entry in entries[((current ?? -1) + 1)...] {
        if await wakeup.wait(until: entry.date) {
          reloadNow = true
          break
        }
        if Task.isCancelled { return }
        show(entry)
      }
      if reloadNow { continue }
      switch timeline.policy.kind {
      case .atEnd: continue
      case .after(let date): _ = await wakeup.wait(until: date)
      case .never: _ = await wakeup.wait(timeout: nil)
      }
    }
  }
}
