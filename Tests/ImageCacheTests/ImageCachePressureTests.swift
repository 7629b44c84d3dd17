import FileCoordination
import Foundation
import GroupContainerCore
import ImageCache
import MemoryWarnings
import SystemLayer
import TestImageKit
import TestSupport
import Testing

/// The image cache under the low-memory policy, in other processes: levels sent to the group trim the memory tier
/// (warning: to half its limit; critical: empty), a memory-limited cgroup's own signals do the same, and a process
/// with a widget's budget keeps its footprint within it.
///
/// Mutants this suite catches (each made once, watched failing, restored):
/// - the cache's warning handler not registered with the container (`groupLevelsTrimTheMemoryTier` times out);
/// - critical trimming like warning (`groupLevelsTrimTheMemoryTier`: the cost never reaches 0);
/// - the default memory tier sized from the host's RAM instead of `MemoryPressure.memoryLimit`
///   (`aProcessWithAWidgetsBudgetStaysWithinIt`: the footprint passes the budget);
/// - the low-disk-space handler watching another directory (`lowDiskSpaceTrimsTheDiskTier` times out).
@Suite(.runSlot(.minutes(3)))
struct ImageCachePressureTests {
  // Children measure their resident size: with this glibc threshold the chunks they release are mmapped and
  // leave the process when freed (inherited by every child this suite starts; it runs in a process of its own).
  init() { _ = mmapThresholdForChildren }

  static func numbers(_ line: String) -> [Int] {
    line.split(whereSeparator: { $0 == " " || $0 == "=" }).compactMap { Int($0) }
  }

  @Test func groupLevelsTrimTheMemoryTier() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let child = try Child(.cacheMemory(cache: "pressure", images: 200), root: root.path, group: container.identifier)
    defer { child.kill() }
    let filled = try #require(await child.line() { $0.hasPrefix("filled") })
    let (cost, limit) = (Self.numbers(filled)[0], Self.numbers(filled)[1])
    #expect(cost > limit / 2, "the tier must hold more than a warning keeps: \(filled)")
    let groupctl = productsDirectory.appendingPathComponent("groupctl").path
    #expect(try runTool(groupctl, ["cache", "pressure", "warning", container.identifier, "--root", root.path]) == 0)
    let trimmed = await child.line { $0.hasPrefix("cost") }
    #expect(trimmed.map(Self.numbers)?.first.map { $0 <= limit / 2 } == true, "\(child.output)")
    #expect(try runTool(groupctl, ["cache", "pressure", "critical", container.identifier, "--root", root.path]) == 0)
    #expect(await child.line { $0 == "cost 0" } != nil)
  }

  @Test(.enabled(if: MemoryCgroupFixture.available, MemoryCgroupFixture.unavailableReason))
  func aCacheInAMemoryLimitedCgroupGivesMemoryBack() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let cgroup = try MemoryCgroupFixture(limit: 96 << 20)
    defer { cgroup.remove() }
    let child = try Child(
      .cacheCgroup(cache: "cgroup", cgroup: cgroup.name), root: root.path, group: container.identifier)
    try cgroup.add(pid: child.pid)
    #expect(await child.exit() == 0, "\(child.output) \(child.errors.text)")
    let lines = child.output
    #expect(lines.contains("limit \(96 << 20)"), "\(lines)")
    let reports = lines.filter { $0.hasPrefix("report ") }
    #expect(reports.first?.hasPrefix("report warning") == true, "warning first: \(lines)")
    #expect(reports.last?.hasPrefix("report critical") == true, "critical last: \(lines)")
    // Each delivery: the cache released something; after critical its tier is empty.
    for report in reports { #expect((Self.numbers(report).first ?? 0) > 0, "\(report)") }
    // (the child keeps adding while the handler runs: at most one image came after it — one image, 1.5 MB, not
    // the 1 MiB this said before, which a loaded run's one late image exceeded)
    let image = lines.first { $0.hasPrefix("image ") }.map(Self.numbers)?.first ?? 0
    #expect(image > 0 && (reports.last.map(Self.numbers)?.last ?? .max) <= image, "\(lines)")
    let resident = lines.first { $0.hasPrefix("resident") }.map(Self.numbers) ?? []
    #expect(resident.count == 2 && resident[1] + (16 << 20) < resident[0], "not given back: \(lines)")
  }

  @Test func aProcessWithAWidgetsBudgetStaysWithinIt() async throws {
    let root = try TestRoot()
    let container = try root.container()
    // 200 MB of images offered to a process with a 32 MB budget (the example widget's).
    let child = try Child(
      .cacheBudget(cache: "budget", budgetMB: 32, offeredMB: 200), root: root.path, group: container.identifier)
    #expect(await child.exit() == 0, "\(child.errors.text)")
    let line = try #require(child.output.first { $0.hasPrefix("peak=") })
    let (peak, budget, tier) = (Self.numbers(line)[0], Self.numbers(line)[1], Self.numbers(line)[2])
    #expect(tier == budget / 8, "the tier's limit derives from the budget: \(line)")
    #expect(peak <= budget, "footprint \(peak) passed the budget \(budget)")
  }

  /// Low disk space: the cache held open by another process trims its disk tier (iOS purges Caches), and the
  /// container's documents stay.
  @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
  func lowDiskSpaceTrimsTheDiskTier() async throws {
    let root = try TestRoot()
    guard let mounted = try SmallDisk.mount(in: root, size: "8m", name: "disk") else { return }
    defer { withExtendedLifetime(mounted) {} }  // unmounted when released: not before the test ends
    let disk = mounted.path
    let container = try GroupContainer(identifier: "group.lowdisk", root: URL(fileURLWithPath: disk))
    do {
      // Filled by an instance that is gone before the disk runs low: only the other process's handler acts.
      var limits = SharedImageCache.Limits()
      limits.diskBytes = .max
      let filler = try SharedImageCache(name: "images", container: container, limits: limits)
      for index in 0..<20 {
        try await filler.store(TestPNG.make(width: 450, height: 450, seed: UInt64(index)), forKey: "k\(index)")
      }
    }
    let child = try Child(.cacheDisk(cache: "images"), root: disk, group: "group.lowdisk")
    defer { child.kill() }
    #expect(await child.line { $0 == "entries 20" } != nil)
    let space = try DiskSpace(of: container.documentsURL)
    let keep = container.documentsURL.appendingPathComponent("keep")
    try Data(repeating: 0x55, count: space.available - (512 << 10)).write(to: keep)
    #expect(MemoryPressure.isLow(try DiskSpace(of: container.documentsURL), wasLow: false))
    let trimmed = await child.line() { line in Self.numbers(line).first.map { $0 < 20 } ?? false }
    #expect(trimmed != nil, "\(child.output)")
    #expect(FileManager.default.contents(atPath: keep.path)?.count == space.available - (512 << 10))
  }
}
