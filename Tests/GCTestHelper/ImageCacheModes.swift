import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import MemoryWarnings
import Synchronization
import SystemLayer
import TestImageKit

@testable import ImageCache

/// The image cache's "other processes" (ImageCacheCoherenceTests and friends): the `.cache…` commands on the cache
/// named `cacheName` (HelperCommand.swift says what each does and prints).
@MainActor func runImageCacheMode(_ command: HelperCommand, cacheName: String, _ container: GroupContainer) throws {
  var limits = SharedImageCache.Limits()
  limits.recencyGranularity = .zero
  let cache = try SharedImageCache(name: cacheName, container: container, limits: limits)
  switch command {
  case .cacheTrimRace(_, let pauseDirectory, let replace):
    // A store that takes the cache over its limit trims before it returns: the storing thread stops in that trim
    // (after its scan), and the stores made meanwhile, from this thread, find the trim lock held. With `replace`,
    // k0 and k1 are the oldest: the trim cannot drop what replaced them.
    var limited = limits
    limited.diskBytes = 50_000  // few stores: under a full parallel test run each store can take a second
    let racing = try SharedImageCache(name: cacheName, container: container, limits: limited)
    let pause = pauseDirectory + "/imagecache.trim.scanned"
    let raced = Mutex(false)  // the racing stores are made: the storing thread stores no more (only the checks count)
    let storer = Thread {
      for index in 0..<40 where !FileManager.default.fileExists(atPath: pause) && !raced.withLock({ $0 }) {
        try? racing.store(TestPNG.make(width: 100, height: 100, seed: UInt64(index)), forKey: "k\(index)")
      }
    }
    storer.start()
    let stopped = MonotonicClock.nanoseconds() + 120_000_000_000  // a hang bound, not a timing
    while !FileManager.default.fileExists(atPath: pause) && MonotonicClock.nanoseconds() < stopped { usleep(1000) }
    guard FileManager.default.fileExists(atPath: pause) else {
      FileHandle.standardError.write(Data("the trim never stopped at its pause point\n".utf8))
      exit(1)
    }
    if replace {
      for key in ["k0", "k1"] {
        try racing.store(TestPNG.make(width: 100, height: 100, seed: 1_000 + UInt64(key.utf8.last!)), forKey: key)
      }
    } else {
      for index in 100..<110 {
        try racing.store(TestPNG.make(width: 100, height: 100, seed: UInt64(index)), forKey: "k\(index)")
      }
    }
    raced.withLock { $0 = true }
    try FileManager.default.removeItem(atPath: pause)
    while !storer.isFinished { usleep(1000) }
    let deadline = MonotonicClock.nanoseconds() + 120_000_000_000
    while try racing.statistics().diskBytes > limited.diskBytes && MonotonicClock.nanoseconds() < deadline {
      usleep(10_000)
    }
    FileHandle.standardOutput.write(Data("usage \(try racing.statistics().diskBytes)\n".utf8))
  case .cacheWriter(_, let writerID, let ops, let keys, let logFile):
    let writer = UInt64(writerID)
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

  case .cacheReader(_, let milliseconds, let keys, let logFile):
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

  case .cacheStoreLoop(_, let keys, let width, let height):
    // The images are made once: the loop's time goes to the stores, where the kills must land.
    let images = try (1...4).map { try CachedImage(data: TestPNG.make(width: width, height: height, seed: UInt64($0))) }
    var version = 0
    while true {
      try cache.store(images[version % images.count], forKey: "k\(version % keys)")
      say("stored \(version)")
      version += 1
    }

  case .cacheWatch(_, let key):
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

  case .cacheReadAll(_, let keys, let milliseconds):
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

  case .cacheMemory(_, let images):
    var limits = SharedImageCache.Limits()
    limits.memoryCost = 16 << 20
    let memoryCache = try SharedImageCache(name: cacheName, container: container, limits: limits)
    for index in 0..<images {
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

  case .cacheCgroup(_, let cgroupName):
    // The file cache is what the kernel reclaims first, and measures its pressure events by; each image is its own
    // copy, as decoded images would be.
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
    say("image \(template.data.count)")
    let stamp = memoryCache.disk.stamp(shard: 0)
    var reports = 0
    var peak = 0
    let cgroup = MemorySignals.memoryCgroup()
    // No image is added from a release (the tier's cost fell) until its report is seen: load can stretch the time
    // between them over many rounds, and the test allows one image after the release (the one being added then).
    var adding = true
    var expected = memoryCache.memory.totalCost
    for index in 0..<2_000 {
      // Never to within 4 MB of the limit (see pressure-cgroup: near it, the OOM kill races the critical delivery).
      let used = cgroup.flatMap { MemoryPressure.cgroupWorkingSet($0) } ?? 0
      if memoryCache.memory.totalCost < expected { adding = false }
      if adding, used + (4 << 20) < pressure.memoryLimit {
        let copy = CachedImage(data: Data(template.data), info: template.info)
        let entry = SharedImageCache.MemoryEntry(
          image: copy, name: "k\(index)", shard: 0, stamp: stamp, expiresAt: 0, recorded: 0)
        let before = memoryCache.memory.totalCost
        // `expected` is what this loop put in: a release at any moment leaves the cost below it until the report is
        // seen. (Taken again from the cost after each round, it missed a release between a round's add and its end,
        // and one between the check above and this read: two images after a critical release, once, at load 15.)
        if before < expected {
          adding = false
        } else {
          memoryCache.memory.setObject(entry, forKey: .init("k\(index)"), cost: copy.data.count)
          let after = memoryCache.memory.totalCost
          if after < before + copy.data.count { adding = false } else { expected = after }
        }
      }
      peak = max(peak, Int((try? MemorySignals.residentBytes()) ?? 0))
      MonotonicClock.sleep(nanoseconds: 20_000_000)
      guard pressure.reportCount > reports, let report = pressure.lastReport else { continue }
      reports = pressure.reportCount
      adding = true
      expected = memoryCache.memory.totalCost
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

  case .cacheDisk:
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

  case .cacheBudget(_, let budgetMB, let offeredMB):
    let budget = budgetMB << 20
    MemoryPressure.shared.budget = budget
    let budgetCache = try SharedImageCache(name: cacheName, container: container)
    var peak = 0
    let images = (0..<4).map { TestPNG.make(width: 1024, height: 1000, seed: UInt64($0)) }
    for index in 0..<offeredMB {
      try budgetCache.store(images[index % images.count], forKey: "k\(index)")
      _ = try budgetCache.image(forKey: "k\(index / 2)")
      peak = max(peak, MemoryPressure.shared.footprint)
    }
    say("peak=\(peak) budget=\(budget) tier=\(budgetCache.memory.totalCostLimit)")

  default:
    break
  }
}
