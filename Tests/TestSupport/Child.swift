import Foundation
import Synchronization
import SystemLayer
import Testing

/// A child process whose stdout the test reads as an `AsyncSequence` of lines (`lines`), waiting for the line it
/// expects with a deadline (`line`) and for the exit (`exit`). Nothing polls: lines and the exit arrive as events
/// from the threads that read the pipes and reap the child.
public final class Child: Sendable {
  public let process: SpawnedProcess
  private let collector = LineCollector()
  public let errors = SharedText()

  /// Starts the product `executable` (groupctl, gc-download-agent, … or a program of the Examples package: see
  /// `executablePath`) with `arguments`. gc-test-helper is started
  /// with a typed command instead (`Child(_:root:group:)` in HelperChild.swift).
  public init(_ arguments: [String], executable: String, environment: [String: String] = [:]) throws {
    let path = executablePath(executable)
    let example = examplePrograms.contains(executable)
    var env = ProcessInfo.processInfo.environment
    for (k, v) in example ? examplesEnvironment(environment) : environment { env[k] = v }
    guard FileManager.default.isExecutableFile(atPath: path) else {
      throw MissingExecutable(name: executable, path: path)
    }
    process = try SpawnedProcess(
      executable: path, arguments: arguments, environment: env,
      output: .pipe { [collector] in
        collector.append($0)
      } end: { [collector] in
        collector.finish()
      },
      error: .pipe { [errors] in errors.append($0) })
  }

  /// Every line the child has written so far.
  public var output: [String] { collector.all }
  public var pid: Int32 { process.processIdentifier }

  /// The child's stdout as lines: from its first line, as they arrive, ending when the child closes its stdout.
  public var lines: AsyncStream<String> { collector.stream() }

  /// The first line (from the start of the output) that satisfies `predicate`; nil, with an issue recorded, when
  /// the child's output ends without one or `timeout` seconds pass first (a hang, not slowness: see `Wait`).
  @discardableResult
  public func line(
    timeout: Double = Wait.line, sourceLocation: SourceLocation = #_sourceLocation,
    _ predicate: @escaping @Sendable (String) -> Bool
  ) async -> String? {
    let found = Latch<String?>()
    let reader = Task { [lines] in
      for await line in lines where predicate(line) {
        found.resolve(line)
        return
      }
      found.resolve(nil)  // end of output
    }
    defer { reader.cancel() }
    switch await found.wait(seconds: timeout) {
    case .some(.some(let line)): return line
    case .some(.none):
      _ = await process.exited(within: 5)
      Issue.record(
        "child exited (\(process.terminationStatus)) before the expected line; output \(output); stderr: \(errors.text)",
        sourceLocation: sourceLocation)
      return nil
    case .none:
      // The reading task may not have run yet when the test's threads were all busy: look at what arrived.
      if let line = collector.all.first(where: predicate) { return line }
      Issue.record(
        "no expected line within \(timeout) s; got \(output); stderr: \(errors.text)", sourceLocation: sourceLocation)
      return nil
    }
  }

  /// `line` for a synchronous callback that must wait in place (inside a coordinated accessor or a presenter's
  /// handler): blocks the calling thread, on a semaphore the reader thread signals, never on a task.
  @discardableResult
  public func lineBlocking(
    timeout: Double = Wait.line, sourceLocation: SourceLocation = #_sourceLocation,
    _ predicate: @escaping @Sendable (String) -> Bool
  ) -> String? {
    if let line = collector.waitBlocking(seconds: timeout, predicate) { return line }
    Issue.record(
      "no expected line within \(timeout) s (or the output ended); got \(output); stderr: \(errors.text)",
      sourceLocation: sourceLocation)
    return nil
  }

  /// Waits for the child to exit (a hang detector, not a performance check) and for its output to be read; returns
  /// its status, or nil (child killed, issue recorded) when it runs past `timeout` seconds.
  @discardableResult
  public func exit(timeout: Double = Wait.exit, sourceLocation: SourceLocation = #_sourceLocation) async -> Int32? {
    guard await process.exited(within: timeout) else {
      Issue.record("child did not exit within \(timeout) s; output \(output)", sourceLocation: sourceLocation)
      kill()
      return nil
    }
    await process.output()
    return process.terminationStatus
  }

