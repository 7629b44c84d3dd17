import Foundation
import GroupContainerCore
import Logging
import PropertyList
import SharedDefaults
import Synchronization
import SystemLayer

/// The activities of a container, shared by the app, its widgets and `groupctl`:
///
/// ```
/// Library/Preferences/<group-id>.liveactivities.*   the records: a private shared defaults suite (suiteName(for:)),
///                                                  one value per activity (key: its id; value: the record's bytes,
///                                                  ActivityRecordFormat, as data)
/// .coordination/activities/
///   authorization     "enabled" or "disabled": the user's switch (missing: enabled, as on iOS)
///   <id>.activity     a record of the version that kept one file per activity: imported into the suite, then removed
/// ```
///
/// Why a suite and not a file per record: an update is then a commit to a shared mapping (no file created, renamed
/// or locked; kill-durable like every defaults write), and observers hear it through the suite's change signal —
/// the defaults' fastest paths, where a file replace alone cost over a hundred defaults sets (the README's benchmark
/// table). Private machinery, like
/// the coordinator's and the downloads' files: apps go through ``Activity``. Records are checked on every read.
package final class ActivityStore: Sendable {
  /// The directory of the user's switch (and of the old version's record files), relative to the container.
  package static let directory = CoordinationPaths.activities
  /// The user's switch's file name in ``directory``.
  package static let authorizationName = "authorization"
  /// The module's logger (damaged records, ignored updates).
  package static let logger = Logger(label: "GroupContainer.LiveActivities")

  /// The container whose activities these are.
  package let container: GroupContainer
  /// The container's directory descriptor: every path is resolved beneath it.
  package let root: ContainerDirectory
  /// The mode every created file gets (0600, or 0660 for a group-shared container).
  package let fileMode: mode_t
  /// The clock of this container's activities in this process (``ActivityClock/clock(for:)``).
  package let clock: ActivityClock
  /// The records' suite (``suiteName(for:)``).
  package let suite: SharedDefaults
  /// The last record this process read or wrote, with its bytes: an update finds the bytes it wrote last and skips
  /// decoding and checking them again (they were checked when made). Keyed by bytes, never trusted otherwise.
  private let lastRecord = Mutex<(bytes: [UInt8], record: ActivityRecord)?>(nil)
  /// This process's id, the writer of its records: read once (glibc's getpid is a system call; a store is not used
  /// across fork).
  private let pid = CurrentProcess.id

  /// The suite of `container`'s records: `<group-id>.liveactivities`, private to this module as the widgets'
  /// `<group-id>.widgetkit` is to WidgetKit (an app's own suites are named by the app; the group's default suite
  /// is the identifier itself).
  package static func suiteName(for container: GroupContainer) -> String { container.identifier + ".liveactivities" }

  /// Opens (creating the directory and the suite if needed) the activities of `container`, importing the record
  /// files an older version left (once per container and process).
  package init(container: GroupContainer) throws(ActivityError) {
    self.container = container
    fileMode = container.sharing.fileMode
    clock = ActivityClock.clock(for: container)
    let root: ContainerDirectory
    do { root = try container.directory() } catch { throw .container(error) }
    self.root = root
    let mode = container.sharing.directoryMode
    try Self.system { () throws(FileSystemError) in try root.makeDirectory(Self.directory, mode: mode) }
    do { suite = try SharedDefaults(suiteName: Self.suiteName(for: container), container: container) } catch {
      throw Self.failure(error, suite: Self.suiteName(for: container), container: container)
    }
    if Self.imported.withLock({ $0.insert(root.path).inserted }) { importRecordFiles() }
  }

  static func system<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(ActivityError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  /// A failure of the records' suite as an activity error: its system or container error when it has one.
  static func failure(_ error: any Error, suite: String, container: GroupContainer) -> ActivityError {
    if let error = error as? ActivityError { return error }
    if let error = error as? SharedDefaultsError {
      if let container = error.containerError { return .container(container) }
      if let system = error.underlyingError { return .system(system) }
      let path = container.preferencesURL.path + "/" + suite
      return .system(FileSystemError("write", path, .invalidArgument, reason: error.description))
    }
    return .encodingFailed("\(error)")
  }

  private func failure(_ error: any Error) -> ActivityError {
    Self.failure(error, suite: suite.suiteName, container: container)
  }

  /// The directory's absolute path (for inotify watches of the switch).
  package var absoluteDirectory: String { root.path + "/" + Self.directory }
  /// The time now by this container's clock, in seconds since 1970.
  package var now: Double { clock.now.timeIntervalSince1970 }
  /// Where a record is, in messages: the suite's plist and the key.
  package func location(of id: String) -> String {
    container.preferencesURL.path + "/" + suite.suiteName + ".plist, key " + id
  }

  // MARK: Reading

  /// What reading a record found.
  package enum Read: Sendable {
    case missing
    case damaged(ActivityError)
    case record(ActivityRecord)

    /// The record, when one was read.
    package var record: ActivityRecord? {
      if case .record(let r) = self { return r }
      return nil
    }
  }

  /// Reads and checks the record of `id`. A damaged one (garbage, truncated, too large, not data, another
  /// activity's record under this key) is logged and reported, never trusted.
  package func read(_ id: String) -> Read { decode(suite.value(forKey: id), id: id) }

  /// Checks `value`, the suite's value for `id` (from a read or a change): the record, or why it is not one.
  package func decode(_ value: PropertyListValue?, id: String) -> Read {
    let bytes: [UInt8]
    switch value {
    case nil: return .missing
    case .data(let data)?: bytes = data
    // Also a string: JSON written into the plist by hand, or by `groupctl defaults write`.
    case .string(let text)?: bytes = Array(text.utf8)
    case _?: return damaged(id, "it is not a data value")
    }
    // Compared under the lock: copying the pair out first retained and released every field of the record.
    let cached = lastRecord.withLock { last -> ActivityRecord? in
      guard let last, last.record.id == id, last.bytes == bytes else { return nil }
      return last.record
    }
    if let cached { return .record(cached) }
    do {
      let record = try ActivityRecordFormat.decode(bytes)
      guard record.id == id else { return damaged(id, "it holds activity \(record.id)") }
      return .record(record)
    } catch { return damaged(id, error.reason) }
  }

  private func damaged(_ id: String, _ reason: String) -> Read {
    let error = ActivityError.damagedRecord(path: location(of: id), reason: reason)
    Self.logger.error("\(error)")
    return .damaged(error)
  }

  /// The ids of every record (whatever their contents): the suite's keys that are activity ids.
  package func ids() -> [String] {
    suite.propertyListRepresentation().keys.filter { ActivityRecordFormat.isActivityID($0) }.sorted()
  }

  /// Every readable record, oldest first (damaged ones are logged and skipped).
  package func records() -> [ActivityRecord] {
    suite.propertyListRepresentation().compactMap { key, value in
      ActivityRecordFormat.isActivityID(key) ? decode(value, id: key).record : nil
    }.sorted { ($0.startDate, $0.id) < ($1.startDate, $1.id) }
  }

  // MARK: Writing

  /// Writes a new record (its id is fresh), removing in the same commit the records of dismissed activities.
  package func create(_ record: ActivityRecord) throws(ActivityError) {
    let bytes = try encode(record)
    let now = now
    let dismissed = records().filter { ActivityRules.effective($0, now: now).state == .dismissed }.map(\.id)
    do {
      try suite.transaction { value in
        // A dismissed activity stays so (nothing writes it again); checked again under the lock all the same.
        let gone = dismissed.filter { id in
          guard let old = decode(value(id), id: id).record else { return false }
          return ActivityRules.effective(old, now: now).state == .dismissed
        }
        return (set: [(record.id, .data(bytes))], remove: gone, result: ())
      }
    } catch { throw failure(error) }
    lastRecord.withLock { $0 = (bytes, record) }
  }

  /// Read-modify-write of the record `id` as one commit under the suite's lock, so writers in several processes
  /// never lose each other's changes. `body` gets the record and its effective state now, and returns whether to
  /// write it. Returns the record as written (or as found when `body` wrote nothing); nil when there is no record.
  @discardableResult
  package func modify(
    _ id: String,
    _ body: (inout ActivityRecord, ActivityRules.Effective) throws(ActivityError) -> Bool
  ) throws(ActivityError) -> ActivityRecord? {
    let pid = self.pid
    let now = now
    let written: (record: ActivityRecord, bytes: [UInt8]?)?
    do {
      written = try suite.transaction(forKey: id) { value in
        var record: ActivityRecord
        switch decode(value, id: id) {
        case .missing: return (set: nil, result: nil)
        case .damaged(let error): throw error
        case .record(let r): record = r
        }
        guard try body(&record, ActivityRules.effective(record, now: now)) else {
          return (set: nil, result: (record, nil))
        }
        record.revision += 1
        record.writerPID = pid
        let bytes = try encode(record)
        return (set: .data(bytes), result: (record, bytes))
      }
    } catch { throw failure(error) }
    if let written, let bytes = written.bytes { lastRecord.withLock { $0 = (bytes, written.record) } }
    return written?.record
  }

  private func encode(_ record: ActivityRecord) throws(ActivityError) -> [UInt8] {
    do { return try ActivityRecordFormat.encode(record) } catch {
      throw .encodingFailed(error.reason)
    }
  }

  // MARK: Records of the older version

  /// The containers whose old record files this process imported.
  private static let imported = Mutex<Set<String>>([])

  /// Moves the record files of the version that kept one file per activity (`<id>.activity` in ``directory``)
  /// into the suite: each readable one is set unless the suite has that activity already, then its file is
  /// removed; a damaged one is logged and removed. A file whose import fails (a full disk) stays for next time.
  private func importRecordFiles() {
    guard let directory = try? root.openDirectory(Self.directory), let entries = try? directory.entries() else {
      return
    }
    for id in entries.compactMap({ ActivityRecordFormat.id(fromFileName: $0.name) }) {
      let path = Self.directory + "/" + id + ActivityRecordFormat.fileSuffix
      do {
        // Opened without following links and without blocking, type-checked: a planted FIFO is damage, not a hang.
        let bytes = try root.readFile(path, limit: ActivityRecordFormat.maxRecordBytes).bytes
        let record = try ActivityRecordFormat.decode(bytes)
        guard record.id == id else { throw ActivityRecordFormat.Invalid("it holds activity \(record.id)") }
        try suite.transaction(forKey: id) { value in (set: value == nil ? .data(bytes) : nil, result: ()) }
        Self.logger.notice("activity \(id) imported from '\(root.path)/\(path)' into suite '\(suite.suiteName)'")
      } catch let error as FileSystemError where error.isPassing {
        Self.logger.error("cannot import the activity record '\(root.path)/\(path)': \(error); kept for later")
        continue
      } catch let error as SharedDefaultsError {
        Self.logger.error("cannot import the activity record '\(root.path)/\(path)': \(error); kept for later")
        continue
      } catch {
        Self.logger.error("the activity record '\(root.path)/\(path)' is damaged (\(error)): removed, not imported")
      }
      do { try root.removeFile(path) } catch {
        Self.logger.error("cannot remove the imported activity record '\(root.path)/\(path)': \(error)")
      }
    }
  }

  // MARK: The switch

  /// Whether the user allows activities for this group: the `authorization` file says `disabled`, or not (a
  /// missing file is enabled; a damaged one is logged and counts as enabled, iOS's default).
  package var areActivitiesEnabled: Bool {
    let path = Self.directory + "/" + Self.authorizationName
    do {
      let bytes = try root.readFile(path, limit: 64).bytes
      let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
      switch text {
      case "enabled": return true
      case "disabled": return false
      default:
        Self.logger.error("the activities switch '\(root.path)/\(path)' holds '\(text.prefix(16))': counted as enabled")
        return true
      }
    } catch {
      if error.errno != .noSuchFileOrDirectory {
        Self.logger.error("cannot read the activities switch: \(error); counted as enabled")
      }
      return true
    }
  }

  /// Sets the user's switch (durably: it is the user's choice).
  package func setActivitiesEnabled(_ enabled: Bool) throws(ActivityError) {
    let bytes = Array((enabled ? "enabled\n" : "disabled\n").utf8)
    _ = try Self.system { () throws(FileSystemError) in
      try root.replaceFile(
        Self.directory + "/" + Self.authorizationName, with: bytes, mode: fileMode, durability: .powerLoss)
    }
  }
}
