import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

// The low-memory eviction policy (issue #10): this file owns it. Thresholds, all documented here and in the
// MemoryWarnings article:
//
// - Ratio signals, with hysteresis (enter at / leave below):
//   - footprint (resident anonymous memory) against `budget`:      warning 80 % / 70 %, critical 92 % / 85 %
//   - cgroup working set (usage − inactive file) against its limit: warning 80 % / 70 %, critical 92 % / 85 %
//   - memory in use system-wide (1 − MemAvailable / MemTotal):      warning 90 % / 85 %, critical 95 % / 92 %
// - Event signals: cgroup v1 `memory.pressure_level` low/medium → warning, critical → critical; PSI triggers on the
//   cgroup v2 `memory.pressure`: "some 200 ms in 2 s" → warning, "full 200 ms in 2 s" → critical; on the system's
//   `/proc/pressure/memory`: "full 100 ms in 2 s" → warning, "full 500 ms in 2 s" → critical ("some" is left out
//   there: one memory-limited cgroup reclaiming raises it for the whole machine — measured: a 96 MB cgroup at its
//   limit fired "some 200 ms in 2 s" in every other process).
// - The level rises at once; it falls only after every signal stayed below it for `dwell` (3 s).
// - Sampling: every second (`samplePeriodMilliseconds`; every 250 ms while a budget is set, every 100 ms while the
//   level is above normal, when memory is near its limit), and at once after any kernel event. The process's cgroup
//   is read again every second: a process moved to another cgroup is watched there.
// - On a rise to warning the handlers run with `.warning` (memory tiers trim to `warningTrimFraction`, 50 % of their
//   limit); on a rise to critical with `.critical` (tiers empty). Simulated levels always run them.
// - Low disk space: available (statvfs f_bavail) below min(10 % of the file system, 1 GiB), over again above
//   min(15 %, 1.5 GiB); registered disk tiers trim to their low watermark.

/// A memory pressure level, from normal to critical.
public enum MemoryPressureLevel: Int, Sendable, Hashable, Comparable, Codable, CaseIterable, CustomStringConvertible {
  /// Enough memory: nothing to do.
  case normal = 0
  /// Memory is getting short: release what is cheap to make again (memory tiers trim to half).
  case warning = 1
  /// The process is about to be stopped or killed: release everything you can (memory tiers empty).
  case critical = 2

  /// Levels order from normal to critical.
  public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

  /// "normal", "warning" or "critical" (what ``init(name:)`` parses).
  public var description: String {
    switch self {
    case .normal: "normal"
    case .warning: "warning"
    case .critical: "critical"
    }
  }

  /// Parses "normal", "warning" or "critical".
  public init?(name: some StringProtocol) {
    guard let level = Self.allCases.first(where: { $0.description == name }) else { return nil }
    self = level
  }
}

/// Which signal raised a level.
public enum MemoryPressureSource: String, Sendable, Hashable, Codable, CaseIterable {
  /// cgroup v1 `memory.pressure_level` events (eventfd through `cgroup.event_control`).
  case cgroupEvent
  /// cgroup v2 `memory.pressure` PSI triggers.
  case cgroupPressure
  /// The cgroup's working set (usage without inactive file pages) against its limit (v1 and v2).
  case cgroupUsage
  /// System-wide PSI triggers on `/proc/pressure/memory`.
  case systemPressure
  /// `MemAvailable` against `MemTotal` (`/proc/meminfo`).
  case memAvailable
  /// The process's footprint against its `budget`.
  case footprint
  /// `simulate(_:)` in this process.
  case simulated
  /// `MemoryPressure.send(_:to:)` from a process of the group.
  case group
}

/// What one delivery of a level did: every handler's name and the bytes it released, and the process's footprint
/// before the handlers ran and after (after freed heap memory went back to the kernel).
public struct MemoryWarningReport: Sendable, CustomStringConvertible {
  /// One handler's part in a delivery.
  public struct Entry: Sendable {
    /// The name the handler was registered with.
    public var name: String
    /// What it returned: the bytes it released.
    public var bytesReleased: Int
  }
  /// The level delivered.
  public var level: MemoryPressureLevel
  /// The signal that raised it.
  public var source: MemoryPressureSource
  /// Every handler that ran, in registration order.
  public var entries: [Entry]
  /// The process's footprint before the handlers ran, in bytes.
  public var footprintBefore: Int
  /// The footprint after them, once freed heap memory went back to the kernel.
  public var footprintAfter: Int
  /// The bytes all handlers released.
  public var bytesReleased: Int { entries.reduce(0) { $0 + $1.bytesReleased } }

  /// The delivery in one line, as logged.
  public var description: String {
    let handlers = entries.map { "\($0.name) released \($0.bytesReleased) bytes" }.joined(separator: ", ")
    return "memory \(level) (\(source.rawValue)): \(entries.count) handler(s) released \(bytesReleased) bytes"
      + (handlers.isEmpty ? "" : " (\(handlers))") + "; footprint \(footprintBefore) → \(footprintAfter) bytes"
  }
}