  /// Sends `signal` (a request to end: SIGTERM, SIGINT) and waits for the child to exit, as `exit` does.
  @discardableResult
  public func stop(
    _ signal: Int32 = SIGTERM, timeout: Double = Wait.exit, sourceLocation: SourceLocation = #_sourceLocation
  ) async -> Int32? {
    process.signal(signal)
    return await exit(timeout: timeout, sourceLocation: sourceLocation)
  }

  /// Sends `signal` and, for SIGKILL, returns once the child has been reaped (a killed process ends at once; this
  /// blocks for that moment only).
  public func kill(_ signal: Int32 = SIGKILL) {
    process.signal(signal)
    if signal == SIGKILL { process.waitForReapAfterKill() }
  }
}

/// A child process of the test process, started with `posix_spawn` (SystemLayer's `ProcessSpawn.Reaped`), not
/// Foundation's `Process` (its handles leaked and its `run` over-reads a directory buffer in a process with many
/// descriptors). Every pipe end is close-on-exec, a thread reads each pipe to end of file and then closes it, and a
/// thread reaps the child; the exit and the end of each pipe are events a task can await. A released handle only
/// kills a child still running.
public final class SpawnedProcess: Sendable {
  /// Where the child's stdout or stderr goes.
  package enum Sink: Sendable {
    /// A pipe read on a thread of its own; each chunk is handed to the closure, in order, then `end` is called.
    case pipe(@Sendable ([UInt8]) -> Void, end: @Sendable () -> Void = {})
    /// A file: the raw descriptor of one the caller owns and keeps open until the child started (it gets a copy).
    case file(Int32)
    /// The test process's own stdout or stderr.
    case inherit
  }

  public var processIdentifier: Int32 { child.pid }
  private let child: ProcessSpawn.Reaped
  private let ended = Latch<ProcessSpawn.Termination>()
  /// Left by the reaper thread: a thread may block on it (never on a task, which needs the test pool's threads).
  private let reaped = DispatchGroup()
  private let readers: [Latch<Void>]

