import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// Replays inputs found by fuzzing (Tests/PropertyListTests/Regressions/) and the fuzz seeds.
@Suite("Regression corpus", .runSlot(.minutes(10)))
struct RegressionTests {
  static func files(in directory: URL) -> [URL] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
    return names.filter { !$0.hasPrefix(".") && !$0.hasSuffix(".md") }.sorted().map {
      directory.appendingPathComponent($0)
    }
  }

  static let regressionsDirectory = testsDirectory.appendingPathComponent("Regressions")
  static let seedsDirectory = testsDirectory.deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fuzz/seeds")

  @Test("every fuzzing crasher now parses or throws, and round-trips when it parses")
  func replayCrashers() throws {
    for file in Self.files(in: Self.regressionsDirectory) {
      let bytes = try [UInt8](Data(contentsOf: file))
      parseWithoutCrashing(bytes)
      // Also with the small limits the fuzzer uses.
      parseWithoutCrashing(bytes, limits: PropertyListLimits(maxBytes: 1 << 20, maxDepth: 512, maxObjects: 50_000))
    }
  }

  @Test("every fuzz seed is a valid property list")
  func seedsAreValid() throws {
    let seeds = Self.files(in: Self.seedsDirectory)
    #expect(seeds.count >= 5)
    for file in seeds {
      let bytes = try [UInt8](Data(contentsOf: file))
      #expect(throws: Never.self, "\(file.lastPathComponent)") { _ = try PropertyListValue(bytes: bytes) }
    }
  }
}
