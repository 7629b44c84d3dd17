// Helper sub-commands for MemoryPressureTests: processes that grow under a memory limit or a budget, listen for
// levels sent to the group, or watch the disk.
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import MemoryWarnings
import SharedDefaults
import Synchronization
import SystemLayer

/// One line on stdout, from any thread (handlers run on the monitor's delivery queue).
private func out(_ line: String) {
  try? SystemFD.view(1, path: "stdout").writeAll(Array((line + "\n").utf8))
}

/// A stand-in memory tier: 1 MB chunks, trimmed on warning to `MemoryPressure.warningTrimFraction` of its limit
/// and emptied on critical.
private final class ChunkTier: Sendable {
  private let chunks = Mutex<[[UInt8]]>([])
  let limit: Int

  init(limit: Int) { self.limit = limit }

  var bytes: Int { chunks.withLock { $0.reduce(0) { $0 + $1.count } } }

  /// Adds `size` bytes, every page touched (resident, not just reserved).
  func grow(by size: Int = 1 << 20) {
    let chunk = [UInt8](repeating: 0x5a, count: size)
    chunks.withLock { $0.append(chunk) }
  }

  func release(_ level: MemoryPressureLevel) -> Int {
    chunks.withLock { chunks in
      let target = level == .critical ? 0 : Int(Double(limit) * MemoryPressure.warningTrimFraction)
      var held = chunks.reduce(0) { $0 + $1.count }
      var released = 0
      while held > target, let last = chunks.popLast() {
        held -= last.count
        released += last.count
      }
      return released
    }
  }
}

/// Waits until this process is in the memory cgroup named `name` (the test moves it) and the monitor watches that
/// cgroup (it reads the process's cgroup again every second); false after 10 s.
func awaitMonitorInCgroup(named name: String, pressure: MemoryPressure) -> Bool {
  for _ in 0..<1000 {
    let moved = ((try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)) ?? "").contains(name)
    if moved && pressure.signals.contains(where: { $0.hasPrefix("cgroupUsage") && $0.contains(name) }) { return true }
    MonotonicClock.sleep(nanoseconds: 10_000_000)
  }
  return false
}