/// What a low-disk-space handler is told: the file system's size and what is still available, in bytes.
public struct DiskSpace: Sendable, CustomStringConvertible {
  /// The directory the handler was registered for.
  public var path: String
  /// The file system's size, in bytes.
  public var size: Int
  /// The bytes available to unprivileged users.
  public var available: Int

  /// A value, for tests and simulations.
  public init(path: String, size: Int, available: Int) {
    self.path = path
    self.size = size
    self.available = available
  }

  /// The space of the file system holding `directory` now.
  public init(of directory: URL) throws(MemoryPressureError) {
    do {
      let (size, available) = try MemorySignals.diskSpace(of: directory.path)
      self.init(path: directory.path, size: Int(size), available: Int(available))
    } catch {
      throw MemoryPressureError(description: "could not read the disk space of '\(directory.path)': \(error)")
    }
  }

  /// "<available> of <size> bytes available on the file system of '<path>'".
  public var description: String { "\(available) of \(size) bytes available on the file system of '\(path)'" }
}

/// A handler registration; `cancel()` removes it (dropping the object does not: keep it only to cancel).
public final class MemoryWarningRegistration: Sendable {
  private let cancellation: @Sendable () -> Void
  private let cancelled = Atomic<Bool>(false)

  init(_ cancellation: @escaping @Sendable () -> Void) { self.cancellation = cancellation }

  /// Stops calling the handler (a call in progress finishes).
  public func cancel() {
    guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
    cancellation()
  }
}

/// A failure to send a level to a group.
public struct MemoryPressureError: Error, CustomStringConvertible, Sendable {
  /// What could not be sent, to which group, and what to do.
  public var description: String
}

// MARK: - The policy (pure: tests drive it with synthetic samples)

/// One reading of the signals, the policy's input.
package struct MemorySample: Sendable {
  package var footprint: Int?
  package var budget: Int?
  package var cgroupWorkingSet: Int?
  package var cgroupLimit: Int?
  package var memAvailable: Int?
  package var memTotal: Int?
  /// Kernel events (and simulated levels) since the last sample.
  package var events: [(source: MemoryPressureSource, level: MemoryPressureLevel)] = []

  package init(
    footprint: Int? = nil, budget: Int? = nil, cgroupWorkingSet: Int? = nil, cgroupLimit: Int? = nil,
    memAvailable: Int? = nil, memTotal: Int? = nil,
    events: [(source: MemoryPressureSource, level: MemoryPressureLevel)] = []
  ) {
    self.footprint = footprint
    self.budget = budget
    self.cgroupWorkingSet = cgroupWorkingSet
    self.cgroupLimit = cgroupLimit
    self.memAvailable = memAvailable
    self.memTotal = memTotal
    self.events = events
  }
}

