import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// The time the activity rules read: when an activity ends by itself (8 hours), goes away after its end (4 hours)
/// or goes stale. The system clock, or one a test sets, shared by processes through a file.
///
/// Which clock a container's activities use: the one given to ``use(_:for:)`` in this process, else the file
/// named by `$GROUPCONTAINER_ACTIVITY_CLOCK_FILE` (``environmentVariable``) when it is set, else ``system``.
/// A test gives its helper processes the variable and advances every process's time at once by rewriting the file;
/// observers re-evaluate when it changes (its directory is watched), so a test never sleeps for hours.
public struct ActivityClock: Sendable {
  private let read: @Sendable () -> Date
  /// The file a ``file(at:)`` clock reads (watched by observers); nil for other clocks.
  package let file: String?

  /// A clock that reads the time from `now`.
  public init(now: @escaping @Sendable () -> Date) {
    read = now
    file = nil
  }

  private init(file: String, read: @escaping @Sendable () -> Date) {
    self.read = read
    self.file = file
  }

  /// The current time by this clock.
  public var now: Date { read() }

  /// The system's clock (`Date()`).
  public static let system = ActivityClock(now: { Date() })

  /// A clock whose time is the number written in the file at `path` (seconds since 1970, as text, e.g.
  /// `1767225600.5`), read at every use, so every process reading the file shares one time. Write it atomically
  /// (a rename). A file that cannot be read gives the system time, with a logged error.
  public static func file(at path: String) -> ActivityClock {
    ActivityClock(file: path) {
      do {
        let bytes = try FileSystem.readFile(path, limit: 64)
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        logger.error("activity clock file '\(path)' holds no time ('\(text.prefix(32))'): using the system clock")
      } catch {
        logger.error("cannot read the activity clock file: \(error); using the system clock")
      }
      return Date()
    }
  }

  /// `GROUPCONTAINER_ACTIVITY_CLOCK_FILE`: the path of a ``file(at:)`` clock every container of the process uses.
  public static let environmentVariable = "GROUPCONTAINER_ACTIVITY_CLOCK_FILE"

  private static let logger = Logger(label: "GroupContainer.LiveActivities")
  private static let overrides = Mutex<[String: ActivityClock]>([:])
  private static let fromEnvironment: ActivityClock? = Environment.value(environmentVariable).map { file(at: $0) }

  /// Makes this process use `clock` for the activities of `container` (nil: back to the default). For tests: each
  /// test's container gets its own clock, so tests running in parallel in one process do not share time.
  public static func use(_ clock: ActivityClock?, for container: GroupContainer) {
    overrides.withLock { $0[container.path] = clock }
  }

  /// The clock the activities of `container` use in this process (see the type's discussion).
  public static func clock(for container: GroupContainer) -> ActivityClock {
    overrides.withLock { $0[container.path] } ?? fromEnvironment ?? .system
  }
}