/// Runs a memory-pressure command (`.pressureCgroup`, `.pressureBudget`, `.pressureListen`, `.pressureDefaults`,
/// `.pressureDisk`: HelperCommand.swift says what each does and prints); exits when done.
func runMemoryPressure(_ command: HelperCommand, container: GroupContainer) throws -> Never {
  let pressure = MemoryPressure.shared
  switch command {
  case .pressureCgroup(let cgroupName, let fileMB):
    // The monitor starts in the test's cgroup (`started`); the test then moves this process, and the monitor must
    // follow it (in CI it once kept watching the old cgroup: warned by its events, never critical, OOM-killed).
    while pressure.signals.isEmpty { MonotonicClock.sleep(nanoseconds: 10_000_000) }
    out("started \(pressure.signals.first { $0.hasPrefix("cgroupUsage") } ?? "without a cgroup")")
    guard awaitMonitorInCgroup(named: cgroupName, pressure: pressure) else {
      out("not followed: \(pressure.signals)")
      exit(1)
    }
    out("moved")
    let cacheFile = try container.directory().openFile(
      "Library/Caches/pressure-file-cache", [.writeOnly, .create, .truncate])
    let megabyte = [UInt8](repeating: 0x33, count: 1 << 20)
    for _ in 0..<fileMB { try cacheFile.writeAll(megabyte) }
    try cacheFile.sync()
    cacheFile.close()
    for line in pressure.signals { out("signal \(line)") }
    let limit = pressure.memoryLimit
    out("limit \(limit)")
    let tier = ChunkTier(limit: limit)
    let residentBeforeCritical = Atomic<Int>(0)
    let registration = pressure.onMemoryWarning(name: "chunks") { level in
      let resident = Int((try? MemorySignals.residentBytes()) ?? 0)
      if level == .critical { residentBeforeCritical.store(resident, ordering: .relaxed) }
      let released = tier.release(level)
      out("handler \(level) released \(released) resident \(resident)")
      return released
    }
    var reports = 0
    var sawCritical = false
    // 512 KB every 20 ms, but never to within 4 MB of the limit: the test checks that the policy delivers critical,
    // not a race with the OOM killer. Near its limit every thread of the process, the monitor's too, stalls in the
    // cgroup's reclaim, and the kernel's own critical event comes with the OOM kill: a CI run was killed after its
    // warning, ~300 ms past the critical threshold at this pace.
    let cgroup = MemorySignals.memoryCgroup()
    for _ in 0..<1200 {
      if let cgroup, let used = MemoryPressure.cgroupWorkingSet(cgroup), used + (4 << 20) >= limit {
        // Holds here (the working set is past the critical threshold) until the delivery.
      } else {
        tier.grow(by: 512 << 10)
      }
      MonotonicClock.sleep(nanoseconds: 20_000_000)
      if pressure.reportCount > reports, let report = pressure.lastReport {
        reports = pressure.reportCount
        out("report \(report.level) \(report.source.rawValue) released \(report.bytesReleased)")
        if report.level == .critical { sawCritical = true }
      }
      if sawCritical { break }
    }
    guard sawCritical else {
      out("no critical: tier \(tier.bytes) bytes, level \(pressure.level)")
      exit(1)
    }
    out(
      "resident before=\(residentBeforeCritical.load(ordering: .relaxed)) after=\((try? MemorySignals.residentBytes()) ?? 0)"
    )
    for _ in 0..<1500 where pressure.level != .normal { MonotonicClock.sleep(nanoseconds: 20_000_000) }
    out(pressure.level == .normal ? "normal" : "still \(pressure.level)")
    registration.cancel()
    exit(0)

  case .pressureBudget(let budgetMB):
    // A monitor of the footprint alone: the machine's own signals (a CI run's system-wide stalls while the cgroup
    // test reclaimed beside it) warned first once, and a level already at warning does not report the footprint.
    let pressure = MemoryPressure(signals: false)
    let budget = budgetMB << 20
    pressure.budget = budget
    let tier = ChunkTier(limit: budget)
    let registration = pressure.onMemoryWarning(name: "chunks") { level in tier.release(level) }
    out("footprint at start \(pressure.footprint) budget \(budget)")
    // Quickly to 60 % of the budget, then 128 KB every 50 ms: slow enough that the 250 ms samples see the footprint
    // inside the warning band (80–92 %) even on a loaded machine.
    while pressure.footprint < budget * 6 / 10 { tier.grow() }
    for _ in 0..<(32 * budgetMB) {
      tier.grow(by: 128 << 10)
      MonotonicClock.sleep(nanoseconds: 50_000_000)
      if let report = pressure.lastReport {
        out("handler \(report.level) \(report.source.rawValue) footprint \(report.footprintBefore) budget \(budget)")
        registration.cancel()
        exit(0)
      }
    }
    out("no warning: footprint \(pressure.footprint) budget \(budget)")
    exit(1)

  case .pressureListen(let name):
    _ = pressure.onMemoryWarning(name: name, container: container) { level in
      out("got \(level)")
      return 0
    }
    out("ready")
    var seen = 0
    while true {
      MonotonicClock.sleep(nanoseconds: 10_000_000)
      if pressure.reportCount > seen, let report = pressure.lastReport {
        seen = pressure.reportCount
        out("report \(report.level) \(report.source.rawValue)")
      }
    }

  case .pressureDefaults(let suite):
    let defaults = try SharedDefaults(suiteName: suite, container: container)
    try defaults.set(String(repeating: "v", count: 1000), forKey: "key")
    out("ready")
    var seen = 0
    while true {
      MonotonicClock.sleep(nanoseconds: 10_000_000)
      if pressure.reportCount > seen, let report = pressure.lastReport {
        seen = pressure.reportCount
        let entries = report.entries.map { "\($0.name)=\($0.bytesReleased)" }.joined(separator: ",")
        out(
          "report \(report.level) \(report.source.rawValue) \(entries) value \(defaults.string(forKey: "key")?.count ?? -1)"
        )
      }
    }

  case .pressureDisk(let cacheDirectory):
    let directory = container.url.appendingPathComponent(cacheDirectory)
    _ = pressure.onLowDiskSpace(name: "disk-tier", directory: directory) { space in
      // Oldest first (by name here: the test names them in order), until the space is no longer low.
      var removed = 0
      let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
      for name in names {
        guard let now = try? DiskSpace(of: directory), MemoryPressure.isLow(now, wasLow: true) else { break }
        let path = directory.appendingPathComponent(name).path
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        if (try? FileManager.default.removeItem(atPath: path)) != nil { removed += bytes }
      }
      out("low \(space.available) \(space.size) removed \(removed)")
      return removed
    }
    out("ready")
    while true { sleep(60) }

  default:
    FileHandle.standardError.write(Data("not a memory pressure command: \(command)\n".utf8))
    exit(2)
  }
}