/// Levels from samples: hysteresis per ratio signal (enter and leave thresholds) and a minimum dwell before the
/// level falls, so levels do not flap.
package struct MemoryPressurePolicy: Sendable {
  /// Enter and leave thresholds of one ratio signal (used / limit).
  package struct Band: Sendable {
    package var warningEnter: Double, warningExit: Double, criticalEnter: Double, criticalExit: Double

    package func level(_ ratio: Double, current: MemoryPressureLevel) -> MemoryPressureLevel {
      if ratio >= criticalEnter || (current == .critical && ratio >= criticalExit) { return .critical }
      if ratio >= warningEnter || (current >= .warning && ratio >= warningExit) { return .warning }
      return .normal
    }
  }

  /// Footprint against budget, and cgroup working set against its limit.
  package static let usage = Band(warningEnter: 0.80, warningExit: 0.70, criticalEnter: 0.92, criticalExit: 0.85)
  /// Memory in use system-wide (1 − MemAvailable / MemTotal).
  package static let system = Band(warningEnter: 0.90, warningExit: 0.85, criticalEnter: 0.95, criticalExit: 0.92)
  /// The machine's stalls (`systemPressure`) count only while this much of its memory is in use (1 − MemAvailable
  /// / MemTotal), or when that is unknown: a memory-limited cgroup reclaiming under its own limit stalls the whole
  /// machine's counters too — on 2 cores its "full" passed 100 ms in 2 s in CI while 20 of 24 GB were free, and
  /// warned every process of the machine — and trimming them gives that cgroup nothing. Below `system`'s warning
  /// (90 %), so a machine that stalls while mostly in use still warns before MemAvailable alone would.
  package static let systemStallsCountFrom = 0.80

  static func machineIsShort(_ sample: MemorySample) -> Bool {
    guard let total = sample.memTotal, let available = sample.memAvailable, total > 0 else { return true }
    return Double(total - available) / Double(total) >= systemStallsCountFrom
  }

  /// How long every signal must stay below the level before it falls.
  package static let defaultDwell: UInt64 = 3_000_000_000

  package var dwell: UInt64
  package private(set) var level: MemoryPressureLevel = .normal
  private var signalLevels: [MemoryPressureSource: MemoryPressureLevel] = [:]
  /// The last time the signals asked for the current level or more.
  private var lastHeld: UInt64 = 0

  package init(dwell: UInt64 = MemoryPressurePolicy.defaultDwell) { self.dwell = dwell }

  /// Feeds one sample taken at `now` (nanoseconds, monotonic); returns the new level and what raised it when the
  /// level changed.
  package mutating func update(
    _ sample: MemorySample, now: UInt64
  ) -> (level: MemoryPressureLevel, source: MemoryPressureSource?)? {
    var target = MemoryPressureLevel.normal
    var cause: MemoryPressureSource?
    func consider(_ source: MemoryPressureSource, _ used: Int?, _ limit: Int?, _ band: Band) {
      guard let used, let limit, limit > 0 else {
        signalLevels[source] = nil
        return
      }
      let signal = band.level(Double(used) / Double(limit), current: signalLevels[source] ?? .normal)
      signalLevels[source] = signal
      if signal > target || (signal == target && cause == nil && signal > .normal) {
        target = signal
        cause = source
      }
    }
    consider(.footprint, sample.footprint, sample.budget, Self.usage)
    consider(.cgroupUsage, sample.cgroupWorkingSet, sample.cgroupLimit, Self.usage)
    consider(
      .memAvailable, sample.memTotal.flatMap { total in sample.memAvailable.map { total - $0 } }, sample.memTotal,
      Self.system)
    for event in sample.events where event.level > target {
      if event.source == .systemPressure, !Self.machineIsShort(sample) { continue }
      target = event.level
      cause = event.source
    }
    if target >= level {
      lastHeld = now
      guard target > level else { return nil }
      level = target
      return (target, cause)
    }
    guard now &- lastHeld >= dwell else { return nil }
    level = target
    lastHeld = now
    return (target, cause)
  }

  /// A simulated "normal": the level becomes what the ratio signals say now, without waiting for the dwell.
  package mutating func reset(now: UInt64) -> MemoryPressureLevel? {
    let target = signalLevels.values.max() ?? .normal
    guard target != level else { return nil }
    level = target
    lastHeld = now
    return target
  }
}

// MARK: - The monitor

/// Memory warnings for this process, from Linux's signals: the analog of `didReceiveMemoryWarning`.
///
/// ```swift
/// let pressure = MemoryPressure.shared
/// pressure.budget = 32 << 20                          // the widget's limit
/// let registration = pressure.onMemoryWarning(name: "thumbnails") { level in
///   level == .critical ? cache.removeAll() : cache.trim(toFraction: MemoryPressure.warningTrimFraction)
/// }
/// ```
///
/// One monitor per process (`shared`, started on first use): a thread that sleeps in `poll` on the kernel's
/// pressure events and samples the footprint, the cgroup's usage and `MemAvailable` every second. See the
/// thresholds at the top of this file and in the MemoryWarnings article.
///
/// **Behavior.** Handlers run one after another on a delivery queue, never on the monitor's thread, once per rise
/// of the level (normal → warning, warning → critical, normal → critical) and on every simulated level; each
/// returns the bytes it released. Each delivery is logged, one line per handler and a summary, and published as a
/// ``MemoryWarningReport`` (`reports`, `lastReport`). `levels` starts with the current level, then yields each change.
public final class MemoryPressure: Sendable {
  /// The process's monitor, started on first use.
  public static let shared = MemoryPressure(signals: true)

  /// On a warning, a memory tier trims to this fraction of its limit; on critical it empties.
  public static let warningTrimFraction = 0.5
  /// How often the footprint, the cgroup's usage and MemAvailable are sampled (also at once after a kernel event).
  public static let samplePeriodMilliseconds: Int32 = 1000
  /// With a budget set, the footprint is sampled this often: a process growing fast would otherwise cross the
  /// warning band between two samples.
  public static let budgetSamplePeriodMilliseconds: Int32 = 250
  /// Above normal, everything is sampled this often: memory is near its limit, and a process growing at 25 MB/s
  /// crossed from the critical threshold of a 96 MB cgroup to its OOM kill between two 1 s samples.
  public static let elevatedSamplePeriodMilliseconds: Int32 = 100
  /// The file in `.coordination/` through which `send(_:to:)` reaches the processes of a group.
  static let groupFile = CoordinationPaths.memoryPressure

  static let logger = Logger(label: "GroupContainer.MemoryWarnings")

  private struct Handler {
    var name: String
    var call: @Sendable (MemoryPressureLevel) -> Int
  }

