import FileCoordination
import Foundation
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

/// The directory of the built products (the test bundle sits beside the executables).
public let productsDirectory: URL = {
  let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
  return URL(fileURLWithPath: exe).deletingLastPathComponent()
}()

/// A child process whose stdout lines the test can wait for.
public final class Child: Sendable {
  public let process: SpawnedProcess
  private let lines = LineCollector()
  public let errors = SharedText()

  /// Starts `gc-test-helper` (or another product) with `arguments`.
  public init(_ arguments: [String], executable: String = "gc-test-helper", environment: [String: String] = [:]) throws
  {
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process = try SpawnedProcess(
      executable: productsDirectory.appendingPathComponent(executable).path, arguments: arguments, environment: env,
      output: .pipe { [lines] in lines.append($0) }, error: .pipe { [errors] in errors.append($0) })
  }

  public var output: [String] { lines.all }
  public var pid: Int32 { process.processIdentifier }

  /// Waits (polling) until a line satisfies `predicate`; returns it, or fails the test after `timeout`.
  @discardableResult
  public func waitForLine(
    timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation, _ predicate: (String) -> Bool
  ) -> String? {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if let line = lines.first(where: predicate) { return line }
      if !process.isRunning {
        process.waitForOutput()
        if let line = lines.first(where: predicate) { return line }
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
    process.waitForOutput()
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
      if let line = lines.first(where: predicate) { return line }
      if !process.isRunning {
        await process.output()
        if let line = lines.first(where: predicate) { return line }
        Issue.record(
          "child exited (\(process.terminationStatus)) before the expected line; stderr: \(errors.withLock { $0 })",
          sourceLocation: sourceLocation)
        return nil
      }
      try? await Task.sleep(for: .milliseconds(5))
    }
    // A task may resume long after its sleep when blocking tests hold the pool's threads: look once more.
    if let line = lines.first(where: predicate) { return line }
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
    await process.output()
    return process.terminationStatus
  }

  public func kill(_ signal: Int32 = SIGKILL) {
    process.signal(signal)
    process.waitUntilExit()
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

public func monotonicNow() -> UInt64 { MonotonicClock.nanoseconds() }

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

/// Runs a tool (mount, umount, …) to completion, its output on the test process's, and returns its exit status.
public func runTool(_ tool: String, _ arguments: [String]) throws -> Int32 {
  let process = try SpawnedProcess(executable: tool, arguments: arguments, output: .inherit, error: .inherit)
  process.waitUntilExit()
  return process.terminationStatus
}

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

/// Runs `executable` (an absolute path) to its end with `input` on its stdin (nil: /dev/null) and returns its exit
/// status — nil, with an issue recorded, when it ran past `timeout` seconds and was killed — and what it wrote.
/// Started with posix_spawn like every child of the tests: Foundation's `Process.run` over-reads its directory
/// buffer while closing descriptors and crashed about one CI run in ten (swift-corelibs-foundation #5472).
public func runToEnd(
  _ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
  input: String? = nil, timeout: Double = 60, sourceLocation: SourceLocation = #_sourceLocation
) throws -> (status: Int32?, output: String, errors: String) {
  var stdin: SystemFD?
  if let input {
    // A file, not a pipe: nothing blocks on a child that never reads it, and no SIGPIPE when it exits first.
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("stdin-\(UUID().uuidString)").path
    try Data(input.utf8).write(to: URL(fileURLWithPath: path))
    stdin = try SystemFD.open(path, .readOnly)
    try? FileManager.default.removeItem(atPath: path)
  }
  defer { stdin?.close() }
  let (output, errors) = (SharedText(), SharedText())
  let process = try SpawnedProcess(
    executable: executable, arguments: arguments, environment: environment, input: stdin,
    output: .pipe(output.append), error: .pipe(errors.append))
  let deadline = Date().addingTimeInterval(timeout)
  while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.002) }
  var status: Int32? = nil
  if process.isRunning {
    Issue.record(
      "\(executable) \(arguments.prefix(3).joined(separator: " ")) did not end within \(timeout) s",
      sourceLocation: sourceLocation)
    process.signal(SIGKILL)
    process.waitUntilExit()
  } else {
    status = process.terminationStatus
  }
  process.waitForOutput(timeout: 5)
  return (status, output.withLock { $0 }, errors.withLock { $0 })
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

/// A child process of the test process, started with `posix_spawn` (SystemLayer's `ProcessSpawn.child`), not
/// Foundation's `Process`, whose handles leaked: each `Process` never waited with `waitUntilExit` stays alive (its
/// run loop source and it retain each other) and keeps its `Pipe`s open, and a `readabilityHandler` holds a second
/// descriptor of each pipe. Here every pipe end is close-on-exec (no other child inherits it, so its reader sees end
/// of file when its own child exits), a thread reads each pipe to end of file and then closes it, and a thread
/// reaps the child. Nothing depends on when the handle is released: a released handle only kills a child still
/// running (the readers then see end of file and close their ends).
public final class SpawnedProcess: Sendable {
  /// Where the child's stdout or stderr goes.
  package enum Sink: Sendable {
    /// A pipe read on a thread of its own; each chunk is handed to the closure, in order.
    case pipe(@Sendable ([UInt8]) -> Void)
    /// A file (the descriptor is the caller's; the child gets a copy).
    case file(SystemFD)
    /// The test process's own stdout or stderr.
    case inherit
  }

  public var processIdentifier: Int32 { child.pid }
  private let child: ProcessSpawn.Reaped
  private let readers: [PipeReader]

