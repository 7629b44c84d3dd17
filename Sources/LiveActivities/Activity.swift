import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// A Live Activity: ActivityKit's `Activity`, shared through the group container so a widget in another process
/// shows it and follows it live.
///
/// ```swift
/// let activity = try Activity.request(
///   attributes: ScoreboardAttributes(homeTeam: "Lyon", awayTeam: "Nantes"),
///   content: ActivityContent(state: .init(), staleDate: nil), in: container)
/// try await activity.update(ActivityContent(state: score, staleDate: .now + 300))
/// try await activity.end(nil, dismissalPolicy: .default)
///
/// // In the widget's process:
/// for activity in try Activity<ScoreboardAttributes>.activities(in: container) {
///   for await content in activity.contentUpdates { render(content.state) }
/// }
/// ```
///
/// Departures from iOS, each because of what Linux has (or lacks):
/// - The container is named at each static call (`in: container`): there is no app bundle to find it from.
/// - `request` is `throws` as on iOS; `update` and `end` are `async throws` instead of `async`: a record that
///   cannot be written, or a content state over 4 KB, is an error the caller sees (iOS drops it silently).
/// - Updates of an ended or dismissed activity are ignored, as on iOS: the call returns without an error and
///   writes nothing (logged at debug level).
/// - ``dismiss()`` is the user's swipe: a widget (or `groupctl activities end --immediate`) dismisses the
///   activity, and the app sees ``ActivityState/dismissed`` and its updates are ignored from then on.
/// - No push service: `pushType` is recorded, no push token is ever made.
/// - The time rules read an ``ActivityClock`` (the system's, or a test's).
public final class Activity<Attributes: ActivityAttributes>: Identifiable, Sendable {
  /// The activity's id, unique in the container (an upper-case UUID string).
  public let id: String
  /// The static part, as requested.
  public let attributes: Attributes
  /// The container's activity records this activity lives in.
  package let store: ActivityStore
  /// The last content read, for when the record is gone (a dismissed activity's record is removed later).
  private let lastContent: Mutex<ActivityContent<Attributes.ContentState>>

  init(id: String, attributes: Attributes, content: ActivityContent<Attributes.ContentState>, store: ActivityStore) {
    self.id = id
    self.attributes = attributes
    self.store = store
    lastContent = Mutex(content)
  }

  /// The typed activity of `record`, or nil (logged) when its attributes or state do not decode as this type.
  convenience init?(record: ActivityRecord, store: ActivityStore) {
    guard record.attributesType == Attributes.activityTypeName else { return nil }
    do {
      let attributes = try Self.decode(Attributes.self, from: record.attributes)
      self.init(id: record.id, attributes: attributes, content: try Self.content(of: record), store: store)
    } catch {
      ActivityStore.logger.error("activity \(record.id) does not decode as \(Attributes.self): \(error)")
      return nil
    }
  }

  // MARK: Requesting

  /// Starts an activity in `container` (ActivityKit's `request(attributes:content:pushType:)`), visible at once to
  /// every process of the group.
  /// - Throws: ``ActivityError/denied(group:)`` when the user turned activities off for the group
  ///   (``ActivityAuthorizationInfo/areActivitiesEnabled``), ``ActivityError/attributesTooLarge(bytes:limit:)`` or
  ///   ``ActivityError/contentStateTooLarge(bytes:limit:)`` over 4 KB of JSON, or a failure to write the record.
  @discardableResult
  public static func request(
    attributes: Attributes, content: ActivityContent<Attributes.ContentState>, pushType: PushType? = nil,
    in container: GroupContainer
  ) throws(ActivityError) -> Activity<Attributes> {
    let store = try ActivityStore(container: container)
    guard store.areActivitiesEnabled else { throw .denied(group: container.identifier) }
    let attributesJSON = try encode(attributes, limit: ActivityLimits.maximumAttributesBytes) {
      .attributesTooLarge(bytes: $0, limit: $1)
    }
    let stateJSON = try encode(content.state, limit: ActivityLimits.maximumContentStateBytes) {
      .contentStateTooLarge(bytes: $0, limit: $1)
    }
    let record = ActivityRecord(
      id: UUID().uuidString, attributesType: Attributes.activityTypeName, attributes: attributesJSON,
      contentState: stateJSON, staleDate: content.staleDate?.timeIntervalSince1970,
      relevanceScore: content.relevanceScore, startDate: store.now, pushType: pushType?.name,
      writerPID: CurrentProcess.id)
    try store.create(record)
    return Activity(id: record.id, attributes: attributes, content: content, store: store)
  }

