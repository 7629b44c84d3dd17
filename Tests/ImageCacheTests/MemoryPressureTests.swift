import FileCoordination
import Foundation
import Glibc
import GroupContainerCore
import MemoryWarnings
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The low-memory policy: levels from synthetic samples (hysteresis, dwell, mapping), handler delivery, and real
/// processes under the kernel's signals (a memory-limited cgroup v1, a budget), levels sent to the group through
/// `groupctl cache pressure`, and low disk space on a small tmpfs.
///
/// Mutants this suite catches (each run once, watched failing, then restored):
/// - hysteresis removed (`Band.level` ignoring `current`, `defaultDwell` 0): `aSignalAroundAThresholdDoesNotFlap`
///   sees warning/normal 100 times, `aSimulatedNormalEndsTheDwellAtOnce` fails; `defaultDwell` 0 alone:
///   `theLevelFallsOnlyAfterTheDwell` fails;
/// - the cgroup v1 event fd never re-armed (`consume()` not called in the monitor loop): the child in the cgroup
///   never returns to normal (`aChildInAMemoryLimitedCgroupGetsWarningThenCriticalAndReleases`);
/// - a handler registered but not called on critical (a rise delivered only when it is to `.warning`): the same
///   child gets no critical delivery (it grows to 4 MB under its limit, then waits for it) and says so;
/// - the monitor not following a move to another cgroup (`run` never reading the cgroup again): the same child
///   says `not followed` (its monitor watched the test's cgroup: in CI, warned by that cgroup's events, OOM-killed);
/// - a defaults suite that drops its values without marking them for a reload (`generation` left as it was):
///   `anIdleDefaultsSuiteDropsWhatItCanReadAgain` reads nothing back.
@Suite(.runSlot(.minutes(3))) struct MemoryPressureTests {
  // Children measure their resident size: with this glibc threshold the chunks they release are mmapped and
  // leave the process when freed (inherited by every child this suite starts; it runs in a process of its own).
  init() { _ = mmapThresholdForChildren }

  static let group = "group.com.example.pressure"
  static let second: UInt64 = 1_000_000_000
  /// The dwell of the monitors that delivery tests make: a simulated level stays until they set another.
  static let hour = 3600 * second

  // MARK: The policy, on synthetic samples

  @Test func aSignalAroundAThresholdDoesNotFlap() {
    var policy = MemoryPressurePolicy()
    var changes: [MemoryPressureLevel] = []
    let limit = 100 << 20
    // The footprint wanders around the 80 % warning threshold every 100 ms for 10 s.
    for step in 0..<100 {
      let used = step % 2 == 0 ? 81 * limit / 100 : 78 * limit / 100
      if let change = policy.update(
        MemorySample(footprint: used, budget: limit), now: UInt64(step) * Self.second / 10)
      {
        changes.append(change.level)
      }
    }
    #expect(changes == [.warning], "the level flapped: \(changes)")
    #expect(policy.level == .warning)
  }

  @Test func theLevelFallsOnlyAfterTheDwell() {
    var policy = MemoryPressurePolicy()
    let limit = 100 << 20
    #expect(
      policy.update(MemorySample(cgroupWorkingSet: 93 * limit / 100, cgroupLimit: limit), now: 0)?.level == .critical)
    // Well below every threshold, but within the documented 3 s dwell: no change.
    let dwell = 3 * Self.second
    for step in 1..<6 {
      let now = UInt64(step) * Self.second / 2
      #expect(policy.update(MemorySample(cgroupWorkingSet: limit / 10, cgroupLimit: limit), now: now) == nil)
    }
    let change = policy.update(MemorySample(cgroupWorkingSet: limit / 10, cgroupLimit: limit), now: dwell)
    #expect(change?.level == .normal)
  }

  @Test func signalsMapToLevels() {
    func level(_ sample: MemorySample) -> MemoryPressureLevel {
      var policy = MemoryPressurePolicy()
      return policy.update(sample, now: 1)?.level ?? .normal
    }
    let mb = 1 << 20
    #expect(level(MemorySample(footprint: 10 * mb, budget: 32 * mb)) == .normal)
    #expect(level(MemorySample(footprint: 26 * mb, budget: 32 * mb)) == .warning)
    #expect(level(MemorySample(footprint: 30 * mb, budget: 32 * mb)) == .critical)
    #expect(level(MemorySample(cgroupWorkingSet: 85 * mb, cgroupLimit: 100 * mb)) == .warning)
    #expect(level(MemorySample(memAvailable: 8 * mb, memTotal: 100 * mb)) == .warning)
    #expect(level(MemorySample(memAvailable: 4 * mb, memTotal: 100 * mb)) == .critical)
    #expect(level(MemorySample(events: [(.cgroupEvent, .warning)])) == .warning)
    #expect(level(MemorySample(events: [(.systemPressure, .critical)])) == .critical)
    // The machine's stalls count while most of its memory is in use (a cgroup reclaiming under its own limit
    // stalls the machine's counters too, with most of its memory free).
    #expect(
      level(MemorySample(memAvailable: 80 * mb, memTotal: 100 * mb, events: [(.systemPressure, .warning)])) == .normal)
    #expect(
      level(MemorySample(memAvailable: 15 * mb, memTotal: 100 * mb, events: [(.systemPressure, .warning)])) == .warning)
    #expect(
      level(MemorySample(memAvailable: 80 * mb, memTotal: 100 * mb, events: [(.cgroupEvent, .warning)])) == .warning)
    // No budget: the footprint alone never raises a level.
    #expect(level(MemorySample(footprint: 900 * mb)) == .normal)
    // The source of a rise is the signal that asked for the highest level.
    var policy = MemoryPressurePolicy()
    let change = policy.update(
      MemorySample(footprint: 26 * mb, budget: 32 * mb, events: [(.cgroupEvent, .critical)]), now: 1)
    #expect(change?.level == .critical && change?.source == .cgroupEvent)
  }

  @Test func aSimulatedNormalEndsTheDwellAtOnce() {
    var policy = MemoryPressurePolicy()
    #expect(policy.update(MemorySample(events: [(.simulated, .critical)]), now: 0)?.level == .critical)
    #expect(policy.update(MemorySample(), now: 1) == nil)
    #expect(policy.reset(now: 2) == .normal)
  }

  // MARK: Delivery

  @Test func simulatedLevelsRunEveryHandler() async {
    let pressure = MemoryPressure(signals: false, dwell: Self.hour)
    let calls = Mutex<[String]>([])
    let first = pressure.onMemoryWarning(name: "first") { level in
      calls.withLock { $0.append("first \(level)") }
      return 100
    }
    let second = pressure.onMemoryWarning(name: "second") { level in
      calls.withLock { $0.append("second \(level)") }
      return 20
    }
    let cancelled = pressure.onMemoryWarning(name: "cancelled") { _ in
      calls.withLock { $0.append("cancelled") }
      return 1
    }
    cancelled.cancel()
    let warning = await pressure.simulate(.warning)
    #expect(warning?.level == .warning && warning?.source == .simulated)
    let critical = await pressure.simulate(.critical)
    #expect(critical?.level == .critical)
    #expect(critical?.entries.map(\.name) == ["first", "second"])
    #expect(critical?.bytesReleased == 120)
    #expect(pressure.level == .critical)
    #expect(calls.withLock { $0 } == ["first warning", "second warning", "first critical", "second critical"])
    #expect(await pressure.simulate(.normal) == nil)
    #expect(pressure.level == .normal)
    first.cancel()
    second.cancel()
  }

  /// A handler's name is logged as given: an image cache registers "image cache 'thumbnails'", which the notice
  /// quoted again ("'image cache 'thumbnails''", issue #35).
  @Test func aHandlersNameIsLoggedAsGiven() async {
    let pressure = MemoryPressure(signals: false, dwell: Self.hour)
    let name = "image cache 'names-\(UUID().uuidString.prefix(8))'"
    let registration = pressure.onMemoryWarning(name: name) { _ in 7 }
    await pressure.simulate(.warning)
    registration.cancel()
    let lines = libraryLog().filter { $0.contains(name) }
    #expect(lines.contains { $0.hasSuffix("memory warning (simulated): \(name) released 7 bytes") }, "\(lines)")
    #expect(!lines.contains { $0.contains("'\(name)'") }, "\(lines)")
  }

  @Test func levelsStartWithTheCurrentLevelThenYieldEachChange() async {
    let pressure = MemoryPressure(signals: false, dwell: Self.hour)
    var levels = pressure.levels.makeAsyncIterator()
    #expect(await levels.next() == .normal)
    await pressure.simulate(.warning)
    #expect(await levels.next() == .warning)
    await pressure.simulate(.critical)
    #expect(await levels.next() == .critical)
    await pressure.simulate(.normal)
    #expect(await levels.next() == .normal)
  }

  @Test func memoryLimitIsNeverTheHostsRAMAlone() {
    let pressure = MemoryPressure.shared
    let total = (try? MemorySignals.readTable("/proc/meminfo"))?["MemTotal"].map(Int.init) ?? 0
    #expect(total > 0)
    #expect(pressure.memoryLimit <= total)
  }

  /// Which of the kernel's signals this machine has; each absent one is named with its reason.
  @Test func theMonitorUsesTheSignalsThisMachineHas() async throws {
    let pressure = MemoryPressure.shared
    _ = pressure.level  // starts it
    var signals: [String] = []
    for _ in 0..<500 where signals.isEmpty {
      signals = pressure.signals
      try? await Task.sleep(for: .seconds(0.01))
    }
    #expect(signals.contains { $0.hasPrefix("footprint:") })
    #expect(signals.contains { $0.hasPrefix("memAvailable:") })
    if let cgroup = MemorySignals.memoryCgroup() {
      #expect(signals.contains { $0.hasPrefix("cgroupUsage: \(cgroup)") })
      if cgroup.version == .v1 && geteuid() == 0 {
        #expect(
          signals.contains { $0.hasPrefix("cgroupEvent: memory.pressure_level low/medium/critical") }, "\(signals)")
      }
    } else {
      #expect(signals.contains { $0.contains("no memory cgroup found") })
    }
    if FileManager.default.fileExists(atPath: "/proc/pressure/memory") && geteuid() == 0 {
      #expect(signals.contains { $0.hasPrefix("systemPressure: /proc/pressure/memory triggers") }, "\(signals)")
    }
  }

  /// cgroup v2: `memory.max` bounds `memoryLimit` and `memory.pressure` PSI triggers are set up.
  @Test(
    .enabled(
      if: MemorySignals.memoryCgroup()?.version == .v2,
      "the memory controller is not on cgroup v2 here (this machine mounts it as cgroup v1)"))
  func cgroupV2LimitAndPressureTriggers() async throws {
    let cgroup = try #require(MemorySignals.memoryCgroup())
    let pressure = MemoryPressure.shared
    _ = pressure.level
    var signals: [String] = []
    for _ in 0..<500 where signals.isEmpty {
      signals = pressure.signals
      try? await Task.sleep(for: .seconds(0.01))
    }
    #expect(signals.contains { $0.hasPrefix("cgroupPressure:") }, "\(signals)")
    if let max = try MemorySignals.readNumber(cgroup.directory + "/memory.max") {
      #expect(pressure.memoryLimit <= Int(max))
    }
  }

  // MARK: Real processes

  /// A child process moved, once its monitor runs, into a cgroup v1 memory cgroup limited to 96 MB (made beneath the
  /// test's own memory cgroup) is watched there, writes 24 MB of file cache, then grows a registered tier until the kernel's signals give warning, then
  /// critical; its handler releases what it holds and its resident memory falls; afterwards the level returns to
  /// normal.
  @Test(.enabled(if: MemoryCgroupFixture.available, MemoryCgroupFixture.unavailableReason))
  func aChildInAMemoryLimitedCgroupGetsWarningThenCriticalAndReleases() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let cgroup = try MemoryCgroupFixture(limit: 96 << 20)
    defer { cgroup.remove() }
    let child = try Child(.pressureCgroup(cgroup: cgroup.name, fileCacheMB: 24), root: root.path, group: Self.group)
    // Moved once its monitor watches the test's cgroup: the monitor must follow the move.
    await child.line() { $0.hasPrefix("started") }
    try cgroup.add(pid: child.pid)
    await child.line() { $0 == "normal" || $0.hasPrefix("still") || $0.hasPrefix("no critical") }
    let status = await child.exit()
    let lines = child.output
    #expect(status == 0, "\(lines)")
    #expect(lines.contains("limit \(96 << 20)"), "memoryLimit is not the cgroup's limit: \(lines)")
    #expect(
      lines.contains {
        $0.hasPrefix("signal cgroupUsage:") && $0.hasSuffix("/\(cgroup.name) working set against its limit")
      },
      "the monitor did not follow the move: \(lines)")
    let handled = lines.filter { $0.hasPrefix("handler ") }.map { $0.split(separator: " ")[1] }
    // Warning first, critical once, at the end (a slow machine may fall back to normal and warn again between).
    #expect(handled.first == "warning" && handled.last == "critical", "\(lines)")
    #expect(handled.filter { $0 == "critical" }.count == 1, "\(lines)")
    let kernel = Set(["cgroupEvent", "cgroupUsage", "systemPressure", "memAvailable"])
    let sources = lines.filter { $0.hasPrefix("report ") }.map { String($0.split(separator: " ")[2]) }
    #expect(!sources.isEmpty && sources.allSatisfy(kernel.contains), "\(lines)")
    let resident = lines.first { $0.hasPrefix("resident ") }.map(Self.numbers) ?? []
    #expect(resident.count == 2 && resident[1] + (32 << 20) < resident[0], "not released: \(lines)")
    #expect(lines.contains("normal"), "\(lines)")
  }

  /// A child with a 32 MB budget that grows past it gets a warning from its footprint.
  @Test func aChildGrowingPastItsBudgetGetsAWarning() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let child = try Child(.pressureBudget(budgetMB: 32), root: root.path, group: Self.group)
    let line = await child.line() { $0.hasPrefix("handler ") || $0.hasPrefix("no warning") }
    #expect(await child.exit() == 0, "\(child.output)")
    #expect(line?.hasPrefix("handler warning footprint ") == true, "\(child.output)")
    if let numbers = line.map(Self.numbers), numbers.count == 2 {
      #expect(numbers[0] >= numbers[1] * 8 / 10, "warned below 80 % of the budget: \(child.output)")
    }
  }

  /// `groupctl cache pressure warning|critical` reaches two other processes of the group; each delivers the level.
  @Test func groupctlCachePressureReachesEveryProcessOfTheGroup() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let listeners = try ["a", "b"].map { try Child(.pressureListen(name: $0), root: root.path, group: Self.group) }
    for listener in listeners { await listener.line { $0 == "ready" } }
    for level in ["warning", "critical"] {
      let status = try runTool(
        productsDirectory.appendingPathComponent("groupctl").path,
        ["cache", "pressure", level, Self.group, "--root", root.path])
      #expect(status == 0)
      for listener in listeners {
        await listener.line { $0 == "got \(level)" }
        await listener.line { $0 == "report \(level) group" }
      }
    }
    for listener in listeners {
      let got = listener.output.filter { $0.hasPrefix("got ") }
      #expect(
        (got.firstIndex(of: "got warning") ?? .max) < (got.lastIndex(of: "got critical") ?? .min), "\(listener.output)")
      listener.kill()
    }
  }

  /// Shared defaults register too: a suite idle for 5 s drops its values on a warning sent to the group, and
  /// reads them again on the next access.
  @Test func anIdleDefaultsSuiteDropsWhatItCanReadAgain() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let child = try Child(.pressureDefaults(suite: "idle-suite"), root: root.path, group: Self.group)
    await child.line { $0 == "ready" }
    // The suite's idle time (no write for 5 s), without holding a thread of the test pool.
    try await Task.sleep(for: .milliseconds(5500))
    try MemoryPressure.send(.warning, to: container)
    // (A real warning from the kernel may come too: only the group's counts here.)
    let report = await child.line { $0.hasPrefix("report warning group ") }
    child.kill()
    let fields = report?.split(separator: " ") ?? []
    let released = fields.first { $0.hasPrefix("'idle-suite'=") }.flatMap { $0.split(separator: "=").last }
    #expect(report?.hasPrefix("report warning group shared defaults 'idle-suite'=") == true, "\(child.output)")
    #expect(released.flatMap { Int($0) } ?? 0 >= 1000, "\(child.output)")
    #expect(report?.hasSuffix(" value 1000") == true, "the value was not read again: \(child.output)")
  }

  @Test func groupctlCachePressureRefusesAnUnknownLevel() throws {
    let root = try TestRoot()
    let status = try runTool(
      productsDirectory.appendingPathComponent("groupctl").path,
      ["cache", "pressure", "panic", Self.group, "--root", root.path])
    #expect(status != 0)
  }

  /// Low disk space on an 8 MB tmpfs: the disk tier's handler removes cache files until the space recovered;
  /// Documents is never touched.
  @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
  func lowDiskSpaceTrimsTheCacheNotDocuments() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "8m", name: "disk") else { return }
    defer { withExtendedLifetime(mounted) {} }  // unmounted when released: not before the test ends
    let disk = mounted.path
    let container = try GroupContainer(identifier: Self.group, root: URL(fileURLWithPath: disk))
    let images = container.cachesURL.appendingPathComponent("images")
    try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
    let child = try Child(.pressureDisk(cacheDirectory: "Library/Caches/images"), root: disk, group: Self.group)
    await child.line { $0 == "ready" }
    let keep = container.documentsURL.appendingPathComponent("keep")
    try Data(repeating: 0x55, count: 2 << 20).write(to: keep)
    // 256 KB cache entries until the file system is low (the container's own files take a little of it too).
    let entry = Data(repeating: 0x44, count: 256 << 10)
    for index in 0..<40 where !MemoryPressure.isLow(try DiskSpace(of: images), wasLow: false) {
      try entry.write(to: images.appendingPathComponent(String(format: "entry-%02d", index)))
    }
    #expect(MemoryPressure.isLow(try DiskSpace(of: images), wasLow: false))
    let line = await child.line { $0.hasPrefix("low ") }
    child.kill()
    let removed = line.map(Self.numbers)?.last ?? 0
    #expect(removed >= 256 << 10, "\(child.output)")
    #expect(!FileManager.default.fileExists(atPath: images.appendingPathComponent("entry-00").path))
    #expect(FileManager.default.contents(atPath: keep.path)?.count == 2 << 20)
    let space = try DiskSpace(of: images)
    #expect(!MemoryPressure.isLow(space, wasLow: false), "\(space)")
  }

  static func numbers(_ line: String) -> [Int] {
    line.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
  }
}

