// The memory tier and the header parsers, each figure measured in the same run as its baseline.
//
//   Memory hit                          MemoryCache<String, Data>.object(forKey:) on a key it holds (1,000 keys)
//   Baseline: locked dictionary hit     the same lookup in a [String: Data] behind a Mutex (no recency kept)
//   Baseline: NSCache hit               NSCache<NSString, NSData>.object(forKey:), keys already NSString
//   Alternative: class-node LRU hit     the same LRU built the textbook way, one class object per entry (NodeLRU)
//   Memory set, evicting                setObject on a full cache (count limit 1,000, 2,000 keys): each set evicts
//   Hit ratio, Zipf s=1.0               the same 200,000 requests (10,000 keys, Zipf-distributed, sizes 4–200 KB)
//                                       through MemoryCache and NSCache with the same cost limit (10 % of all
//                                       bytes), a miss storing the object: hits per 1,000 requests, as custom
//                                       metrics of one benchmark (the sequence is fixed, so they are exact figures)
//   Header parse: <fixture>             ImageHeaders.parse of each test fixture
//
// The per-operation benchmarks use scalingFactor .kilo: each iteration does 1,000 operations and the figures
// are per operation. Run from this directory:
//   swift package --allow-writing-to-package-directory benchmark --target ImageCacheBenchmarks

import Benchmark
import Foundation
import ImageCache
import Synchronization

