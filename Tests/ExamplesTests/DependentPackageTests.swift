import Foundation
import TestSupport
import Testing

/// A package that depends on GroupContainer by path and names its own executables `host`, `widget` and `app` — the
/// obvious names for an app and its widget (issue #35) — resolves and plans its build. SwiftPM requires target names
/// to be unique across a package graph, and every product of a dependency brings its targets along: the demo's
/// `host` and `widget` as products made such a package fail with "multiple packages declare targets with a
/// conflicting name". `gc-file-server` and `gc-test-helper` are executables of this package's tests only (not
/// products), and are named too: they must stay out of a dependent's graph.
///
/// `swift build --print-manifest-job-graph` loads the whole package graph, where the check is, and compiles nothing
/// (`swift package resolve` and `describe` do not load the graph: they pass with the clash).
///
/// Mutant this suite catches (run once): `.executable(name: "host", targets: ["host"])` put back into the root's
/// products with a `host` target → `aPackageWithTheDemosTargetNamesResolves` fails with SwiftPM's "conflicting name:
/// 'host'".
@Suite(.runSlot(.minutes(10))) struct DependentPackageTests {
  static let names = ["host", "widget", "app", "gc-file-server", "gc-test-helper"]

  @Test func aPackageWithTheDemosTargetNamesResolves() async throws {
    // In the build directory, kept between runs: only the first run clones the dependencies (about a minute), the
    // next ones plan in seconds. The manifest and sources are written afresh every time.
    let package = productsDirectory.deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("dependent-package-check/MyApp")
    try? FileManager.default.removeItem(at: package.appendingPathComponent("Sources"))
    // A path dependency is named by its directory (the clone may be called anything).
    let identity = repositoryDirectory.lastPathComponent.lowercased()
    let targets = Self.names.map {
      """
          .executableTarget(name: "\($0)", dependencies: [.product(name: "GroupContainer", package: "\(identity)")]),
      """
    }
    let manifest = """
      // swift-tools-version: 6.1
      import PackageDescription

      let package = Package(
        name: "MyApp",
        dependencies: [.package(path: "\(repositoryDirectory.path)")],
        targets: [
      \(targets.joined(separator: "\n"))
        ]
      )

      """
    for name in Self.names {
      let directory = package.appendingPathComponent("Sources/\(name)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
      try Data("import GroupContainer\nprint(\"\(name)\")\n".utf8).write(
        to: directory.appendingPathComponent("main.swift"))
    }
    try Data(manifest.utf8).write(to: package.appendingPathComponent("Package.swift"))
    let swift = try #require(Self.swift(), "no `swift` on PATH")
    // Resolving clones the dependencies (from the local mirrors): minutes on a loaded machine, a bound for a hang.
    let run = try await runToEnd(
      swift, ["build", "--package-path", package.path, "--print-manifest-job-graph"], timeout: 540)
    #expect(run.status == 0, "a dependent package with targets \(Self.names) does not plan its build: \(run.errors)")
    #expect(!run.errors.contains("conflicting name"), "\(run.errors)")
  }

  static func swift() -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    return path.split(separator: ":").map { "\($0)/swift" }.first { FileManager.default.isExecutableFile(atPath: $0) }
  }
}