  private struct DiskHandler {
    var name: String
    var path: String
    var call: @Sendable (DiskSpace) -> Int
    var low = false
  }

  private struct Simulation {
    var level: MemoryPressureLevel
    var source: MemoryPressureSource
    var done: (@Sendable (MemoryWarningReport?) -> Void)?
  }

  private struct State {
    var policy = MemoryPressurePolicy()
    var budget: Int?
    var handlers: [UInt64: Handler] = [:]
    var diskHandlers: [UInt64: DiskHandler] = [:]
    var levelStreams: [UInt64: AsyncStream<MemoryPressureLevel>.Continuation] = [:]
    var reportStreams: [UInt64: AsyncStream<MemoryWarningReport>.Continuation] = [:]
    var lastReport: MemoryWarningReport?
    var reportCount = 0
    var nextID: UInt64 = 1
    var simulations: [Simulation] = []
    /// Containers joined (by path): the last sequence seen of their group file.
    var groups: [String: UInt64] = [:]
    var signals: [String] = []
    var lastDiskCheck: UInt64 = 0
  }

  private let state = Mutex(State())
  private let wake: EventFD?
  private let delivery = DispatchQueue(label: "GroupContainer.MemoryWarnings.delivery")

  /// `signals`: read the kernel's signals (false: only the footprint against a budget and simulated levels, for
  /// tests of the delivery); `dwell`: the policy's (tests make it long, so a level they set stays while they look).
  /// The monitor thread lives as long as the process.
  package init(signals: Bool, dwell: UInt64 = MemoryPressurePolicy.defaultDwell) {
    state.withLock { $0.policy.dwell = dwell }
    wake = try? EventFD(name: "memory pressure monitor wake-up")
    // All of the thread's work is driven by the clock and the kernel's signals, none by an operation.
    let thread = Thread { [self] in IOFaultInjection.clockWork { self.run(kernelSignals: signals) } }
    thread.name = "GroupContainer.MemoryWarnings"
    thread.start()
  }

  // MARK: Public API

  /// The current level.
  public var level: MemoryPressureLevel { state.withLock { $0.policy.level } }

  /// The current level, then each change (the newest 16 are kept for a slow consumer).
  public var levels: AsyncStream<MemoryPressureLevel> {
    let (stream, continuation) = AsyncStream.makeStream(
      of: MemoryPressureLevel.self, bufferingPolicy: .bufferingNewest(16))
    let id = state.withLock { s in
      defer { s.nextID += 1 }
      s.levelStreams[s.nextID] = continuation
      continuation.yield(s.policy.level)
      return s.nextID
    }
    continuation.onTermination = { [weak self] _ in
      self?.state.withLock { _ = $0.levelStreams.removeValue(forKey: id) }
    }
    return stream
  }

  /// Every delivery's report from now on.
  public var reports: AsyncStream<MemoryWarningReport> {
    let (stream, continuation) = AsyncStream.makeStream(
      of: MemoryWarningReport.self, bufferingPolicy: .bufferingNewest(16))
    let id = state.withLock { s in
      defer { s.nextID += 1 }
      s.reportStreams[s.nextID] = continuation
      return s.nextID
    }
    continuation.onTermination = { [weak self] _ in
      self?.state.withLock { _ = $0.reportStreams.removeValue(forKey: id) }
    }
    return stream
  }

  /// The last delivery's report.
  public var lastReport: MemoryWarningReport? { state.withLock { $0.lastReport } }
  /// How many deliveries this process has had.
  public var reportCount: Int { state.withLock { $0.reportCount } }

  /// The process's own memory budget in bytes (nil: none), like an iOS extension's memory limit: the footprint
  /// (resident anonymous memory) against it raises warning at 80 % and critical at 92 %.
  public var budget: Int? {
    get { state.withLock { $0.budget } }
    set {
      state.withLock { $0.budget = newValue }
      wake?.signal()
    }
  }

  /// The memory this process may use, in bytes: min(budget, the cgroup's limit, MemTotal) — never the host's RAM
  /// alone. Derive default tier limits from it.
  public var memoryLimit: Int {
    var limit = (try? MemorySignals.readTable("/proc/meminfo"))?["MemTotal"].map(Int.init) ?? Int.max
    if let cgroup = MemorySignals.memoryCgroup(), let cgroupLimit = Self.cgroupLimit(cgroup) {
      limit = min(limit, cgroupLimit)
    }
    if let budget { limit = min(limit, budget) }
    return limit
  }

  /// The footprint the budget is measured against: the process's resident anonymous memory, in bytes.
  public var footprint: Int { Int((try? MemorySignals.footprint()) ?? 0) }

  /// Which signals the monitor uses in this process, and why others are missing (one line each).
  public var signals: [String] { state.withLock { $0.signals } }