  /// Starts `executable` (an absolute path) with stdin from `input` (nil: /dev/null).
  init(
    executable: String, arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
    input: SystemFD? = nil, output: Sink, error: Sink
  ) throws {
    var parentEnds: [SystemFD] = []  // the write ends, closed here once the child has its copies
    var readEnds: [(SystemFD, @Sendable ([UInt8]) -> Void)] = []
    func childEnd(_ sink: Sink, standard: Int32) throws -> SystemFD {
      switch sink {
      case .file(let fd): return fd
      case .inherit: return SystemFD(rawValue: standard, path: "standard stream \(standard)")
      case .pipe(let handler):
        let (read, write) = try ProcessSpawn.pipe()
        readEnds.append((read, handler))
        parentEnds.append(write)
        return write
      }
    }
    do {
      let out = try childEnd(output, standard: 1)
      let err = try childEnd(error, standard: 2)
      child = try ProcessSpawn.Reaped(
        executable: executable, arguments: arguments, environment: environment, input: input, output: out,
        error: err)
    } catch {
      for fd in parentEnds { fd.close() }
      for (fd, _) in readEnds { fd.close() }
      throw error
    }
    for fd in parentEnds { fd.close() }
    readers = readEnds.map { PipeReader($0.0, onData: $0.1) }
  }

  public var isRunning: Bool { child.termination == nil }

  /// The exit status, or the signal that ended it (as Foundation's `Process` says); -1 while it runs.
  public var terminationStatus: Int32 {
    switch child.termination {
    case .exited(let status)?: return status
    case .signaled(let signal)?: return signal
    case nil: return -1
    }
  }

  public var terminationReason: Process.TerminationReason {
    if case .signaled? = child.termination { return .uncaughtSignal }
    return .exit
  }

  /// Whether every pipe of the child has been read to end of file (and closed).
  public var outputComplete: Bool { readers.allSatisfy(\.finished) }

  /// Sends `signal` unless the child has been reaped (its pid may then be another process's).
  public func signal(_ signal: Int32) {
    if isRunning { _ = Signals.send(signal, to: processIdentifier) }
  }

  /// Blocks until the child has exited (a hang detector of the caller bounds it: this waits as long as it runs).
  public func waitUntilExit() {
    while isRunning { Thread.sleep(forTimeInterval: 0.002) }
  }

  /// Waits (at most `timeout` seconds) until the child's pipes are read to end of file; false when they are not
  /// (a process it started still holds them).
  @discardableResult
  public func waitForOutput(timeout: Double = 2) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !outputComplete && Date() < deadline { Thread.sleep(forTimeInterval: 0.002) }
    return outputComplete
  }

  /// `waitForOutput` for async tests (holds no thread of the test pool).
  @discardableResult
  public func output(timeout: Double = 2) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !outputComplete && Date() < deadline { try? await Task.sleep(for: .milliseconds(2)) }
    return outputComplete
  }

  deinit {
    signal(SIGKILL)
  }
}

/// Reads one pipe on a thread of its own until end of file, hands each chunk to `onData`, then closes the
/// descriptor. Only this thread ever uses the descriptor, so it is never closed under a read (nor read after its
/// number was reused).
private final class PipeReader: Sendable {
  private let done = Mutex(false)

  init(_ fd: SystemFD, onData: @escaping @Sendable ([UInt8]) -> Void) {
    let thread = Thread { [self] in
      var buffer = [UInt8](repeating: 0, count: 64 * 1024)
      while true {
        let count = (try? buffer.withUnsafeMutableBytes { raw throws(FileSystemError) in try fd.read(into: raw) }) ?? 0
        if count == 0 { break }
        onData(Array(buffer[..<count]))
      }
      fd.close()
      done.withLock { $0 = true }
    }
    thread.name = "read \(fd.rawValue)"
    thread.start()
  }

  var finished: Bool { done.withLock { $0 } }
}

/// Text a child wrote, shared by its reader thread and the test (`child.errors.withLock { $0 }`).
public final class SharedText: Sendable {
  private let text = Mutex("")

  public init() {}

  public func withLock<R: Sendable>(_ body: (inout String) -> R) -> R { text.withLock { body(&$0) } }

  func append(_ bytes: [UInt8]) { text.withLock { $0 += String(decoding: bytes, as: UTF8.self) } }
}

/// A child's output split into lines as it arrives.
final class LineCollector: Sendable {
  private let lines = Mutex<[String]>([])
  private let partial = Mutex<String>("")

  /// Adds `bytes`; returns the lines they completed.
  @discardableResult
  func append(_ bytes: [UInt8]) -> [String] {
    let complete = partial.withLock { takeLines(Data(bytes), from: &$0) }
    lines.withLock { $0 += complete }
    return complete
  }

  var all: [String] { lines.withLock { $0 } }

  /// The first line that satisfies `predicate`, run outside the lock (it may read the child's output itself).
  func first(where predicate: (String) -> Bool) -> String? { all.first(where: predicate) }
}

/// Whether `condition` became true within `seconds`, looking every 10 ms: a bounded wait for something another
/// thread or process does in the background (never a timing check: the bound only keeps a broken test from hanging).
public func becomesTrue(within seconds: Double = 10, _ condition: () -> Bool) -> Bool {
  let deadline = Date().addingTimeInterval(seconds)
  while !condition() {
    if Date() > deadline { return false }
    Thread.sleep(forTimeInterval: 0.01)
  }
  return true
}
