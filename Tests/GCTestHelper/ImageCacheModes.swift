import FileCoordination
import Foundation
import ImageCache
import SystemLayer
import TestImageKit

let imageCacheModes: Set<String> = ["cache-writer", "cache-reader", "cache-store-loop", "cache-watch", "cache-read-all"]

/// The image cache's "other processes" (ImageCacheCoherenceTests and friends).
@MainActor func runImageCacheMode(_ command: String, _ args: [String], _ container: GroupContainer) throws {
  let cacheName = args[4]
  var limits = SharedImageCache.Limits()
  limits.recencyGranularity = .zero
  let cache = try SharedImageCache(name: cacheName, container: container, limits: limits)
  switch command {
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

  default:
    break
  }
}