  /// Calls `handler` on each memory warning (the analog of `didReceiveMemoryWarning`): release what can be made
  /// again and return how many bytes that was. With `container`, levels sent to that group (`send(_:to:)`) reach
  /// this process too (`join`).
  public func onMemoryWarning(
    name: String, container: GroupContainer? = nil,
    _ handler: @escaping @Sendable (MemoryPressureLevel) -> Int
  ) -> MemoryWarningRegistration {
    if let container {
      do { try join(container) } catch {
        Self.logger.warning("\(name): levels sent to the group will not reach this process: \(error)")
      }
    }
    let id = state.withLock { s in
      defer { s.nextID += 1 }
      s.handlers[s.nextID] = Handler(name: name, call: handler)
      return s.nextID
    }
    return MemoryWarningRegistration { [weak self] in self?.state.withLock { _ = $0.handlers.removeValue(forKey: id) } }
  }

  /// Calls `handler` when the file system holding `directory` runs low on space (available below min(10 %, 1 GiB);
  /// again after it recovered past min(15 %, 1.5 GiB)): trim the disk tier to its low watermark and return the
  /// bytes removed. iOS purges Caches, never Documents: register caches only.
  public func onLowDiskSpace(
    name: String, directory: URL, _ handler: @escaping @Sendable (DiskSpace) -> Int
  ) -> MemoryWarningRegistration {
    let id = state.withLock { s in
      defer { s.nextID += 1 }
      s.diskHandlers[s.nextID] = DiskHandler(name: name, path: directory.path, call: handler)
      s.lastDiskCheck = 0
      return s.nextID
    }
    wake?.signal()
    return MemoryWarningRegistration { [weak self] in
      self?.state.withLock { _ = $0.diskHandlers.removeValue(forKey: id) }
    }
  }

  /// Whether `space` counts as low: available below min(10 % of the file system, 1 GiB) (`wasLow`: stays low until
  /// available is above min(15 %, 1.5 GiB)).
  public static func isLow(_ space: DiskSpace, wasLow: Bool) -> Bool {
    let threshold = wasLow ? min(space.size / 100 * 15, 3 << 29) : min(space.size / 10, 1 << 30)
    return space.available < threshold
  }

  /// Delivers `level` in this process as if it came from the kernel: handlers run with it (also when the level
  /// already was that high); `.normal` returns the level to what the real signals say at once. Returns the
  /// delivery's report (nil for `.normal`).
  @discardableResult
  public func simulate(_ level: MemoryPressureLevel) async -> MemoryWarningReport? {
    await withCheckedContinuation { continuation in
      enqueue(Simulation(level: level, source: .simulated) { continuation.resume(returning: $0) })
    }
  }

  /// Sends `level` to every process of the group that uses `container` (those that joined it: a handler registered
  /// with the container, or `join`), like the simulator's "Simulate Memory Warning"; each process's monitor
  /// delivers it as if it came from the kernel. Written as `.coordination/memory-pressure`, replaced atomically.
  public static func send(_ level: MemoryPressureLevel, to container: GroupContainer) throws(MemoryPressureError) {
    let sequence = UInt64(bitPattern: RealtimeClock.nanoseconds()) ^ UInt64(UInt32.random(in: 0...UInt32.max))
    let line = "v1 \(sequence) \(level) \(CurrentProcess.id)\n"
    do {
      let root = try container.directory()
      try root.replaceFile(groupFile, with: Array(line.utf8), mode: container.sharing.fileMode)
    } catch {
      throw MemoryPressureError(
        description: "could not send memory \(level) to the group '\(container.identifier)': writing "
          + "'\(container.path)/\(groupFile)' failed: \(error); check that the container exists and is writable")
    }
  }

  /// Receives the levels `send(_:to:)` sends to `container`'s group (idempotent). Levels sent before are ignored.
  public func join(_ container: GroupContainer) throws(MemoryPressureError) {
    let path = container.path
    guard state.withLock({ $0.groups[path] == nil }) else { return }
    let root: ContainerDirectory
    do { root = try container.directory() } catch {
      throw MemoryPressureError(description: "could not open the container '\(path)': \(error)")
    }
    let current = Self.readGroupFile(root)?.sequence ?? 0
    let joined = state.withLock { s -> Bool in
      guard s.groups[path] == nil else { return false }
      s.groups[path] = current
      return true
    }
    guard joined else { return }
    let name = CoordinationPaths.Name.memoryPressure
    do {
      _ = try Watcher.shared.watch(path + "/" + CoordinationPaths.directory, mask: Watcher.movedTo) {
        [weak self] event in
        guard event.name == name, let self else { return }
        // Read off the watcher thread, which must return quickly.
        self.delivery.async { self.receiveGroupLevel(root: root, path: path) }
      }
    } catch {
      _ = state.withLock { $0.groups.removeValue(forKey: path) }
      throw MemoryPressureError(
        description: "could not watch '\(path)/.coordination' for memory levels sent to the group: \(error)")
    }
  }

