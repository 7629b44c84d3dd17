import FileCoordination
import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer
import Testing

/// A fresh container root for one test (tests run in parallel in one process).
public final class TestRoot: Sendable {
  public let url: URL

  public init() throws {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("gc-tests", isDirectory: true)
    try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
    url = base.appendingPathComponent(UUID().uuidString, isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  }

  public var path: String { url.path }

  public func container(_ identifier: String = "group.com.example.tests") throws -> GroupContainer {
    try GroupContainer(identifier: identifier, root: url)
  }

  deinit { try? FileManager.default.removeItem(at: url) }
}

/// `rm -rf` of a tree that live processes may be writing into (a container a watcher rebinds, a cache a child
/// stores to): FileManager's walk fails when an entry appears or changes type under it (seen on CI as EPERM on the
/// container itself), and a user would run `rm -rf` again. Retries until the path is gone; the bound is for a hang.
public func removeTree(_ path: String) async throws {
  var lastError: (any Error)?
  let gone = await eventually {
    do {
      try FileManager.default.removeItem(atPath: path)
    } catch {
      lastError = error
    }
    var info = stat()
    return lstat(path, &info) != 0 && errno == ENOENT
  }
  if !gone { throw lastError ?? CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
}

/// The directory of the built products (the test bundle sits beside the executables).
public let productsDirectory: URL = {
  let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  return URL(fileURLWithPath: exe).deletingLastPathComponent()
}()

/// The repository (this file is Tests/TestSupport/Support.swift).
public let repositoryDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent()

/// The built programs of the Examples package (the demo's host and widget, the README's programs): a package of its
/// own, so that their names stay out of a dependent's graph. `make test` builds it first
/// (`swift build --package-path Examples`); `GC_EXAMPLES_BIN` names another build.
public let examplesDirectory: URL = {
  if let dir = ProcessInfo.processInfo.environment["GC_EXAMPLES_BIN"], !dir.isEmpty {
    return URL(fileURLWithPath: dir)
  }
  return repositoryDirectory.appendingPathComponent("Examples/.build/debug")
}()

/// The programs of the Examples package that tests run.
public let examplePrograms: Set<String> = [
  "host", "widget", "ported-widget", "getting-started", "tour-defaults", "tour-files", "tour-images", "tour-downloads",
]

/// Where `executable` is: in the Examples build for its programs (never a stale copy beside the tests from before
/// they moved there), else beside the tests (groupctl, gc-download-agent, …).
public func executablePath(_ executable: String) -> String {
  let directory = examplePrograms.contains(executable) ? examplesDirectory : productsDirectory
  return directory.appendingPathComponent(executable).path
}

/// Writes `text` as an executable script at `path`, with the project's atomic replace (`AtomicReplace`: every
/// descriptor `O_CLOEXEC`). Foundation's `write(toFile:atomically:)` writes through a `mkstemp` descriptor without it:
/// a child another test spawned meanwhile keeps that descriptor for its whole life, and running the script then fails
/// with `ETXTBSY` ("Text file busy") for as long as that child lives (seen in CI).
public func writeScript(_ text: String, to path: String) throws {
  let directory = try SystemFD.open((path as NSString).deletingLastPathComponent, [.readOnly, .directory])
  try AtomicReplace.write(Array(text.utf8), in: directory, name: (path as NSString).lastPathComponent, mode: 0o755)
}

/// What a program of the Examples package needs in its environment: its sessions start the download agent of this
/// build (the Examples build has none beside its programs).
public func examplesEnvironment(_ environment: [String: String]) -> [String: String] {
  var env = environment
  if env["GROUPCONTAINER_DOWNLOAD_AGENT"] == nil {
    env["GROUPCONTAINER_DOWNLOAD_AGENT"] = productsDirectory.appendingPathComponent("gc-download-agent").path
  }
  return env
}

/// One accessor interval from a helper log: "B <pid> <mode> <ns>" … "E <pid> <mode> <ns>".
public struct Interval {
  public var pid: Int32
  public var mode: String
  public var start: UInt64
  public var end: UInt64

  public func overlaps(_ other: Interval) -> Bool { start < other.end && other.start < end }

  public static func parse(_ log: String) -> [Interval] {
    var open: [Int32: (String, UInt64)] = [:]
    var result: [Interval] = []
    for line in log.split(separator: "\n") {
      let f = line.split(separator: " ")
      guard f.count == 4, let pid = Int32(f[1]), let ns = UInt64(f[3]) else { continue }
      if f[0] == "B" {
        open[pid] = (String(f[2]), ns)
      } else if let (mode, start) = open.removeValue(forKey: pid) {
        result.append(Interval(pid: pid, mode: mode, start: start, end: ns))
      }
    }
    return result
  }
}

public func monotonicNow() -> UInt64 { MonotonicClock.nanoseconds() }

/// Runs a tool that ends at once (mount, umount, …) to completion, its output on the test process's, and returns its
/// exit status (128 + the signal that ended it). Blocks in `waitpid`: for the few setup steps that must finish
/// before a test goes on, and for `deinit`s.
public func runTool(_ tool: String, _ arguments: [String]) throws -> Int32 {
  let pid = try ProcessSpawn.child(
    executable: tool, arguments: arguments, environment: ProcessInfo.processInfo.environment, input: nil,
    output: SystemFD.view(1, path: "stdout"), error: SystemFD.view(2, path: "stderr"))
  switch try ProcessSpawn.waitForExit(pid) {
  case .exited(let status): return status
  case .signaled(let signal): return 128 + signal
  }
}

/// A small tmpfs mounted in a test's root (full-disk and low-disk tests; needs root), unmounted when released.
public final class SmallDisk: Sendable {
  public let path: String

  /// Mounts a tmpfs of `size` (mount's syntax: "1m", "8m") at `<root>/<name>`; nil, with an issue recorded, when
  /// it cannot.
  public static func mount(
    in root: TestRoot, size: String, name: String = "disk", sourceLocation: SourceLocation = #_sourceLocation
  ) throws
    -> SmallDisk?
  {
    let path = root.path + "/" + name
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    guard try runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path]) == 0 else {
      Issue.record("cannot mount a tmpfs at \(path) (the tests run as root)", sourceLocation: sourceLocation)
      return nil
    }
    return SmallDisk(path: path)
  }

  private init(path: String) { self.path = path }

  deinit { _ = try? runTool("/bin/umount", ["-l", path]) }
}
