import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The activities' files in the container, shared by the app, its widgets and `groupctl`:
///
/// ```
/// .coordination/activities/
///   <id>.activity     one record per activity (ActivityRecordFormat), replaced atomically at every write
///   authorization     "enabled" or "disabled": the user's switch (missing: enabled, as on iOS)
///   lock              flocked (exclusive) around every read-modify-write of a record
/// ```
///
/// Private machinery, like the coordinator's and the downloads' files: apps go through ``Activity``. Everything is
/// opened beneath the container's directory descriptor without following links and without blocking (a FIFO
/// planted here is a damaged record, never a hang); records are checked on every read.
package final class ActivityStore: Sendable {
  /// The records' directory, relative to the container.
  package static let directory = CoordinationPaths.activities
  /// The user's switch's file name in ``directory``.
  package static let authorizationName = "authorization"
  static let lockName = "lock"
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
  /// The lock file, opened read-only on first use and kept for the store's life (-1 until then). Opened for writing
  /// and closed at every update, it made an `IN_CLOSE_WRITE` that woke every observer's watcher thread for nothing
  /// (the record's rename is the one event an update should make), and cost two opens and a close. Guarded by
  /// `serial`.
  private let lockFile = Mutex<DescriptorBox?>(nil)
  /// flock belongs to the open file description, which this store's threads share: they take turns here first.
  private let serial = NSLock()

  /// Opens (creating the directory if needed) the activities of `container`.
  package init(container: GroupContainer) throws(ActivityError) {
    self.container = container
    fileMode = container.sharing.fileMode
    clock = ActivityClock.clock(for: container)
    do { root = try container.directory() } catch { throw .container(error) }
    let mode = container.sharing.directoryMode
    try Self.system { () throws(FileSystemError) in try root.makeDirectory(Self.directory, mode: mode) }
  }

  static func system<T: ~Copyable>(_ body: () throws(FileSystemError) -> T) throws(ActivityError) -> T {
    do { return try body() } catch { throw .system(error) }
  }

  /// The directory's absolute path (for inotify watches).
  package var absoluteDirectory: String { root.path + "/" + Self.directory }
  /// The time now by this container's clock, in seconds since 1970.
  package var now: Double { clock.now.timeIntervalSince1970 }
  /// The container-relative path of the record of `id`.
  package static func recordPath(_ id: String) -> String { directory + "/" + id + ActivityRecordFormat.fileSuffix }

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

  /// Reads and checks the record of `id`. A damaged one (garbage, truncated, too large, a FIFO, a symlink, another
  /// activity's record under this name) is logged and reported, never trusted.
  package func read(_ id: String) -> Read {
    let path = Self.recordPath(id)
    let bytes: [UInt8]
    do { bytes = try root.readFile(path, limit: ActivityRecordFormat.maxRecordBytes).bytes } catch {
      if error.errno == .noSuchFileOrDirectory { return .missing }
      return damaged(path, "\(error)")
    }
    do {
      let record = try ActivityRecordFormat.decode(bytes)
      guard record.id == id else { return damaged(path, "it holds activity \(record.id)") }
      return .record(record)
    } catch { return damaged(path, error.reason) }
  }

  private func damaged(_ path: String, _ reason: String) -> Read {
    let error = ActivityError.damagedRecord(path: root.path + "/" + path, reason: reason)
    Self.logger.error("\(error)")
    return .damaged(error)
  }

  /// The ids of every record file (whatever their contents).
  package func ids() -> [String] {
    guard let directory = try? root.openDirectory(Self.directory) else { return [] }
    return ((try? directory.entries()) ?? []).compactMap { ActivityRecordFormat.id(fromFileName: $0.name) }.sorted()
  }

  /// Every readable record, oldest first (damaged ones are logged and skipped).
  package func records() -> [ActivityRecord] {
    ids().compactMap { read($0).record }.sorted { ($0.startDate, $0.id) < ($1.startDate, $1.id) }
  }

  // MARK: Writing

  /// Writes a new record (its id is fresh: no lock needed), after removing the records of dismissed activities.
  package func create(_ record: ActivityRecord) throws(ActivityError) {
    try withLock { () throws(ActivityError) in
      let now = now
      for id in ids() where id != record.id {
        if let old = read(id).record, ActivityRules.effective(old, now: now).state == .dismissed {
          try? root.removeFile(Self.recordPath(id))
        }
      }
      try write(record)
    }
  }

  /// Read-modify-write of the record `id` under the store's lock, so writers in several processes never lose each
  /// other's changes. `body` gets the record and its effective state now, and returns whether to write it.
  /// Returns the record as written (or as found when `body` wrote nothing); nil when there is no record.
  @discardableResult
  package func modify(
    _ id: String, _ body: (inout ActivityRecord, ActivityRules.Effective) throws(ActivityError) -> Bool
  ) throws(ActivityError) -> ActivityRecord? {
    try withLock { () throws(ActivityError) -> ActivityRecord? in
      var record: ActivityRecord
      switch read(id) {
      case .missing: return nil
      case .damaged(let error): throw error
      case .record(let r): record = r
      }
      guard try body(&record, ActivityRules.effective(record, now: now)) else { return record }
      record.revision += 1
      record.writerPID = CurrentProcess.id
      try write(record)
      return record
    }
  }

  private func write(_ record: ActivityRecord) throws(ActivityError) {
    let bytes: [UInt8]
    do { bytes = try ActivityRecordFormat.encode(record) } catch { throw .encodingFailed(error.reason) }
    _ = try Self.system { () throws(FileSystemError) in
      try root.replaceFile(Self.recordPath(record.id), with: bytes, mode: fileMode, durability: .processCrash)
    }
  }

  /// Runs `body` holding the store's exclusive flock (a stable side file, never a record: records are replaced),
  /// after the other threads of this process that use this store.
  package func withLock<T>(_ body: () throws(ActivityError) -> T) throws(ActivityError) -> T {
    serial.lock()
    defer { serial.unlock() }
    let lock = try Self.system { () throws(FileSystemError) -> DescriptorBox in
      let file = try lockDescriptor()
      try file.fd.lock(.exclusive)
      return file
    }
    defer { lock.fd.unlock() }
    return try body()
  }

  /// The lock file's descriptor, opened (and the file made) on first use; opened again when the file was removed
  /// meanwhile (a lock on a removed file excludes no one). Called with `serial` held.
  private func lockDescriptor() throws(FileSystemError) -> DescriptorBox {
    if let file = lockFile.withLock({ $0 }) {
      guard try file.fd.status().linkCount == 0 else { return file }
      lockFile.withLock { $0 = nil }  // closes it: no one else holds it (`serial`)
    }
    let directory = try root.openDirectory(Self.directory)
    let fd: SystemFD
    do throws(FileSystemError) {
      let made = try directory.open(Self.lockName, [.readOnly, .exclusiveCreate], mode: fileMode)
      try made.setPermissions(fileMode)
      fd = made
    } catch  where error.errno == .fileExists {
      fd = try directory.open(Self.lockName, .readOnly)
    }
    guard try fd.status().kind == .regular else {
      throw FileSystemError(
        "open", directory.path + "/" + Self.lockName, .invalidArgument, reason: "not a regular file")
    }
    let file = DescriptorBox(fd)
    lockFile.withLock { $0 = file }
    return file
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
