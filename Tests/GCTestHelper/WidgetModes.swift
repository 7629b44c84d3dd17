// Helper sub-commands that act as a widget process (WidgetKitTests): a timeline widget and a Today widget that
// print what they would draw.
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SharedDefaults
import Synchronization
import WidgetKit

/// An entry: which timeline (the provider's call number) and which of its entries, and the headline it shows.
struct HelperEntry: TimelineEntry {
  let date: Date
  let call: Int
  let index: Int
  let headline: String
}

/// Reads `headline` from the group's default suite on each call and makes `count` entries `spacing` apart from
/// now, with `policy`.
final class HelperProvider: TimelineProvider {
  let defaults: SharedDefaults
  let count: Int
  let spacing: TimeInterval
  let policy: @Sendable (Date) -> TimelineReloadPolicy

  init(
    defaults: SharedDefaults, count: Int, spacing: TimeInterval,
    policy: @escaping @Sendable (Date) -> TimelineReloadPolicy
  ) {
    self.defaults = defaults
    self.count = count
    self.spacing = spacing
    self.policy = policy
  }

  let calls = Atomic<Int>(0)

  func placeholder(in context: Context) -> HelperEntry { HelperEntry(date: Date(), call: 0, index: 0, headline: "-") }

  func getSnapshot(in context: Context, completion: @escaping @Sendable (HelperEntry) -> Void) {
    completion(placeholder(in: context))
  }

  func getTimeline(in context: Context, completion: @escaping @Sendable (Timeline<HelperEntry>) -> Void) {
    let call = calls.add(1, ordering: .relaxed).newValue
    let headline = defaults.string(forKey: "headline") ?? "-"
    let now = Date()
    let entries = (0..<count).map {
      HelperEntry(date: now.addingTimeInterval(Double($0) * spacing), call: call, index: $0, headline: headline)
    }
    // A provider that calls its completion twice (allowed to happen by mistake) must be heard once.
    completion(Timeline(entries: entries, policy: policy(entries.last?.date ?? now)))
    if defaults.bool(forKey: "answerTwice") { completion(Timeline(entries: [], policy: .never)) }
  }
}

/// `HelperCommand.widgetTimeline`: prints "entry <call> <index> <headline> <late-ms>" for each entry it shows
/// (late-ms: how long after the entry's date it was shown, negative if early), until killed.
func runWidgetTimeline(
  kind: String, policy reload: HelperCommand.ReloadPolicy, entries: Int, spacingMS: Int, _ container: GroupContainer
) async throws -> Never {
  let policy: @Sendable (Date) -> TimelineReloadPolicy =
    switch reload {
    case .atEnd: { _ in .atEnd }
    case .never: { _ in .never }
    case .afterMS(let ms): { last in .after(last.addingTimeInterval(Double(ms) / 1000)) }
    }
  let provider = HelperProvider(
    defaults: try SharedDefaults(container: container), count: entries, spacing: Double(spacingMS) / 1000,
    policy: policy)
  let center = try WidgetCenter(container: container)
  for await entry in WidgetTimeline(
    kind: kind, provider: provider, center: center, minimumReloadInterval: .milliseconds(50))
  {
    let late = Int(Date().timeIntervalSince(entry.date) * 1000)
    FileHandle.standardOutput.write(Data("entry \(entry.call) \(entry.index) \(entry.headline) \(late)\n".utf8))
  }
  exit(0)
}

/// A Today widget: `.failed` when the suite says `fail`, never answers when it says `stuck`, `.newData` when
/// `headline` differs from what it last drew, else `.noData`.
final class HelperTodayWidget: NCWidgetProviding {
  let defaults: SharedDefaults
  let drawn = Mutex<String?>(nil)

  init(defaults: SharedDefaults) { self.defaults = defaults }

  func widgetPerformUpdate(completionHandler: @escaping @Sendable (NCUpdateResult) -> Void) {
    if defaults.bool(forKey: "stuck") { return }
    if defaults.bool(forKey: "fail") { return completionHandler(.failed) }
    let headline = defaults.string(forKey: "headline") ?? "-"
    let changed = drawn.withLock { drawn in
      defer { drawn = headline }
      return drawn != headline
    }
    completionHandler(changed ? .newData : .noData)
  }
}

/// `HelperCommand.todayWidget`: prints "update newData <headline>", "update noData" or "update failed" for each
/// update, until killed.
func runTodayWidget(kind: String, refreshMS: Int64, updateTimeoutMS: Int64, _ container: GroupContainer) async throws
  -> Never
{
  let defaults = try SharedDefaults(container: container)
  let widget = HelperTodayWidget(defaults: defaults)
  let updates = TodayWidgetUpdates(
    kind: kind, widget: widget, center: try WidgetCenter(container: container),
    refreshInterval: .milliseconds(refreshMS), updateTimeout: .milliseconds(updateTimeoutMS))
  for await result in updates {
    let line =
      switch result {
      case .newData: "update newData \(widget.drawn.withLock { $0 ?? "-" })"
      case .noData: "update noData"
      case .failed: "update failed"
      }
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
  }
  exit(0)
}
