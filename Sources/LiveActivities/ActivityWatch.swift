import Foundation
import SharedDefaults
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

/// Live observation of the activities, from any process.
///
/// Why the records suite's change stream: every update is a commit to the suite (``ActivityStore``), which wakes
/// every observing process through the suite's change signal (a futex word in its mapped header) and hands each
/// commit's new value to the observer, in commit order — the defaults' own set → observer path, with no file to
/// re-read. Writes made outside the framework (the suite's plist edited by a tool, `groupctl defaults write`) reach
/// it too, as the suite applies them. Time-driven changes (stale, the 8 hour end, dismissal) come from a timer set
/// to the next deadline of the records in view, and from the clock file when a test clock is used (its directory is
/// watched with inotify).
///
/// Behavior: a change is handled on the suite's delivery queue — the record checked and handed to `deliver` there.
/// Timers and the clock re-evaluate the records last seen on a queue of the observation's; one lock makes every look
/// at a record and its delivery one step, so snapshots of one activity are delivered one at a time, in the order
/// their revisions were written, each revision once (an older revision than the last delivered is dropped: the first
/// look reads the suite while earlier changes may still be queued); a snapshot is delivered when a record's revision
/// or state differs from the last one delivered.
package enum ActivityWatch {
  /// Snapshots of the activities (only `id`, or only those of `attributesType`) whenever they change. With
  /// `includeExisting`, first one snapshot of each activity as it is. The watch is in place when this returns.
  package static func snapshots(
    store: ActivityStore, id onlyID: String? = nil, attributesType: String? = nil, includeExisting: Bool
  ) throws(ActivityError) -> AsyncStream<ActivitySnapshot> {
    let (stream, continuation) = AsyncStream<ActivitySnapshot>.makeStream(bufferingPolicy: .unbounded)
    let cancel = try observe(
      store: store, id: onlyID, attributesType: attributesType, includeExisting: includeExisting
    ) { continuation.yield($0) }
    continuation.onTermination = { _ in cancel() }
    return stream
  }

  /// Calls `deliver` with a snapshot of the activities (only `id`, or only those of `attributesType`) whenever one
  /// changes — on the suite's delivery queue for a write, on a queue of the observation's for the clock, never two
  /// at once — until the returned cancel is called. With `includeExisting`, first one snapshot of each activity as it
  /// is, before this returns. `deliver` must be quick (it holds up the suite's deliveries); it may cancel the
  /// observation (a cancel only marks it stopped and asks the watcher to drop its watches).
  package static func observe(
    store: ActivityStore, id onlyID: String? = nil, attributesType: String? = nil, includeExisting: Bool,
    deliver: @escaping @Sendable (ActivitySnapshot) -> Void
  ) throws(ActivityError) -> @Sendable () -> Void {
    let queue = DispatchQueue(label: "GroupContainer.LiveActivities.watch")
    struct Seen {
      var last: [String: (revision: UInt64, state: ActivityState)] = [:]
      var records: [String: ActivityRecord] = [:]
      var timerGeneration: UInt64 = 0
      var timerDeadline: Double?
    }
    let seen = Mutex(Seen())
    // Apart from `seen`: a cancel from inside `deliver` (a stream finished there) must not wait for the lock.
    let stopped = Atomic<Bool>(false)

    // Under `seen`'s lock: checks the record `value` of `id` (nil: removed) and delivers what changed.
    @Sendable func look(_ id: String, _ read: ActivityStore.Read, emit: Bool, _ s: inout Seen) {
      if let onlyID, id != onlyID { return }
      let record: ActivityRecord?
      switch read {
      case .record(let r): record = r
      case .missing: record = nil
      case .damaged: return  // logged by the store; the last good state stands
      }
      if let record, let attributesType, record.attributesType != attributesType { return }
      if let record, let last = s.last[id], record.revision < last.revision { return }  // delivered a newer one
      let state = record.map { ActivityRules.effective($0, now: store.now).state } ?? .dismissed
      if record == nil && s.last[id] == nil { return }  // never seen (or not ours), gone: nothing to say
      let revision = record?.revision ?? .max
      let changed = s.last[id].map { $0.revision != revision || $0.state != state } ?? true
      s.last[id] = (revision, state)
      s.records[id] = record
      if changed && emit && !stopped.load(ordering: .acquiring) {
        deliver(ActivitySnapshot(id: id, record: record, state: state))
      }
    }
    // The first look: every record as the suite holds it now.
    @Sendable func lookAll(emit: Bool) {
      let present = onlyID.map { [$0] } ?? store.ids()
      seen.withLock { s in
        for id in Set(present).union(s.last.keys).sorted() { look(id, store.read(id), emit: emit, &s) }
        schedule(&s)
      }
    }
    // The clock moved: the records last seen, evaluated again (not re-read: a record read now would pass the changes
    // still queued for this observer, which would then be dropped as older).
    @Sendable func lookAgain() {
      seen.withLock { s in
        for (id, record) in s.records.sorted(by: { $0.key < $1.key }) { look(id, .record(record), emit: true, &s) }
        schedule(&s)
      }
    }
    // The next time a state may change by the clock alone: look again then. Under `seen`'s lock; a timer already
    // set for that time stays (re-arming at every update was a dispatch source per update).
    @Sendable func schedule(_ s: inout Seen) {
      let now = store.now
      let next = s.records.values.compactMap { ActivityRules.nextChange($0, now: now) }.min()
      guard next != s.timerDeadline else { return }
      s.timerDeadline = next
      // Only the newest timer acts: an older one finds the generation moved on.
      s.timerGeneration += 1
      let generation = s.timerGeneration
      guard let next else { return }
      // A test clock may stand still: at most an hour, and a little after the deadline (timers may fire early).
      queue.asyncAfter(deadline: .now() + min(next - now, 3600) + 0.002) {
        let current = seen.withLock { s in
          guard s.timerGeneration == generation else { return false }
          s.timerDeadline = nil  // fired: the next look sets a new one
          return true
        }
        guard current, !stopped.load(ordering: .acquiring) else { return }
        lookAgain()
      }
    }

    // Each commit's value, in commit order; a key that is not an activity id is not a record.
    let observation = store.suite.observe(onlyID.map { [$0] }) { change in
      guard ActivityRecordFormat.isActivityID(change.key), !stopped.load(ordering: .acquiring) else { return }
      let read = store.decode(change.newValue, id: change.key)
      seen.withLock { s in
        look(change.key, read, emit: true, &s)
        schedule(&s)
      }
    }
    var tokens: [Watcher.Token] = []
    if let file = store.clock.file {
      let name = (file as NSString).lastPathComponent
      do {
        tokens.append(
          try Watcher.shared.watch((file as NSString).deletingLastPathComponent) { event in
            if event.name == name { queue.async { lookAgain() } }
          })
      } catch {
        observation.cancel()
        throw .system(error)
      }
    }
    let watchTokens = tokens
    lookAll(emit: includeExisting)
    return {
      guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
      observation.cancel()
      for token in watchTokens { Watcher.shared.cancel(token) }
    }
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