  /// Starts `executable` (an absolute path) with stdin from `input` (nil: /dev/null).
  init(
    executable: String, arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
    input: borrowing SystemFD? = nil, output: Sink, error: Sink
  ) throws {
    var parentEnds: [DescriptorBox] = []  // the write ends, closed here once the child has its copies
    var readEnds: [(DescriptorBox, @Sendable ([UInt8]) -> Void, @Sendable () -> Void)] = []
    func childEnd(_ sink: Sink, standard: Int32) throws -> SystemFD {
      switch sink {
      case .file(let raw): return SystemFD.view(raw, path: "file")
      case .inherit: return SystemFD.view(standard, path: "standard stream \(standard)")
      case .pipe(let handler, let end):
        let (read, write) = try ProcessSpawn.pipe().split()
        readEnds.append((read, handler, end))
        parentEnds.append(write)
        return write.fd.borrowedView  // `parentEnds` keeps it open until the child has its copy
      }
    }
    let ended = ended, reaped = reaped
    reaped.enter()
    do {
      let out = try childEnd(output, standard: 1)
      let err = try childEnd(error, standard: 2)
      child = try ProcessSpawn.Reaped(
        executable: executable, arguments: arguments, environment: environment, input: input, output: out,
        error: err,
        onExit: {
          ended.resolve($0)
          reaped.leave()
        })
    } catch {
      reaped.leave()
      throw error  // the pipes close with `parentEnds` and `readEnds`
    }
    parentEnds = []  // closes the write ends: the child has its copies
    readers = readEnds.map { readToEnd($0.0, onData: $0.1, onEnd: $0.2) }
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
  public var outputComplete: Bool { readers.allSatisfy { $0.value != nil } }

  /// Sends `signal` unless the child has been reaped (its pid may then be another process's).
  public func signal(_ signal: Int32) {
    if isRunning { _ = Signals.send(signal, to: processIdentifier) }
  }

  /// Whether the child exited within `seconds`.
  public func exited(within seconds: Double = Wait.exit) async -> Bool {
    await ended.wait(seconds: seconds) != nil
  }

  /// Waits (at most `timeout` seconds) until the child's pipes are read to end of file; false when they are not
  /// (a process it started still holds them).
  @discardableResult
  public func output(timeout: Double = 10) async -> Bool {
    for reader in readers where await reader.wait(seconds: timeout) == nil { return false }
    return true
  }

  /// Blocks until a child sent SIGKILL has been reaped (bounded: a stuck reap is reported by the caller's checks).
  func waitForReapAfterKill() {
    _ = reaped.wait(timeout: .now() + 30)
  }

  deinit {
    signal(SIGKILL)
  }
}

/// Reads `file` on a thread of its own until end of file, hands each chunk to `onData`, then calls `onEnd`; the
/// descriptor closes when the thread lets go of it. Only this thread ever uses the descriptor, so it is never closed
/// under a read (nor read after its number was reused). The latch is resolved at the end.
private func readToEnd(
  _ file: DescriptorBox, onData: @escaping @Sendable ([UInt8]) -> Void, onEnd: @escaping @Sendable () -> Void
) -> Latch<Void> {
  let done = Latch<Void>()
  // Held here, not captured: the thread lets go of it before it announces the end, so a complete output is a closed
  // pipe (captured, it closed when the thread object went, after the announcement: a test that checked the
  // process's descriptors right after found the pipe still open).
  let open = Mutex<DescriptorBox?>(file)
  let thread = Thread {
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    if let file = open.withLock({ $0 }) {
      while true {
        let count =
          (try? buffer.withUnsafeMutableBytes { raw throws(FileSystemError) in try file.fd.read(into: raw) }) ?? 0
        if count == 0 { break }
        onData(Array(buffer[..<count]))
      }
    }
    open.withLock { $0 = nil }  // the last reference once `Child.init` returned: closes the read end
    onEnd()
    done.resolve(())
  }
  thread.name = "read \(file.fd.rawValue)"
  thread.start()
  return done
}

/// Text a child wrote, shared by its reader thread and the test.
public final class SharedText: Sendable {
  private let storage = Mutex("")

  public init() {}

  /// What has been written so far.
  public var text: String { storage.withLock { $0 } }

  public func withLock<R: Sendable>(_ body: (inout String) -> R) -> R { storage.withLock { body(&$0) } }

  func append(_ bytes: [UInt8]) { storage.withLock { $0 += String(decoding: bytes, as: UTF8.self) } }
}

/// A child's output split into lines as it arrives, replayed to each stream from the first line.
final class LineCollector: Sendable {
  private struct State {
    var lines: [String] = []
    var partial: [UInt8] = []
    var blocked: [UInt64: BlockedWaiter] = [:]
    var finished = false
    var streams: [UInt64: AsyncStream<String>.Continuation] = [:]
    var nextStream: UInt64 = 0
  }
  private let state = Mutex(State())

  /// Adds `bytes` (called by the one thread that reads the pipe, in order); returns the lines they completed.
  @discardableResult
  func append(_ bytes: [UInt8]) -> [String] {
    let (complete, streams) = state.withLock { s -> ([String], [AsyncStream<String>.Continuation]) in
      s.partial += bytes
      var complete: [String] = []
      while let newline = s.partial.firstIndex(of: UInt8(ascii: "\n")) {
        complete.append(String(decoding: s.partial[..<newline], as: UTF8.self))
        s.partial.removeSubrange(...newline)
      }
      s.lines += complete
      for (id, waiter) in s.blocked {
        if let line = complete.first(where: waiter.predicate) {
          waiter.found.withLock { $0 = line }
          waiter.semaphore.signal()
          s.blocked[id] = nil
        }
      }
      return (complete, Array(s.streams.values))
    }
    // Outside the lock: a stream registered meanwhile replayed these lines already and is not in `streams`.
    for stream in streams { for line in complete { stream.yield(line) } }
    return complete
  }

