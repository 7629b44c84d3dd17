import Foundation
import GroupContainer

struct HeadlineEntry: TimelineEntry {
  let date: Date
  let headline: String
}

struct HeadlineProvider: TimelineProvider {
  let defaults: SharedDefaults
  func placeholder(in context: Context) -> HeadlineEntry { HeadlineEntry(date: Date(), headline: "…") }
  func getSnapshot(in context: Context, completion: @escaping @Sendable (HeadlineEntry) -> Void) {
    completion(placeholder(in: context))
  }
  func getTimeline(in context: Context, completion: @escaping @Sendable (Timeline<HeadlineEntry>) -> Void) {
    let entry = HeadlineEntry(date: Date(), headline: defaults.string(forKey: "headline") ?? "")
    completion(Timeline(entries: [entry], policy: .after(Date().addingTimeInterval(15 * 60))))
  }
}

let container = try GroupContainer(identifier: "group.com.example.news")
let defaults = try SharedDefaults(container: container)

if CommandLine.arguments.dropFirst().first == "app" {
  // The app process, after saving a new headline:
  try defaults.set("Linux widgets ship", forKey: "headline")
  try WidgetCenter(container: container).reloadTimelines(ofKind: "headline")
} else {
  // The widget process: draws each entry when it comes due.
  let center = try WidgetCenter(container: container)
  for await entry in WidgetTimeline(kind: "headline", provider: HeadlineProvider(defaults: defaults), center: center) {
    print(entry.date, entry.headline)
  }
}
