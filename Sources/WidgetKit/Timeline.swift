import Foundation

/// One moment of a widget's content: what to draw from `date` on. WidgetKit's `TimelineEntry`.
public protocol TimelineEntry: Sendable {
  /// When the widget starts showing this entry.
  var date: Date { get }
  /// How relevant the entry is (for stacks that rotate widgets); `nil` by default.
  var relevance: TimelineEntryRelevance? { get }
}

extension TimelineEntry {
  /// No relevance: every entry counts the same.
  public var relevance: TimelineEntryRelevance? { nil }
}

/// How relevant an entry is, and for how long. WidgetKit's `TimelineEntryRelevance`.
public struct TimelineEntryRelevance: Sendable, Equatable {
  /// Higher is more relevant; only the order of scores matters.
  public var score: Float
  /// How long, from the entry's date, the score holds (0: until the next entry).
  public var duration: TimeInterval

  /// A relevance of `score` for `duration` seconds.
  public init(score: Float, duration: TimeInterval = 0) {
    self.score = score
    self.duration = duration
  }
}

/// When a widget asks its provider for the next timeline. WidgetKit's `TimelineReloadPolicy`.
public struct TimelineReloadPolicy: Sendable, Equatable {
  enum Kind: Sendable, Equatable {
    case atEnd
    case after(Date)
    case never
  }

  let kind: Kind

  /// A new timeline once the last entry's date has passed.
  public static let atEnd = TimelineReloadPolicy(kind: .atEnd)
  /// No new timeline until the app asks (``WidgetCenter/reloadTimelines(ofKind:)``).
  public static let never = TimelineReloadPolicy(kind: .never)
  /// A new timeline once `date` has passed.
  public static func after(_ date: Date) -> TimelineReloadPolicy { TimelineReloadPolicy(kind: .after(date)) }
}

/// The entries a widget shows, each from its date on, and when to ask for the next ones. WidgetKit's `Timeline`.
public struct Timeline<EntryType: TimelineEntry>: Sendable {
  /// The entries, in any order (they are shown by date).
  public let entries: [EntryType]
  /// When to ask for the next timeline.
  public let policy: TimelineReloadPolicy

  /// A timeline of `entries` with `policy`.
  public init(entries: [EntryType], policy: TimelineReloadPolicy) {
    self.entries = entries
    self.policy = policy
  }
}

/// The widget sizes of WidgetKit, so a provider can choose what to show.
public enum WidgetFamily: String, Sendable, CaseIterable {
  /// A small square widget.
  case systemSmall
  /// A wide widget.
  case systemMedium
  /// A large square widget.
  case systemLarge
  /// One line of text (the Today view's compact mode here).
  case accessoryInline
}

/// What a provider knows about the widget asking. WidgetKit's `TimelineProviderContext`.
public struct TimelineProviderContext: Sendable {
  /// The widget's size.
  public var family: WidgetFamily
  /// True when the widget is shown as a preview (a gallery): return sample data, fast.
  public var isPreview: Bool

  /// A context for `family` (default `.systemMedium`), not a preview.
  public init(family: WidgetFamily = .systemMedium, isPreview: Bool = false) {
    self.family = family
    self.isPreview = isPreview
  }
}

/// What a widget asks for its content: a placeholder, a snapshot, timelines. WidgetKit's `TimelineProvider`, with
/// its completion handlers, so a ported provider compiles unchanged.
public protocol TimelineProvider: Sendable {
  /// The widget's entries.
  associatedtype Entry: TimelineEntry
  /// WidgetKit's name for the context.
  typealias Context = TimelineProviderContext

  /// Content to show while the first timeline is being made: no waiting, no real data.
  func placeholder(in context: Context) -> Entry
  /// One entry for now, fast (previews).
  func getSnapshot(in context: Context, completion: @escaping @Sendable (Entry) -> Void)
  /// The entries for now and later, and when to ask again. Call `completion` exactly once.
  func getTimeline(in context: Context, completion: @escaping @Sendable (Timeline<Entry>) -> Void)
}

extension TimelineProvider {
  /// `getTimeline` as an async call; a provider calling its completion twice is heard once.
  func timeline(in context: Context) async -> Timeline<Entry> {
    await withCheckedContinuation { continuation in
      let once = OneAnswer(continuation)
      getTimeline(in: context) { once.answer($0) }
    }
  }
}