  // MARK: Reading

  /// The current content (read from the container: another process's update shows here at once).
  public var content: ActivityContent<Attributes.ContentState> {
    if let record = store.read(id).record, let content = try? Self.content(of: record) {
      lastContent.withLock { $0 = content }
      return content
    }
    return lastContent.withLock { $0 }
  }

  /// The state now, by the container's clock: ``ActivityState/dismissed`` once its record is gone.
  public var activityState: ActivityState {
    guard let record = store.read(id).record else { return .dismissed }
    return ActivityRules.effective(record, now: store.now).state
  }

  /// When the activity started, by the container's clock.
  public var startDate: Date? { store.read(id).record.map { Date(timeIntervalSince1970: $0.startDate) } }

  /// Every activity of this attributes type in `container` that is not dismissed, oldest first (ActivityKit's
  /// `Activity.activities`), whichever process requested it.
  public static func activities(in container: GroupContainer) throws(ActivityError) -> [Activity<Attributes>] {
    let store = try ActivityStore(container: container)
    let now = store.now
    return store.records().filter { ActivityRules.effective($0, now: now).state != .dismissed }
      .compactMap { Activity(record: $0, store: store) }
  }

  // MARK: Updating

  /// Replaces the content (ActivityKit's `update(_:)`); every observing process sees it within milliseconds.
  /// Ignored (no error, nothing written) when the activity has ended or was dismissed, as on iOS.
  /// - Throws: ``ActivityError/contentStateTooLarge(bytes:limit:)`` when the state encodes to more than 4,096
  ///   bytes of JSON (nothing is written), or a failure to write the record.
  public func update(_ content: ActivityContent<Attributes.ContentState>) async throws(ActivityError) {
    let stateJSON = try Self.encode(content.state, limit: ActivityLimits.maximumContentStateBytes) {
      .contentStateTooLarge(bytes: $0, limit: $1)
    }
    try store.modify(id) { (record, effective) throws(ActivityError) in
      guard effective.state == .active || effective.state == .stale else {
        ActivityStore.logger.debug("update of activity \(record.id) ignored: it is \(effective.state)")
        return false
      }
      Self.apply(stateJSON, content, to: &record)
      return true
    }
    lastContent.withLock { $0 = content }
  }

  /// Changes the content with `transform` as one atomic read-modify-write across processes: two processes that
  /// each add a like to a score never lose one (ActivityKit has no counterpart: there only the app updates).
  /// Ignored when the activity has ended or was dismissed. Returns the content written (nil when ignored).
  @discardableResult
  public func update(
    using transform: (inout ActivityContent<Attributes.ContentState>) throws -> Void
  ) async throws(ActivityError) -> ActivityContent<Attributes.ContentState>? {
    var written: ActivityContent<Attributes.ContentState>?
    try store.modify(id) { (record, effective) throws(ActivityError) in
      guard effective.state == .active || effective.state == .stale else { return false }
      var content = try Self.content(of: record)
      do { try transform(&content) } catch { throw .encodingFailed("the transform failed: \(error)") }
      let stateJSON = try Self.encode(content.state, limit: ActivityLimits.maximumContentStateBytes) {
        .contentStateTooLarge(bytes: $0, limit: $1)
      }
      Self.apply(stateJSON, content, to: &record)
      written = content
      return true
    }
    if let written { lastContent.withLock { $0 = written } }
    return written
  }

