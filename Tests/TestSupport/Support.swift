import FileCoordination
import Foundation
import Synchronization
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

/// The directory of the built products (the test bundle sits beside the executables).
public let productsDirectory: URL = {
  let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  return URL(fileURLWithPath: exe).deletingLastPathComponent()
}()

/// A child process whose stdout lines the test can wait for.
public final class Child: Sendable {
  public let process: Process
  private let lines = Mutex<[String]>([])
  private let partial = Mutex<String>("")
  public let errors = Mutex<String>("")

  /// Starts `gc-test-helper` (or another product) with `arguments`.
  public init(_ arguments: [String], executable: String = "gc-test-helper", environment: [String: String] = [:]) throws
  {
    process = Process()
    process.executableURL = productsDirectory.appendingPathComponent(executable)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    out.fileHandleForReading.readabilityHandler = { [weak self] handle in
      let data = handle.availableData
      guard let self, !data.isEmpty else { return }
      let complete = self.partial.withLock { takeLines(data, from: &$0) }
      self.lines.withLock { $0 += complete }
    }
    err.fileHandleForReading.readabilityHandler = { [weak self] handle in
      let data = handle.availableData
      if let self, !data.isEmpty { self.errors.withLock { $0 += String(decoding: data, as: UTF8.self) } }
    }
    try launch(process)
  }

  public var output: [String] { lines.withLock { $0 } }
  public var pid: Int32 { process.processIdentifier }

  /// Waits (polling) until a line satisfies `predicate`; returns it, or fails the test after `timeout`.
  @discardableResult
  public func waitForLine(
    timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation, _ predicate: (String) -> Bool
  ) -> String? {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if let line = output.first(where: predicate) { return line }
      if !process.isRunning, output.first(where: predicate) == nil {
        Thread.sleep(forTimeInterval: 0.1)
        if let line = output.first(where: predicate) { return line }
        Issue.record(
          "child exited (\(process.terminationStatus)) before the expected line; stderr: \(errors.withLock { $0 })",
          sourceLocation: sourceLocation)
        return nil
      }
      Thread.sleep(forTimeInterval: 0.005)
    }
    Issue.record(
      "timed out waiting for a line; got \(output); stderr: \(errors.withLock { $0 })", sourceLocation: sourceLocation)
    return nil
  }

  /// Waits for the process to exit (a hang detector, not a performance check) and returns its status.
  @discardableResult
  public func waitForExit(timeout: Double = 45, sourceLocation: SourceLocation = #_sourceLocation) -> Int32? {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
    if process.isRunning {
      Issue.record("child did not exit within \(timeout) s; output \(output)", sourceLocation: sourceLocation)
      kill()
      return nil
    }
    Thread.sleep(forTimeInterval: 0.05)  // let the pipe handlers drain
    return process.terminationStatus
  }

  /// `waitForLine` for async tests: polls with `Task.sleep`, so the wait holds none of the few threads Swift
  /// Testing runs every test on (two on a 2-core machine: tests that block them for seconds starve the others
  /// into their time limits).
  @discardableResult
  public func line(
    timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation, _ predicate: (String) -> Bool
  ) async -> String? {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if let line = output.first(where: predicate) { return line }
      if !process.isRunning {
        try? await Task.sleep(for: .milliseconds(100))
        if let line = output.first(where: predicate) { return line }
        Issue.record(
          "child exited (\(process.terminationStatus)) before the expected line; stderr: \(errors.withLock { $0 })",
          sourceLocation: sourceLocation)
        return nil
      }
      try? await Task.sleep(for: .milliseconds(5))
    }
    // A task may resume long after its sleep when blocking tests hold the pool's threads: look once more.
    if let line = output.first(where: predicate) { return line }
    Issue.record(
      "timed out waiting for a line; got \(output); stderr: \(errors.withLock { $0 })", sourceLocation: sourceLocation)
    return nil
  }

  /// `waitForExit` for async tests (see `line`).
  @discardableResult
  public func exit(timeout: Double = 45, sourceLocation: SourceLocation = #_sourceLocation) async -> Int32? {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(10)) }
    if process.isRunning {
      Issue.record("child did not exit within \(timeout) s; output \(output)", sourceLocation: sourceLocation)
      kill()
      return nil
    }
    try? await Task.sleep(for: .milliseconds(50))  // let the pipe handlers drain
    return process.terminationStatus
  }

  public func kill(_ signal: Int32 = SIGKILL) {
    if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
    process.waitUntilExit()
  }

  deinit {
    if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
  }
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

public func monotonicNow() -> UInt64 {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Runs `body` on its own thread and waits at most `timeout` seconds for it, so a deadlock fails the test by
/// assertion instead of hanging it (the stuck thread is abandoned). Returns what `body` returned, nil on timeout.
@discardableResult
public func expectCompletes<T: Sendable>(
  within timeout: Double = 30, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
  _ body: @escaping @Sendable () throws -> T
) -> T? {
  let result = Mutex<Result<T, any Error>?>(nil)
  Thread {
    let outcome = Result { try body() }
    result.withLock { $0 = outcome }
  }.start()
  let deadline = Date().addingTimeInterval(timeout)
  while Date() < deadline, result.withLock({ $0 == nil }) { Thread.sleep(forTimeInterval: 0.005) }
  switch result.withLock({ $0 }) {
  case .success(let value)?: return value
  case .failure(let error)?:
    Issue.record("\(what) failed: \(error)", sourceLocation: sourceLocation)
    return nil
  case nil:
    Issue.record("\(what) did not complete within \(timeout) s", sourceLocation: sourceLocation)
    return nil
  }
}

/// Runs a tool (mount, umount, …) to completion and returns its exit status.
public func runTool(_ tool: String, _ arguments: [String]) throws -> Int32 {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: tool)
  process.arguments = arguments
  try launch(process)
  process.waitUntilExit()
  return process.terminationStatus
}

/// One `Process.run` at a time in the test process: whole-suite runs crashed inside Foundation's `Process.run`
/// (a bad pointer in memmove) while tests spawned children from several threads at once. Every spawn of the test
/// process goes through `launch(_:)`.
let spawnLock = NSLock()

/// Appends `data` to `buffer` and returns the complete lines it now holds (the rest stays in `buffer`).
func takeLines(_ data: Data, from buffer: inout String) -> [String] {
  buffer += String(decoding: data, as: UTF8.self)
  var complete: [String] = []
  while let newline = buffer.firstIndex(of: "\n") {
    complete.append(String(buffer[..<newline]))
    buffer.removeSubrange(...newline)
  }
  return complete
}

/// `process.run()`, one at a time in the test process (see `spawnLock`).
public func launch(_ process: Process) throws {
  try spawnLock.withLock { try process.run() }
}

/// A small tmpfs mounted in a test's root (full-disk and low-disk tests; needs root), unmounted when released.
public final class SmallDisk: Sendable {
  public let path: String

  /// Mounts a tmpfs of `size` (mount's syntax: "1m", "8m") at `<root>/<name>`; nil, with an issue recorded, when
  /// it cannot.
  public static func mount(in root: TestRoot, size: String, name: String = "disk", sourceLocation: SourceLocation = #_sourceLocation) throws
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