/// A memory cgroup (v1) made beneath the test process's own, removed afterwards. Beneath, not at the top of the
/// hierarchy: the child stays accounted to whatever limits the test itself runs under.
struct MemoryCgroupFixture {
  let name: String
  let directory: String

  static var parent: String? {
    guard geteuid() == 0, let cgroup = MemorySignals.memoryCgroup(), cgroup.version == .v1,
      FileManager.default.isWritableFile(atPath: cgroup.directory)
    else { return nil }
    return cgroup.directory
  }
  static var available: Bool { parent != nil }
  static var unavailableReason: Comment {
    "needs root and a cgroup v1 memory hierarchy (/sys/fs/cgroup/memory) to make a memory-limited cgroup"
  }

  init(limit: Int) throws {
    name = "gc-pressure-\(UUID().uuidString.prefix(8))"
    directory = Self.parent! + "/" + name
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
    try write("\(limit)", to: "memory.limit_in_bytes")
  }

  func add(pid: Int32) throws { try write("\(pid)", to: "cgroup.procs") }

  private func write(_ text: String, to file: String) throws {
    guard let handle = FileHandle(forWritingAtPath: directory + "/" + file) else {
      throw CocoaError(.fileWriteNoPermission)
    }
    defer { try? handle.close() }
    try handle.write(contentsOf: Data(text.utf8))
  }

  /// rmdir: the cgroup must have no process left (the test waited for its child). Synchronous, for `defer`: the
  /// child was reaped already, so the kernel lets the cgroup go at once or within a few retries (v1 announces an
  /// empty cgroup only to a system-wide release agent).
  func remove() {
    for _ in 0..<100 {
      if rmdir(directory) == 0 || errno == ENOENT { return }
      usleep(50_000)
    }
  }
}

/// Set once, before the pressure suites' first child starts (see the suites' `init`).
let mmapThresholdForChildren: Void = { setenv("MALLOC_MMAP_THRESHOLD_", "16384", 1) }()