  /// Ends the activity (ActivityKit's `end(_:dismissalPolicy:)`), with a final content if given. `.default` keeps
  /// it visible (state ``ActivityState/ended``) up to 4 hours; `.immediate` dismisses it now; `.after(date)`
  /// dismisses it at `date`, at the latest 4 hours after the end. Ending an ended activity again changes when it
  /// goes (counted from its first end); a dismissed one is left as it is.
  public func end(
    _ content: ActivityContent<Attributes.ContentState>?, dismissalPolicy: ActivityUIDismissalPolicy = .default
  ) async throws(ActivityError) {
    let stateJSON = try content.map { (c) throws(ActivityError) in
      try Self.encode(c.state, limit: ActivityLimits.maximumContentStateBytes) {
        .contentStateTooLarge(bytes: $0, limit: $1)
      }
    }
    let now = store.now
    try store.modify(id) { (record, effective) throws(ActivityError) in
      guard effective.state != .dismissed else { return false }
      if let content, let stateJSON { Self.apply(stateJSON, content, to: &record) }
      ActivityRules.end(&record, policy: dismissalPolicy, now: now)
      return true
    }
  }

  /// The user dismisses the activity (the swipe on iOS): from a widget, any process, or
  /// `groupctl activities end --immediate`. The app sees ``ActivityState/dismissed``; its updates are ignored.
  public func dismiss() async throws(ActivityError) {
    let now = store.now
    try store.modify(id) { (record, effective) throws(ActivityError) in
      guard effective.state != .dismissed else { return false }
      ActivityRules.dismiss(&record, now: now)
      return true
    }
  }

  // MARK: Observing

  /// Each new content, from any process, in the order written, until the activity is dismissed (ActivityKit's
  /// `contentUpdates`). Starts with the next change, not the current content. Quick successive updates may
  /// coalesce into the newest.
  public var contentUpdates: AsyncStream<ActivityContent<Attributes.ContentState>> {
    let (stream, continuation) = AsyncStream<ActivityContent<Attributes.ContentState>>.makeStream()
    let start = store.read(id).record?.contentRevision ?? 0
    forward(continuation, start: start) { [self] snapshot, last in
      guard let record = snapshot.record, record.contentRevision > last else { return (nil, last) }
      guard let content = try? Self.content(of: record) else { return (nil, record.contentRevision) }
      self.lastContent.withLock { $0 = content }
      return (content, record.contentRevision)
    }
    return stream
  }

  /// Each new state (ActivityKit's `activityStateUpdates`): an update by another process, its end, staleness, the
  /// 8 hour end and the dismissal, each as it happens. Finishes after ``ActivityState/dismissed``.
  public var activityStateUpdates: AsyncStream<ActivityState> {
    let (stream, continuation) = AsyncStream<ActivityState>.makeStream()
    let start = UInt64(ActivityState.allCases.firstIndex(of: activityState)!)
    forward(continuation, start: start) { snapshot, last in
      let index = UInt64(ActivityState.allCases.firstIndex(of: snapshot.state)!)
      return (index == last ? nil : snapshot.state, index)
    }
    return stream
  }

  /// Runs a watch of this activity into `continuation`: `step` maps each snapshot and its memory to a value to
  /// yield (or nil). Finishes once the activity is dismissed. The watch delivers on the suite's delivery queue, and
  /// `step` runs there and yields straight into `continuation`.
  private func forward<T: Sendable>(
    _ continuation: AsyncStream<T>.Continuation, start: UInt64,
    _ step: @escaping @Sendable (ActivitySnapshot, UInt64) -> (T?, UInt64)
  ) {
    let memory = Mutex(start)  // the watch delivers one snapshot at a time: never contended
    let finished = Atomic<Bool>(false)
    let cancel: @Sendable () -> Void
    do {
      cancel = try ActivityWatch.observe(store: store, id: id, includeExisting: true) { snapshot in
        let value = memory.withLock { last -> T? in
          let (value, next) = step(snapshot, last)
          last = next
          return value
        }
        if let value { continuation.yield(value) }
        if snapshot.state == .dismissed {
          finished.store(true, ordering: .releasing)
          continuation.finish()
        }
      }
    } catch {
      ActivityStore.logger.error("cannot observe activity \(id): \(error)")
      continuation.finish()
      return
    }
    continuation.onTermination = { _ in cancel() }
    // Finished before the handler was set (dismissed already): nothing calls it then.
    if finished.load(ordering: .acquiring) { cancel() }
  }

