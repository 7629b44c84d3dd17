import Foundation
import TestSupport
import Testing

/// `groupctl stress defaults`: writer processes, the independent check, and the latency fields over every set and
/// update of every writer.
///
/// Mutant this suite catches: the writers timing only their sets (an update's 20 ms is missing from max_us and
/// p999_us: `latenciesCoverEveryUpdateOfEveryWriter`).
@Suite(.runSlot(.minutes(5))) struct StressDefaultsTests {
  /// The fields of the last line, by name.
  func fields(_ out: String) -> [String: String] {
    let last = out.split(separator: "\n").last.map(String.init) ?? ""
    var result: [String: String] = [:]
    for field in last.split(separator: " ") {
      let parts = field.split(separator: "=", maxSplits: 1).map(String.init)
      if parts.count == 2 { result[parts[0]] = parts[1] }
    }
    return result
  }

  @Test func roundsRewriteTheSameKeysAndNothingIsLost() async throws {
    let root = try TestRoot()
    let result = try await groupctl([
      "stress", "defaults", "group.com.example.stress", "--root", root.path, "--writers", "3", "--keys", "200",
      "--increments", "50", "--rounds", "3",
    ])
    #expect(result.status == 0, "\(result.out)\n\(result.err)")
    let f = fields(result.out)
    #expect(f["keys"] == "600/600" && f["lost"] == "0" && f["counter"] == "150/150", "\(f)")
    let p999 = Int(f["p999_us"] ?? "") ?? -1
    let maximum = Int(f["max_us"] ?? "") ?? -1
    #expect(p999 >= 0 && maximum > 0 && p999 <= maximum, "\(f)")
    // Three rounds of 200 keys per writer: the suite holds 600 keys and the counter, not 1,800.
    let read = try await groupctl(["defaults", "read", "group.com.example.stress", "--root", root.path, "--json"])
    let json = try JSONSerialization.jsonObject(with: Data(read.out.utf8)) as? [String: Any]
    #expect(json?.count == 601, "\(json?.count ?? -1) keys")
  }

  @Test func latenciesCoverEveryUpdateOfEveryWriter() async throws {
    let root = try TestRoot()
    // Each update sleeps 20 ms inside its transform: 5 of the writer's 205 calls (2.4 %) take over 20 ms. One
    // writer, so no set waits behind a slow update (which would hide updates left untimed).
    let result = try await groupctl([
      "stress", "defaults", "group.com.example.stress", "--root", root.path, "--writers", "1", "--keys", "200",
      "--increments", "5", "--testing-update-delay-us", "20000",
    ])
    #expect(result.status == 0, "\(result.out)\n\(result.err)")
    let f = fields(result.out)
    #expect((Int(f["max_us"] ?? "") ?? 0) >= 20_000, "\(f)")
    #expect((Int(f["p999_us"] ?? "") ?? 0) >= 20_000, "\(f)")
  }

  /// The benchmarks' memory figure: `defaults read --print-peak-memory` reports the reading process's own peak
  /// (VmHWM), which grows with what it reads — and only with that (#9: memory in proportion to reads, not to the
  /// suite). 200,000 keys of 100 bytes (20 MB of values): reading all of them costs over 20 MB more than reading
  /// a one-key suite; reading one of them costs at most 10 MB more (the image is mapped and looked up, not parsed).
  @Test func aReaderReportsItsOwnPeakMemoryWhichFollowsWhatItReads() async throws {
    let root = try TestRoot()
    let group = "group.com.example.stress"
    var peaks: [String: Int] = [:]
    for (suite, keys) in [("small", 1), ("large", 200_000)] {
      let value = String(repeating: "x", count: 100)
      let entries = (0..<keys).map { "\"w0-k\($0)\" = \"\(value)\";" }.joined(separator: " ")
      let plist = root.path + "/\(suite).plist"
      try Data("{ \(entries) }".utf8).write(to: URL(fileURLWithPath: plist))
      let imported = try await groupctl(["defaults", "import", group, suite, plist, "--root", root.path])
      #expect(imported.status == 0, "\(imported.err)")
      for (label, key) in [("one", ["w0-k0"]), ("all", [])] {
        let read = try await groupctl(
          ["defaults", "read", group] + key + ["--suite", suite, "--root", root.path, "--print-peak-memory"])
        #expect(read.status == 0, "\(read.err)")
        peaks["\(suite) \(label)"] = Int(fields(read.out)["peak_rss_kb"] ?? "") ?? 0
      }
    }
    let small = peaks["small one"] ?? 0
    #expect(small > 1_000, "peaks \(peaks) KB")
    #expect((peaks["large all"] ?? 0) > small + 20_000, "peaks \(peaks) KB")
    #expect((peaks["large one"] ?? .max) <= small + 10_000, "peaks \(peaks) KB")
  }
}