  /// The end of the output: a last line without a newline counts, and every stream finishes.
  func finish() {
    let (last, streams) = state.withLock { s -> (String?, [AsyncStream<String>.Continuation]) in
      var last: String?
      if !s.partial.isEmpty {
        last = String(decoding: s.partial, as: UTF8.self)
        s.lines.append(last!)
        s.partial = []
      }
      s.finished = true
      for waiter in s.blocked.values { waiter.semaphore.signal() }
      s.blocked = [:]
      defer { s.streams = [:] }
      return (last, Array(s.streams.values))
    }
    for stream in streams {
      if let last { stream.yield(last) }
      stream.finish()
    }
  }

  var all: [String] { state.withLock { $0.lines } }

  /// A thread blocked in `waitBlocking`.
  private final class BlockedWaiter: Sendable {
    let predicate: @Sendable (String) -> Bool
    let semaphore = DispatchSemaphore(value: 0)
    let found = Mutex<String?>(nil)
    init(predicate: @escaping @Sendable (String) -> Bool) { self.predicate = predicate }
  }

  /// The first line satisfying `predicate`, blocking the calling thread until it arrives; nil when the output ends
  /// or `seconds` pass first.
  func waitBlocking(seconds: Double, _ predicate: @escaping @Sendable (String) -> Bool) -> String? {
    let waiter = BlockedWaiter(predicate: predicate)
    let (ready, id) = state.withLock { s -> (String??, UInt64) in
      if let line = s.lines.first(where: predicate) { return (.some(line), 0) }
      if s.finished { return (.some(nil), 0) }
      s.nextStream += 1
      s.blocked[s.nextStream] = waiter
      return (nil, s.nextStream)
    }
    if let ready { return ready }
    if waiter.semaphore.wait(timeout: .now() + seconds) == .timedOut {
      state.withLock { _ = $0.blocked.removeValue(forKey: id) }
    }
    return waiter.found.withLock { $0 }
  }

  func stream() -> AsyncStream<String> {
    AsyncStream { continuation in
      let id = state.withLock { s -> UInt64? in
        for line in s.lines { continuation.yield(line) }
        if s.finished { return nil }
        s.nextStream += 1
        s.streams[s.nextStream] = continuation
        return s.nextStream
      }
      guard let id else { return continuation.finish() }
      continuation.onTermination = { [weak self] _ in
        _ = self?.state.withLock { $0.streams.removeValue(forKey: id) }
      }
    }
  }
}

/// Runs `executable` (an absolute path) to its end with `input` on its stdin (nil: /dev/null) and returns its exit
/// status — nil, with an issue recorded, when it ran past `timeout` seconds and was killed — and what it wrote.
public func runToEnd(
  _ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
  input: String? = nil, timeout: Double = Wait.exit, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> (status: Int32?, output: String, errors: String) {
  var stdin: SystemFD?
  if let input {
    // A file, not a pipe: nothing blocks on a child that never reads it, and no SIGPIPE when it exits first.
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("stdin-\(UUID().uuidString)").path
    try Data(input.utf8).write(to: URL(fileURLWithPath: path))
    stdin = try SystemFD.open(path, .readOnly)
    try? FileManager.default.removeItem(atPath: path)
  }
  let (output, errors) = (SharedText(), SharedText())
  let process = try SpawnedProcess(
    executable: executable, arguments: arguments, environment: environment, input: stdin,
    output: .pipe(output.append), error: .pipe(errors.append))
  var status: Int32? = nil
  if await process.exited(within: timeout) {
    status = process.terminationStatus
  } else {
    Issue.record(
      "\(executable) \(arguments.prefix(3).joined(separator: " ")) did not end within \(timeout) s",
      sourceLocation: sourceLocation)
    process.signal(SIGKILL)
    _ = await process.exited(within: 30)
  }
  await process.output(timeout: 10)
  return (status, output.text, errors.text)
}

/// A program the tests run is not built: the Examples package's programs are built by
/// `swift build --package-path Examples` (`make test` does it before the tests).
public struct MissingExecutable: Error, CustomStringConvertible {
  public var name: String
  public var path: String
  public var description: String {
    "no executable '\(name)' at \(path): build the examples first (`swift build --package-path Examples`, "
      + "which `make test` runs) or set GC_EXAMPLES_BIN to their build directory"
  }
}
