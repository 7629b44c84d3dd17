import Foundation
import TestSupport
import Testing

/// The test hooks — fault and pause points armed from the environment, the system-call recorder, the variables
/// that simulate a missing inotify or socket, the counters tests read — are compiled only with the package's
/// `TestHooks` trait (issue #36). A dependent's build never enables it, and the Examples package is such a
/// dependent (it depends on this package by path, with no traits): its programs must hold none of them, while the
/// programs of this package's own test build (`make test` passes `--traits TestHooks`) hold them all — which shows the
/// markers below are the right ones.
///
/// Mutant this suite catches (run once): the define made unconditional in Package.swift (`.define(
/// "GROUPCONTAINER_TEST_HOOKS")`) → the Examples' `host` holds every marker.
@Suite struct TestHooksTests {
  /// What each hook leaves in a binary: the environment variables it reads, and mangled names of the state it keeps.
  static let markers = [
    "GROUPCONTAINER_FAULT_POINT", "GROUPCONTAINER_PAUSE_POINT", "GROUP_CONTAINER_SIMULATE_NO_INOTIFY",
    "GROUP_CONTAINER_INBOX_FILES_ONLY", "GROUPCONTAINER_IO_FAULT",
    "15SyscallRecorderO3Log", "15SyscallRecorderO7current", "10FaultPointO5armed", "11TestCounterC5count",
    "16IOFaultInjectionO5state",
  ]

  static func markers(in url: URL) throws -> [String] {
    let bytes = try Data(contentsOf: url, options: .alwaysMapped)
    return markers.filter { bytes.range(of: Data($0.utf8)) != nil }
  }

  @Test func aDependentsBuildHasNoTestHooks() throws {
    let testBuild = try Self.markers(in: productsDirectory.appendingPathComponent("groupctl"))
    #expect(testBuild == Self.markers, "this package's test build lacks some hooks: is `--traits TestHooks` passed?")
    for program in ["host", "widget"] {
      let found = try Self.markers(in: examplesDirectory.appendingPathComponent(program))
      #expect(found.isEmpty, "the Examples package's \(program) (a dependent's build) holds test hooks: \(found)")
    }
  }
}