  // MARK: Group levels

  private static func readGroupFile(_ root: ContainerDirectory) -> (sequence: UInt64, level: MemoryPressureLevel)? {
    guard let (bytes, _) = try? root.readFile(groupFile, limit: 256) else { return nil }
    guard let parsed = parseGroupFile(bytes) else {
      logger.warning("ignoring a malformed '\(root.path)/\(groupFile)'")
      return nil
    }
    return parsed
  }

  /// The group file's `v1 <sequence> <level>`, nil for anything else (reached by the fuzz harness too).
  static func parseGroupFile(_ bytes: [UInt8]) -> (sequence: UInt64, level: MemoryPressureLevel)? {
    let fields = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
    guard fields.count >= 3, fields[0] == "v1", let sequence = UInt64(fields[1]),
      let level = MemoryPressureLevel(name: fields[2])
    else { return nil }
    return (sequence, level)
  }

  private func receiveGroupLevel(root: ContainerDirectory, path: String) {
    guard let (sequence, level) = Self.readGroupFile(root) else { return }
    let isNew = state.withLock { s -> Bool in
      guard s.groups[path] != sequence else { return false }
      s.groups[path] = sequence
      return true
    }
    guard isNew else { return }
    Self.logger.notice("memory \(level) sent to the group of '\(path)'")
    enqueue(Simulation(level: level, source: .group, done: nil))
  }

  private func enqueue(_ simulation: Simulation) {
    state.withLock { $0.simulations.append(simulation) }
    if let wake { wake.signal() } else { simulation.done?(nil) }
  }

  // MARK: The monitor thread

  /// The kernel's event sources this process could set up.
  private struct KernelSources {
    var cgroup: MemorySignals.Cgroup?
    var cgroupEvents: [(event: CgroupV1PressureEvent, level: MemoryPressureLevel)] = []
    var triggers: [(trigger: PressureTrigger, source: MemoryPressureSource, level: MemoryPressureLevel)] = []
    var notes: [String] = []

    /// Ends the registrations (closing an eventfd ends its cgroup v1 event; closing a trigger's file, the trigger).
    mutating func close() {
      cgroupEvents = []
      triggers = []
    }
  }

  private static func setUpKernelSources() -> KernelSources {
    var sources = KernelSources()
    sources.cgroup = MemorySignals.memoryCgroup()
    if let cgroup = sources.cgroup {
      sources.notes.append("cgroupUsage: \(cgroup) working set against its limit")
      switch cgroup.version {
      case .v1:
        for (name, level) in [("low", MemoryPressureLevel.warning), ("medium", .warning), ("critical", .critical)] {
          do {
            sources.cgroupEvents.append(
              (try CgroupV1PressureEvent(cgroupDirectory: cgroup.directory, level: name), level))
          } catch {
            sources.notes.append("cgroupEvent \(name): unavailable (\(error))")
          }
        }
        if !sources.cgroupEvents.isEmpty {
          sources.notes.append(
            "cgroupEvent: memory.pressure_level \(sources.cgroupEvents.map(\.event.level).joined(separator: "/"))")
        }
        sources.notes.append("cgroupPressure: unavailable (memory.pressure is cgroup v2 only)")
      case .v2:
        sources.notes.append("cgroupEvent: unavailable (memory.pressure_level is cgroup v1 only)")
        addTriggers(path: cgroup.directory + "/memory.pressure", source: .cgroupPressure, into: &sources)
      }
    } else {
      sources.notes.append("cgroupUsage, cgroupEvent, cgroupPressure: unavailable (no memory cgroup found)")
    }
    addTriggers(path: "/proc/pressure/memory", source: .systemPressure, into: &sources)
    sources.notes.append("memAvailable: /proc/meminfo")
    sources.notes.append("footprint: /proc/self/statm against the budget")
    return sources
  }

  /// The cgroup's own stalls: "some" 200 ms in a 2 s window → warning, "full" 200 ms → critical. The system's:
  /// "full" only (100 ms → warning, 500 ms → critical): any memory-limited cgroup reclaiming raises the system's
  /// "some", which would warn every process of the machine. 2 s windows: the unprivileged minimum unit.
  private static func addTriggers(
    path: String, source: MemoryPressureSource, into sources: inout KernelSources
  ) {
    let specifications: [(kind: String, stall: Int, level: MemoryPressureLevel)] =
      source == .systemPressure
      ? [("full", 100_000, .warning), ("full", 500_000, .critical)]
      : [("some", 200_000, .warning), ("full", 200_000, .critical)]
    var made: [String] = []
    for (kind, stall, level) in specifications {
      do {
        let trigger = try PressureTrigger(
          path: path, kind: kind, stallMicroseconds: stall, windowMicroseconds: 2_000_000)
        sources.triggers.append((trigger, source, level))
        made.append(trigger.specification)
      } catch {
        sources.notes.append("\(source.rawValue) \(kind): unavailable (\(error))")
      }
    }
    if !made.isEmpty { sources.notes.append("\(source.rawValue): \(path) triggers \(made.joined(separator: ", "))") }
  }