let benchmarks: @Sendable () -> Void = {
  let perOperation = Benchmark.Configuration(
    metrics: [.wallClock, .throughput, .mallocCountTotal],
    timeUnits: .nanoseconds,
    warmupIterations: 20,
    scalingFactor: .kilo,
    maxDuration: .seconds(3),
    maxIterations: 10_000
  )

  let keys = (0..<1_000).map { "https://images.example.com/thumbnails/\($0).jpg" }
  let payload = Data(repeating: 7, count: 64)

  // MARK: Hits

  let memory = MemoryCache<String, Data>(totalCostLimit: 1 << 30, countLimit: 10_000)
  for key in keys { memory.setObject(payload, forKey: key, cost: payload.count) }
  Benchmark("Memory hit", configuration: perOperation) { benchmark in
    for i in benchmark.scaledIterations {
      blackHole(memory.object(forKey: keys[i % keys.count]))
    }
  }

  let dictionary = Mutex<[String: Data]>(Dictionary(uniqueKeysWithValues: keys.map { ($0, payload) }))
  Benchmark("Baseline: locked dictionary hit", configuration: perOperation) { benchmark in
    for i in benchmark.scaledIterations {
      let key = keys[i % keys.count]
      blackHole(dictionary.withLock { $0[key] })
    }
  }

  let nsKeys = keys.map { $0 as NSString }
  let nsPayload = payload as NSData
  let nsCache = NSCache<NSString, NSData>()
  nsCache.totalCostLimit = 1 << 30
  for key in nsKeys { nsCache.setObject(nsPayload, forKey: key, cost: payload.count) }
  Benchmark("Baseline: NSCache hit", configuration: perOperation) { benchmark in
    for i in benchmark.scaledIterations {
      blackHole(nsCache.object(forKey: nsKeys[i % nsKeys.count]))
    }
  }

  let nodes = Mutex(NodeLRU<String, Data>(countLimit: 10_000))
  nodes.withLock { lru in for key in keys { lru.set(payload, forKey: key) } }
  Benchmark("Alternative: class-node LRU hit", configuration: perOperation) { benchmark in
    for i in benchmark.scaledIterations {
      let key = keys[i % keys.count]
      blackHole(nodes.withLock { $0.get(key) })
    }
  }

  let evictingKeys = (0..<2_000).map { "https://images.example.com/full/\($0).jpg" }
  let evicting = MemoryCache<String, Data>(countLimit: 1_000)
  Benchmark("Memory set, evicting", configuration: perOperation) { benchmark in
    for i in benchmark.scaledIterations {
      evicting.setObject(payload, forKey: evictingKeys[i % evictingKeys.count], cost: payload.count)
    }
  }

  // MARK: Hit ratio on a Zipf sequence

  let memoryHits = BenchmarkMetric.custom(
    "MemoryCache hits per 1000", polarity: .prefersLarger, useScalingFactor: false)
  let nsCacheHits = BenchmarkMetric.custom("NSCache hits per 1000", polarity: .prefersLarger, useScalingFactor: false)
  let ratioConfiguration = Benchmark.Configuration(
    metrics: [.wallClock, memoryHits, nsCacheHits],
    timeUnits: .milliseconds,
    warmupIterations: 0,
    maxDuration: .seconds(60),
    maxIterations: 1
  )
  Benchmark("Hit ratio, Zipf s=1.0, 10,000 keys, cost limit 10 %", configuration: ratioConfiguration) { benchmark in
    let workload = ZipfWorkload(keys: 10_000, requests: 200_000, exponent: 1.0, seed: 42)
    let limit = workload.totalBytes / 10
    let lru = MemoryCache<Int, Int>(totalCostLimit: limit)
    var lruHits = 0
    for key in workload.requests {
      if lru.object(forKey: key) != nil {
        lruHits += 1
      } else {
        lru.setObject(key, forKey: key, cost: workload.sizes[key])
      }
    }
    let foundation = NSCache<NSNumber, NSNumber>()
    foundation.totalCostLimit = limit
    let boxed = (0..<workload.sizes.count).map { NSNumber(value: $0) }
    var foundationHits = 0
    for key in workload.requests {
      if foundation.object(forKey: boxed[key]) != nil {
        foundationHits += 1
      } else {
        foundation.setObject(boxed[key], forKey: boxed[key], cost: workload.sizes[key])
      }
    }
    benchmark.measurement(memoryHits, lruHits * 1_000 / workload.requests.count)
    benchmark.measurement(nsCacheHits, foundationHits * 1_000 / workload.requests.count)
  }

  // MARK: Header parsing

  let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Tests/ImageCacheTests/Fixtures")
  let names = [
    "still.png", "animated.png", "baseline.jpg", "progressive.jpg", "exif-thumbnail.jpg", "still87a.gif",
    "animated89a.gif", "lossy.webp", "lossless.webp", "alpha.webp", "animated.webp",
  ]
  for name in names {
    Benchmark("Header parse: \(name)", configuration: perOperation) { benchmark in
      let data = try Data(contentsOf: fixtures.appendingPathComponent(name))
      benchmark.startMeasurement()
      for _ in benchmark.scaledIterations {
        blackHole(try ImageHeaders.parse(data))
      }
    }
  }

  diskTierBenchmarks()  // DiskTierBenchmarks.swift: the shared cache against raw file calls
}

/// A fixed request sequence: `keys` keys with Zipf(`exponent`) popularity (rank r drawn with weight 1/r^s), ranks
/// mapped to keys in a shuffled order (so popularity is independent of key and size), sizes 4–200 KB per key.
struct ZipfWorkload {
  var requests: [Int] = []
  var sizes: [Int] = []
  var totalBytes: Int { sizes.reduce(0, +) }

  init(keys: Int, requests count: Int, exponent: Double, seed: UInt64) {
    var generator = SeededGenerator(seed: seed)
    sizes = (0..<keys).map { _ in Int.random(in: 4_096...204_800, using: &generator) }
    var cumulative: [Double] = []
    var sum = 0.0
    for rank in 1...keys {
      sum += 1 / pow(Double(rank), exponent)
      cumulative.append(sum)
    }
    let keyOfRank = Array(0..<keys).shuffled(using: &generator)
    requests.reserveCapacity(count)
    for _ in 0..<count {
      let target = Double.random(in: 0..<sum, using: &generator)
      var low = 0
      var high = keys - 1
      while low < high {
        let middle = (low + high) / 2
        if cumulative[middle] <= target { low = middle + 1 } else { high = middle }
      }
      requests.append(keyOfRank[low])
    }
  }
}

/// SplitMix64: the same sequence on every run.
struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
