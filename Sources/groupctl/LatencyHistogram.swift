/// Latencies in nanoseconds, kept as counts in log-linear buckets (32 per power of two: a value is known to within
/// 3 %), so a writer can record every one of a million calls in 16 KB and the parent can merge writers' histograms.
/// Text form, one line: `<max> <index>:<count> …` (non-empty buckets only).
struct LatencyHistogram {
  private static let subBits = 5
  private(set) var counts = [Int](repeating: 0, count: 64 << subBits)
  private(set) var maximum: UInt64 = 0
  private(set) var total = 0

  mutating func record(_ nanoseconds: UInt64) {
    counts[Self.index(of: nanoseconds)] += 1
    maximum = max(maximum, nanoseconds)
    total += 1
  }

  /// Bucket of `value`: its power of two and the 5 bits after its leading one (values below 32 are exact).
  static func index(of value: UInt64) -> Int {
    guard value >= 1 << subBits else { return Int(value) }
    let exponent = 63 - value.leadingZeroBitCount
    let sub = Int(value >> UInt64(exponent - subBits)) & ((1 << subBits) - 1)
    return (exponent - subBits + 1) << subBits | sub
  }

  /// The largest value a bucket holds (percentiles are reported as that bound: never below the truth).
  static func upperBound(of index: Int) -> UInt64 {
    guard index >= 1 << subBits else { return UInt64(index) }
    let exponent = (index >> subBits) + subBits - 1
    let sub = UInt64(index & ((1 << subBits) - 1))
    let low = (UInt64(1) << UInt64(exponent)) | (sub << UInt64(exponent - subBits))
    return low + (UInt64(1) << UInt64(exponent - subBits)) - 1
  }

  /// The value below which `fraction` of the samples lie (e.g. 0.999), capped at the maximum seen.
  func percentile(_ fraction: Double) -> UInt64 {
    guard total > 0 else { return 0 }
    let rank = Int((Double(total) * fraction).rounded(.up))
    var seen = 0
    for (index, count) in counts.enumerated() where count > 0 {
      seen += count
      if seen >= rank { return min(Self.upperBound(of: index), maximum) }
    }
    return maximum
  }

  mutating func merge(_ other: LatencyHistogram) {
    for (index, count) in other.counts.enumerated() where count > 0 { counts[index] += count }
    maximum = max(maximum, other.maximum)
    total += other.total
  }

  var line: String {
    ([String(maximum)] + counts.enumerated().filter { $0.element > 0 }.map { "\($0.offset):\($0.element)" })
      .joined(separator: " ")
  }

  init() {}

  /// Parses `line`; nil when it is not a histogram.
  init?(line: Substring) {
    let fields = line.split(separator: " ")
    guard let first = fields.first, let maximum = UInt64(first) else { return nil }
    self.maximum = maximum
    for field in fields.dropFirst() {
      let parts = field.split(separator: ":")
      guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]), counts.indices.contains(index)
      else { return nil }
      counts[index] += count
      total += count
    }
  }
}