  /// Each activity of this type that starts after the call, in any process (ActivityKit's `activityUpdates`).
  /// The watch is in place when this returns: list ``activities(in:)`` after it to miss none.
  public static func activityUpdates(in container: GroupContainer) throws(ActivityError) -> AsyncStream<
    Activity<Attributes>
  > {
    let store = try ActivityStore(container: container)
    let announced = Mutex(Set(store.ids()))
    let (stream, continuation) = AsyncStream<Activity<Attributes>>.makeStream()
    // Delivered on the suite's delivery queue, straight into the stream (no task in between).
    let cancel = try ActivityWatch.observe(
      store: store, attributesType: Attributes.activityTypeName, includeExisting: false
    ) { snapshot in
      guard let record = snapshot.record, snapshot.state != .dismissed,
        announced.withLock({ $0.insert(snapshot.id).inserted })
      else { return }
      if let activity = Activity(record: record, store: store) { continuation.yield(activity) }
    }
    continuation.onTermination = { _ in cancel() }
    return stream
  }

  // MARK: Encoding

  private static func apply(
    _ stateJSON: JSONText, _ content: ActivityContent<Attributes.ContentState>, to record: inout ActivityRecord
  ) {
    record.contentState = stateJSON
    record.staleDate = content.staleDate?.timeIntervalSince1970
    record.relevanceScore = content.relevanceScore
    record.contentRevision = record.revision + 1  // the revision this write gets
  }

  static func content(of record: ActivityRecord) throws(ActivityError) -> ActivityContent<Attributes.ContentState> {
    ActivityContent(
      state: try decode(Attributes.ContentState.self, from: record.contentState),
      staleDate: record.staleDate.map(Date.init(timeIntervalSince1970:)), relevanceScore: record.relevanceScore)
  }

  /// `value` as JSON, refused with `tooLarge(bytes, limit)` when its encoding is over `limit` bytes.
  static func encode<T: Encodable>(
    _ value: T, limit: Int, tooLarge: (Int, Int) -> ActivityError
  ) throws(ActivityError) -> JSONText {
    // Without JSONEncoder when JSONTextEncoder writes the same bytes (nearly always): the limit is measured on them.
    if let text = try? JSONTextEncoder().encode(value) {
      guard text.bytes.count <= limit else { throw tooLarge(text.bytes.count, limit) }
      try readable(text.bytes)
      return text
    }
    let bytes: Data
    do { bytes = try ActivityRecordFormat.encoder.encode(value) } catch { throw .encodingFailed("\(error)") }
    guard bytes.count <= limit else { throw tooLarge(bytes.count, limit) }
    // Its canonical bytes: read by hand (JSONDecoder into a JSONValue was 85 µs of a five-field state), by JSONDecoder
    // when the hand reader gives up.
    let tree: JSONValue
    if let value = ActivityJSON.decode(bytes) {
      tree = value
    } else {
      do { tree = try JSONDecoder().decode(JSONValue.self, from: bytes) } catch { throw .encodingFailed("\(error)") }
    }
    guard let text = JSONText(tree) else { throw .encodingFailed("a number in \(T.self) is not finite") }
    return text
  }

  /// Refuses bytes no reader could read back: nesting past the hand reader's depth that JSONDecoder refuses too
  /// (what the app wrote must be what every reader of the record reads).
  private static func readable(_ bytes: [UInt8]) throws(ActivityError) {
    guard ActivityJSON.nestingDepth(bytes) > ActivityJSON.maxDepth else { return }
    do { _ = try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) } catch { throw .encodingFailed("\(error)") }
  }

  static func decode<T: Decodable>(_ type: T.Type, from text: JSONText) throws(ActivityError) -> T {
    do { return try UntrustedJSON.decode(T.self, from: text.bytes) } catch { throw .encodingFailed("\(error)") }
  }
}