  private static func cgroupLimit(_ cgroup: MemorySignals.Cgroup) -> Int? {
    let unlimited: Int64 = 1 << 60
    switch cgroup.version {
    case .v1:
      // The hierarchical limit is the smallest of the cgroup's and its ancestors'.
      let stat = try? MemorySignals.readTable(cgroup.directory + "/memory.stat")
      let limit =
        stat?["hierarchical_memory_limit"]
        ?? ((try? MemorySignals.readNumber(cgroup.directory + "/memory.limit_in_bytes")) ?? nil)
      guard let limit, limit < unlimited else { return nil }
      return Int(limit)
    case .v2:
      guard let limit = (try? MemorySignals.readNumber(cgroup.directory + "/memory.max")) ?? nil, limit < unlimited
      else { return nil }
      return Int(limit)
    }
  }

  /// Usage without the inactive file pages the kernel can drop at once (what cadvisor calls the working set).
  package static func cgroupWorkingSet(_ cgroup: MemorySignals.Cgroup) -> Int? {
    let stat = try? MemorySignals.readTable(cgroup.directory + "/memory.stat")
    switch cgroup.version {
    case .v1:
      guard let usage = (try? MemorySignals.readNumber(cgroup.directory + "/memory.usage_in_bytes")) ?? nil else {
        return nil
      }
      return Int(max(0, usage - (stat?["total_inactive_file"] ?? 0)))
    case .v2:
      guard let usage = (try? MemorySignals.readNumber(cgroup.directory + "/memory.current")) ?? nil else {
        return nil
      }
      return Int(max(0, usage - (stat?["inactive_file"] ?? 0)))
    }
  }

  private func run(kernelSignals: Bool) {
    guard let wake else {
      Self.logger.error("memory pressure monitor not started: no eventfd")
      return
    }
    var sources = kernelSignals ? Self.setUpKernelSources() : KernelSources(notes: ["none: a monitor for tests"])
    func watch() -> [(fd: Int32, events: Int16)] {
      state.withLock { $0.signals = sources.notes }
      for note in sources.notes { Self.logger.debug("memory signal \(note)") }
      return [(wake.fd.rawValue, Poll.readable)]
        + sources.cgroupEvents.map { ($0.event.event.fd.rawValue, Poll.readable) }
        + sources.triggers.map { ($0.trigger.fd.rawValue, Poll.priority) }
    }
    var descriptors = watch()
    var triggersAlive = Array(repeating: true, count: sources.triggers.count)
    let period = UInt64(Self.samplePeriodMilliseconds) * 1_000_000
    var cgroupCheckedAt = MonotonicClock.nanoseconds()
    while true {
      // A process moved to another cgroup (by systemd, a container runtime, its parent) is watched there: its
      // limit and its reclaim are the new cgroup's. Checked once a period (one small read of /proc).
      if kernelSignals, MonotonicClock.nanoseconds() &- cgroupCheckedAt >= period {
        cgroupCheckedAt = MonotonicClock.nanoseconds()
        let cgroup = MemorySignals.memoryCgroup()
        if cgroup != sources.cgroup {
          Self.logger.notice(
            "memory pressure: this process moved to \(cgroup.map(String.init(describing:)) ?? "no memory cgroup")")
          sources.close()
          sources = Self.setUpKernelSources()
          descriptors = watch()
          triggersAlive = Array(repeating: true, count: sources.triggers.count)
        }
      }
      let ready: [Int16]
      let timeout =
        level != .normal
        ? Self.elevatedSamplePeriodMilliseconds
        : budget == nil ? Self.samplePeriodMilliseconds : Self.budgetSamplePeriodMilliseconds
      do { ready = try Poll.wait(descriptors, timeoutMilliseconds: timeout) } catch {
        Self.logger.error("memory pressure monitor: \(error)")
        MonotonicClock.sleep(nanoseconds: period)
        continue
      }
      var events: [(source: MemoryPressureSource, level: MemoryPressureLevel)] = []
      if ready[0] != 0 { wake.consume() }
      for (index, source) in sources.cgroupEvents.enumerated() where ready[1 + index] != 0 {
        source.event.event.consume()  // re-arms: an unread counter keeps the descriptor readable
        events.append((.cgroupEvent, source.level))
      }
      let base = 1 + sources.cgroupEvents.count
      for (index, source) in sources.triggers.enumerated() where ready[base + index] != 0 && triggersAlive[index] {
        if ready[base + index] & Poll.error != 0 {
          // The cgroup went away (or the trigger was dropped): poll would report it forever.
          triggersAlive[index] = false
          descriptors[base + index].fd = -1
          Self.logger.warning("memory pressure trigger \(source.trigger.specification) failed; no longer used")
          continue
        }
        events.append((source.source, source.level))
      }
      sample(kernelSignals: kernelSignals, cgroup: sources.cgroup, events: events)
    }
  }

