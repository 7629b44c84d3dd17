import Foundation
import Synchronization
import SystemLayer

/// One activity as an observer sees it: its record (nil once removed) and its state now.
package struct ActivitySnapshot: Sendable {
  /// The activity's id.
  package var id: String
  /// The record as read; nil once removed.
  package var record: ActivityRecord?
  /// Its state now, by the container's clock (dismissed once removed).
  package var state: ActivityState

  /// A snapshot of `id`.
  package init(id: String, record: ActivityRecord?, state: ActivityState) {
    self.id = id
    self.record = record
    self.state = state
  }
}

/// Live observation of the activities' directory, from any process.
///
/// Why inotify (the process's one ``Watcher`` thread) and not the shared defaults' change stream or a futex signal:
/// every record is its own file published by a rename, which inotify reports as `IN_MOVED_TO` with the file's name
/// within microseconds, in every watching process — also for writes by `groupctl` or any other tool, with no shared
/// mapping to keep consistent and no polling. The defaults stream would put records in a plist suite (compactions,
/// a size limit shared with the app's settings); a futex signal (the downloads' `ChangeSignal`) misses writes made
/// outside the framework. Time-driven changes (stale, the 8 hour end, dismissal) come from a timer set to the next
/// deadline of the records in view, and from the clock file when a test clock is used (its directory is watched).
///
/// Behavior: events are handled on one serial queue per observation, so snapshots of one activity arrive in the
/// order their revisions were written; a snapshot is yielded when a record's revision or state differs from the
/// last one yielded (several quick writes may coalesce into the newest). A queue overflow rescans everything.
package enum ActivityWatch {
  /// Snapshots of the activities (only `id`, or only those of `attributesType`) whenever they change. With
  /// `includeExisting`, first one snapshot of each activity as it is. The watch is in place when this returns.
  package static func snapshots(
    store: ActivityStore, id onlyID: String? = nil, attributesType: String? = nil, includeExisting: Bool
  ) throws(ActivityError) -> AsyncStream<ActivitySnapshot> {
    let (stream, continuation) = AsyncStream<ActivitySnapshot>.makeStream(bufferingPolicy: .unbounded)
    let queue = DispatchQueue(label: "GroupContainer.LiveActivities.watch")
    struct Seen {
      var last: [String: (revision: UInt64, state: ActivityState)] = [:]
      var records: [String: ActivityRecord] = [:]
      var timerGeneration: UInt64 = 0
      var stopped = false
    }
    let seen = Mutex(Seen())

    // On `queue` only.
    @Sendable func look(_ id: String, emit: Bool) {
      if let onlyID, id != onlyID { return }
      let record: ActivityRecord?
      switch store.read(id) {
      case .record(let r): record = r
      case .missing: record = nil
      case .damaged: return  // logged by the store; the last good state stands
      }
      if let record, let attributesType, record.attributesType != attributesType { return }
      let state = record.map { ActivityRules.effective($0, now: store.now).state } ?? .dismissed
      let changed = seen.withLock { s -> Bool in
        if record == nil && s.last[id] == nil { return false }  // never seen (or not ours), gone: nothing to say
        let revision = record?.revision ?? .max
        defer {
          s.last[id] = (revision, state)
          s.records[id] = record
        }
        guard let last = s.last[id] else { return true }
        return last.revision != revision || last.state != state
      }
      if changed && emit { continuation.yield(ActivitySnapshot(id: id, record: record, state: state)) }
    }
    @Sendable func lookAll(emit: Bool) {
      let present = store.ids()
      let known = seen.withLock { Array($0.last.keys) }
      for id in Set(present).union(known).sorted() { look(id, emit: emit) }
      schedule()
    }
    // The next time a state may change by the clock alone: look again then.
    @Sendable func schedule() {
      let now = store.now
      let next = seen.withLock { s in s.records.values.compactMap { ActivityRules.nextChange($0, now: now) }.min() }
      // Only the newest timer acts: an older one finds the generation moved on.
      let generation = seen.withLock { s in
        s.timerGeneration += 1
        return s.timerGeneration
      }
      guard let next else { return }
      // A test clock may stand still: at most an hour, and a little after the deadline (timers may fire early).
      queue.asyncAfter(deadline: .now() + min(next - now, 3600) + 0.002) {
        guard seen.withLock({ !$0.stopped && $0.timerGeneration == generation }) else { return }
        lookAll(emit: true)
      }
    }

    var tokens: [Watcher.Token] = []
    do {
      tokens.append(
        try Watcher.shared.watch(store.absoluteDirectory) { event in
          guard let id = ActivityRecordFormat.id(fromFileName: event.name) else { return }
          queue.async {
            look(id, emit: true)
            schedule()
          }
        })
      if let file = store.clock.file {
        let name = (file as NSString).lastPathComponent
        tokens.append(
          try Watcher.shared.watch((file as NSString).deletingLastPathComponent) { event in
            if event.name == name { queue.async { lookAll(emit: true) } }
          })
      }
    } catch {
      for token in tokens { Watcher.shared.cancel(token) }
      throw .system(error)
    }
    tokens.append(Watcher.shared.onOverflow { queue.async { lookAll(emit: true) } })
    let watchTokens = tokens
    queue.sync { lookAll(emit: includeExisting) }
    continuation.onTermination = { _ in
      for token in watchTokens { Watcher.shared.cancel(token) }
      seen.withLock { $0.stopped = true }
    }
    return stream
  }

  /// Calls `handler` on a queue of its own whenever the file `name` of the activities directory is replaced or
  /// removed, until the returned cancel is called.
  package static func onChange(
    of name: String, in store: ActivityStore, _ handler: @escaping @Sendable () -> Void
  ) throws(ActivityError) -> @Sendable () -> Void {
    let queue = DispatchQueue(label: "GroupContainer.LiveActivities.switch")
    let token: Watcher.Token
    do {
      token = try Watcher.shared.watch(store.absoluteDirectory) { event in
        if event.name == name { queue.async(execute: handler) }
      }
    } catch { throw .system(error) }
    return { Watcher.shared.cancel(token) }
  }
}
