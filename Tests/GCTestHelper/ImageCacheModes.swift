import FileCoordination
import Foundation
import MemoryWarnings
import SystemLayer
import TestImageKit

@testable import ImageCache

let imageCacheModes: Set<String> = [
  "cache-writer", "cache-reader", "cache-store-loop", "cache-watch", "cache-read-all", "cache-memory", "cache-cgroup",
  "cache-budget", "cache-disk", "cache-trim-race",
]

/// The image cache's "other processes" (ImageCacheCoherenceTests and friends).
@MainActor func runImageCacheMode(_ command: String, _ args: [String], _ container: GroupContainer) throws {
  let cacheName = args[4]
  var limits = SharedImageCache.Limits()
  limits.recencyGranularity = .zero
  let cache = try SharedImageCache(name: cacheName, container: container, limits: limits)
  switch command {
  case "cache-trim-race":
    // cache-trim-race <root> <group> <cache> <pause-dir> [replace], with
    // GROUPCONTAINER_PAUSE_POINT=imagecache.trim.scanned: stores 10 KB images past a 50,000-byte disk limit until the
    // background trim they start stops after its scan; stores ten more meanwhile (they find a trim scheduled) — with
    // `replace`, stores k0 and k1 again instead (the oldest: the trim cannot drop what replaced them); lets it go;
    // prints "usage <bytes>" once the disk is back under the limit, or after 10 s.
    var limited = limits
    limited.diskBytes = 50_000  // few stores: under a full parallel test run each store can take a second
    let racing = try SharedImageCache(name: cacheName, container: container, limits: limited)
    let pause = args[5] + "/imagecache.trim.scanned"
    var index = 0
    func store() throws {
      try racing.store(TestPNG.make(width: 100, height: 100, seed: UInt64(index)), forKey: "k\(index)")
      index += 1
    }
    while !FileManager.default.fileExists(atPath: pause) && index < 40 { try store() }
    let stopped = MonotonicClock.nanoseconds() + 10_000_000_000
    while !FileManager.default.fileExists(atPath: pause) && MonotonicClock.nanoseconds() < stopped { usleep(1000) }
    guard FileManager.default.fileExists(atPath: pause) else {
      FileHandle.standardError.write(Data("the trim never stopped at its pause point\n".utf8))
      exit(1)
    }
    if args.count > 6, args[6] == "replace" {
      for key in ["k0", "k1"] {
        try racing.store(TestPNG.make(width: 100, height: 100, seed: 1_000 + UInt64(key.utf8.last!)), forKey: key)
      }
    } else {
      for _ in 0..<10 { try store() }
    }
    try FileManager.default.removeItem(atPath: pause)
    let deadline = MonotonicClock.nanoseconds() + 10_000_000_000
    while try racing.statistics().diskBytes > limited.diskBytes && MonotonicClock.nanoseconds() < deadline {
      usleep(10_000)
    }
    FileHandle.standardOutput.write(Data("usage \(try racing.statistics().diskBytes)\n".utf8))
  case "cache-writer":
    // cache-writer <root> <group> <cache> <writer-id> <ops> <keys> <log>
    // Random stores (70 %) and removals of k0…k<keys-1>; logs "S|R <key> <version> <start-ns> <end-ns>" per op,
    // the interval around the call (CLOCK_MONOTONIC is one clock for every process).
    let (writer, ops, keys, logFile) = (UInt64(args[5])!, Int(args[6])!, Int(args[7])!, args[8])
    var generator = SplitMix64(seed: writer &* 7919)
    var lines: [String] = []
    for sequence in 1...ops {
      let key = "k\(Int(generator.next() % UInt64(keys)))"
      if generator.next() % 10 < 7 {
        let version = writer << 32 | UInt64(sequence)
        let image = TestPNG.make(width: 8 + Int(generator.next() % 64), height: 4, seed: version)
        let start = MonotonicClock.nanoseconds()
        try cache.store(image, forKey: key)
        lines.append("S \(key) \(version) \(start) \(MonotonicClock.nanoseconds())")
      } else {
        let start = MonotonicClock.nanoseconds()
        try cache.removeImage(forKey: key)
        lines.append("R \(key) 0 \(start) \(MonotonicClock.nanoseconds())")
      }
    }
    try lines.joined(separator: "\n").write(toFile: logFile, atomically: false, encoding: .utf8)
    say("done")

  case "cache-reader":
    // cache-reader <root> <group> <cache> <milliseconds> <keys> <log>
    // Reads random keys until the time is up; logs "G <key> <version|0 for a miss|bad> <start-ns> <end-ns>".
    let (milliseconds, keys, logFile) = (UInt64(args[5])!, Int(args[6])!, args[7])
    var generator = SplitMix64(seed: UInt64(getpid()))
    var lines: [String] = []
    let end = MonotonicClock.nanoseconds() + milliseconds * 1_000_000
    say("reading")
    while MonotonicClock.nanoseconds() < end {
      let key = "k\(Int(generator.next() % UInt64(keys)))"
      let start = MonotonicClock.nanoseconds()
      let image = try cache.image(forKey: key)
      let stop = MonotonicClock.nanoseconds()
      let result: String
      if let image {
        result = TestPNG.isIntact(image.data) ? String(TestPNG.seed(of: image.data)!) : "bad"
      } else {
        result = "0"
      }
      lines.append("G \(key) \(result) \(start) \(stop)")
    }
    let stats = try cache.statistics()
    try lines.joined(separator: "\n").write(toFile: logFile, atomically: false, encoding: .utf8)
    say("done memoryHits=\(stats.memoryHits) diskHits=\(stats.diskHits) misses=\(stats.misses)")

  case "cache-store-loop":
    // cache-store-loop <root> <group> <cache> <keys> <width> <height>: stores new versions of k0…k<keys-1> until
    // killed; says "stored <n>" after each store.
    // The images are made once: the loop's time goes to the stores, where the kills must land.
    let (keys, width, height) = (Int(args[5])!, Int(args[6])!, Int(args[7])!)
    let images = try (1...4).map { try CachedImage(data: TestPNG.make(width: width, height: height, seed: UInt64($0))) }
    var version = 0
    while true {
      try cache.store(images[version % images.count], forKey: "k\(version % keys)")
      say("stored \(version)")
      version += 1
    }

  case "cache-watch":
    // cache-watch <root> <group> <cache> <key>: reads the key every 5 ms and says "now <version|nil>" at each change.
    let key = args[5]
    var last = "none"
    while true {
      let image = try cache.image(forKey: key)
      let now = image.map { TestPNG.seed(of: $0.data).map(String.init) ?? "other" } ?? "nil"
      if now != last {
        say("now \(now)")
        last = now
      }
      Thread.sleep(forTimeInterval: 0.005)
    }

  case "cache-read-all":
    // cache-read-all <root> <group> <cache> <keys> <milliseconds>: reads every key in turn until the time is up;
    // says "bad <key>" for an image that is not whole, "error <description>" for a thrown error, then "done <n>".
    let (keys, milliseconds) = (Int(args[5])!, UInt64(args[6])!)
    let end = MonotonicClock.nanoseconds() + milliseconds * 1_000_000
    var reads = 0
    say("reading")
    while MonotonicClock.nanoseconds() < end {
      for index in 0..<keys {
        do {
          if let image = try cache.image(forKey: "k\(index)"), !TestPNG.isIntact(image.data) { say("bad k\(index)") }
        } catch {
          say("error \(error)")
        }
        reads += 1
      }
    }
    say("done \(reads)")

  case "cache-memory":
    // cache-memory <root> <group> <cache> <images>: fills its memory tier with <images> 100 kB images (limit: 16 MB),
    // says "filled <cost> <limit>", then "cost <n>" at each change of the tier's cost (memory warnings sent to the
    // group trim it); runs until killed.
    var limits = SharedImageCache.Limits()
    limits.memoryCost = 16 << 20
    let memoryCache = try SharedImageCache(name: cacheName, container: container, limits: limits)
    for index in 0..<Int(args[5])! {
      try memoryCache.store(TestPNG.make(width: 320, height: 320, seed: UInt64(index)), forKey: "k\(index)")
    }
    var last = try memoryCache.statistics().memoryCost
    say("filled \(last) \(16 << 20)")
    while true {
      let cost = try memoryCache.statistics().memoryCost
      if cost != last {
        say("cost \(cost)")
        last = cost
      }
      Thread.sleep(forTimeInterval: 0.01)
    }

  case "cache-cgroup":
    // cache-cgroup <root> <group> <cache> <cgroup-dir-name>: once moved into the memory cgroup, writes 24 MB of file
    // cache (what the kernel reclaims first, and measures its pressure events by), then fills the cache's memory
    // tier (cost limit: the cgroup's limit) with 512 kB images every 20 ms (to within 4 MB of the limit) — each its
    // own copy, as decoded images would be — until the low-memory policy delivered critical. Says "limit <bytes>",
    // "report <level> <source> cache-released <bytes> cost <bytes after>" per delivery, then "resident before=<peak
    // while growing> after=<bytes>" and exits.
    let cgroupName = args[5]
    // The cache above started the monitor in the test's cgroup: it must follow the move.
    guard awaitMonitorInCgroup(named: cgroupName, pressure: MemoryPressure.shared) else {
      say("not followed: \(MemoryPressure.shared.signals)")
      exit(1)
    }
    let fileCache = try container.directory().openFile("Library/Caches/file-cache", [.writeOnly, .create, .truncate])
    let megabyte = [UInt8](repeating: 0x33, count: 1 << 20)
    for _ in 0..<24 { try fileCache.writeAll(megabyte) }
    try fileCache.sync()
    fileCache.close()
    let pressure = MemoryPressure.shared
    say("limit \(pressure.memoryLimit)")
    var limits = SharedImageCache.Limits()
    limits.memoryCost = pressure.memoryLimit
    let memoryCache = try SharedImageCache(name: cacheName, container: container, limits: limits)
    let template = try CachedImage(data: TestPNG.make(width: 720, height: 720, seed: 1))
    try memoryCache.store(template, forKey: "k")
    let stamp = memoryCache.disk.stamp(shard: 0)
    var reports = 0
    var peak = 0
    let cgroup = MemorySignals.memoryCgroup()
    for index in 0..<2_000 {
      // Never to within 4 MB of the limit (see pressure-cgroup: near it, the OOM kill races the critical delivery).
      let used = cgroup.flatMap { MemoryPressure.cgroupWorkingSet($0) } ?? 0
      if used + (4 << 20) < pressure.memoryLimit {
        let copy = CachedImage(data: Data(template.data), info: template.info)
        let entry = SharedImageCache.MemoryEntry(
          image: copy, name: "k\(index)", shard: 0, stamp: stamp, expiresAt: 0, recorded: 0)
        memoryCache.memory.setObject(entry, forKey: .init("k\(index)"), cost: copy.data.count)
      }
      peak = max(peak, Int((try? MemorySignals.residentBytes()) ?? 0))
      MonotonicClock.sleep(nanoseconds: 20_000_000)
      guard pressure.reportCount > reports, let report = pressure.lastReport else { continue }
      reports = pressure.reportCount
      let mine = report.entries.filter { $0.name.hasPrefix("image cache") }.reduce(0) { $0 + $1.bytesReleased }
      say(
        "report \(report.level) \(report.source.rawValue) cache-released \(mine) cost \(memoryCache.memory.totalCost)")
      if report.level == .critical {
        say("resident before=\(peak) after=\((try? MemorySignals.residentBytes()) ?? 0)")
        exit(0)
      }
    }
    say("no critical: cost \(memoryCache.memory.totalCost)")
    exit(1)

  case "cache-disk":
    // cache-disk <root> <group> <cache>: holds the cache open (its low-disk-space handler registered), says "ready",
    // then "entries <n>" at each change of the number of entries on disk; runs until killed.
    let directory = container.cachesURL.path + "/" + cacheName
    say("ready")
    var last = -1
    while true {
      let count = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
        $0.hasSuffix(".entry")
      }.count
      if count != last {
        say("entries \(count)")
        last = count
      }
      Thread.sleep(forTimeInterval: 0.02)
      withExtendedLifetime(cache) {}
    }

  case "cache-budget":
    // cache-budget <root> <group> <cache> <budget-MB> <offered-MB>: a process with a memory budget (a widget's)
    // and a cache with the default limits is offered <offered-MB> of distinct 1 MB images (stored, then read back);
    // says "peak=<footprint bytes> budget=<bytes> tier=<memory tier cost limit>" at the end.
    let budget = Int(args[5])! << 20
    MemoryPressure.shared.budget = budget
    let budgetCache = try SharedImageCache(name: cacheName, container: container)
    var peak = 0
    let images = (0..<4).map { TestPNG.make(width: 1024, height: 1000, seed: UInt64($0)) }
    for index in 0..<Int(args[6])! {
      try budgetCache.store(images[index % images.count], forKey: "k\(index)")
      _ = try budgetCache.image(forKey: "k\(index / 2)")
      peak = max(peak, MemoryPressure.shared.footprint)
    }
    say("peak=\(peak) budget=\(budget) tier=\(budgetCache.memory.totalCostLimit)")

  default:
    break
  }
}