  /// Takes a sample, feeds the policy and starts the deliveries it calls for.
  private func sample(
    kernelSignals: Bool, cgroup: MemorySignals.Cgroup?,
    events: [(source: MemoryPressureSource, level: MemoryPressureLevel)]
  ) {
    var sample = MemorySample(events: events)
    let now = MonotonicClock.nanoseconds()
    if kernelSignals {
      if let cgroup {
        sample.cgroupWorkingSet = Self.cgroupWorkingSet(cgroup)
        sample.cgroupLimit = Self.cgroupLimit(cgroup)
      }
      if let meminfo = try? MemorySignals.readTable("/proc/meminfo") {
        sample.memTotal = meminfo["MemTotal"].map(Int.init)
        sample.memAvailable = meminfo["MemAvailable"].map(Int.init)
      }
    }
    sample.footprint = (try? MemorySignals.footprint()).map(Int.init)
    var deliveries: [(MemoryPressureLevel, MemoryPressureSource, (@Sendable (MemoryWarningReport?) -> Void)?)] = []
    var disk: [(UInt64, DiskHandler)] = []
    state.withLock { s in
      sample.budget = s.budget
      var reset = false
      for simulation in s.simulations {
        if simulation.level == .normal {
          reset = true
          simulation.done?(nil)
        } else {
          sample.events.append((simulation.source, simulation.level))
          deliveries.append((simulation.level, simulation.source, simulation.done))
        }
      }
      s.simulations.removeAll()
      let previous = s.policy.level
      var change = s.policy.update(sample, now: now)
      if reset, let level = s.policy.reset(now: now) { change = (level, nil) }
      if let change {
        Self.logger.notice(
          "memory pressure: \(change.level)\(change.source.map { " (\($0.rawValue))" } ?? "")")
        for continuation in s.levelStreams.values { continuation.yield(change.level) }
        // A rise runs the handlers (a fall does not), unless a simulated level as high in this sample runs them.
        if change.level > previous, !deliveries.contains(where: { $0.0 >= change.level }), let source = change.source {
          deliveries.append((change.level, source, nil))
        }
      }
      if now &- s.lastDiskCheck >= UInt64(Self.samplePeriodMilliseconds) * 1_000_000, !s.diskHandlers.isEmpty {
        s.lastDiskCheck = now
        disk = s.diskHandlers.sorted { $0.key < $1.key }
      }
    }
    for (level, source, done) in deliveries { deliver(level, source: source, done: done) }
    if !disk.isEmpty { checkDisk(disk) }
  }

  private func deliver(
    _ level: MemoryPressureLevel, source: MemoryPressureSource, done: (@Sendable (MemoryWarningReport?) -> Void)?
  ) {
    delivery.async { [self] in
      let handlers = state.withLock { $0.handlers.sorted { $0.key < $1.key }.map(\.value) }
      let before = footprint
      var entries: [MemoryWarningReport.Entry] = []
      for handler in handlers {
        let released = handler.call(level)
        Self.logger.notice("memory \(level) (\(source.rawValue)): \(handler.name) released \(released) bytes")
        entries.append(.init(name: handler.name, bytesReleased: released))
      }
      MemorySignals.returnFreedMemory()
      let report = MemoryWarningReport(
        level: level, source: source, entries: entries, footprintBefore: before, footprintAfter: footprint)
      Self.logger.notice("\(report.description)")
      let streams = state.withLock { s in
        s.lastReport = report
        s.reportCount += 1
        return Array(s.reportStreams.values)
      }
      for continuation in streams { continuation.yield(report) }
      done?(report)
    }
  }

  /// Runs on the monitor thread; the handlers run on the delivery queue.
  private func checkDisk(_ handlers: [(UInt64, DiskHandler)]) {
    for (id, handler) in handlers {
      let space: DiskSpace
      do {
        let (size, available) = try MemorySignals.diskSpace(of: handler.path)
        space = DiskSpace(path: handler.path, size: Int(size), available: Int(available))
      } catch {
        continue  // the directory is gone (a cache removed): nothing to trim
      }
      let low = Self.isLow(space, wasLow: handler.low)
      guard low != handler.low else { continue }
      state.withLock { $0.diskHandlers[id]?.low = low }
      guard low else {
        Self.logger.notice("disk space recovered for \(handler.name): \(space)")
        continue
      }
      delivery.async {
        let removed = handler.call(space)
        Self.logger.notice("low disk space (\(space)): \(handler.name) removed \(removed) bytes")
      }
    }
  }
}
