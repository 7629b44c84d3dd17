import Foundation
import Logging
import Synchronization
import SystemLayer
import Testing

/// A test's turn to run, and its time limit counted from that turn.
///
/// Swift Testing starts every test at once, and its `.timeLimit` runs from that start: on two cores, tests that
/// start processes or loop for seconds made others run out of time before they ran. A test or suite with
/// `.runSlot(.minutes(2))` waits for one of `RunSlots.width` slots, then has its limit; the wait does not count.
/// The limit catches hangs only: size it for the test's work on a machine kept busy by other programs (`make
/// test-under-load`).
///
/// `.runSlot(limit, alone: true)` takes every slot: for a test that changes something the whole test process shares
/// — `Watcher.shared.stall` leaves every test's inotify events and datagrams unread, so a coordinated write of
/// another test running meanwhile could wait for an ack file until its presenter timeout. It waits for the tests
/// running to end, and the tests after it wait for it (slots are handed out in the order asked for).
///
/// The slot also captures what the library logs during the test (swift-log, in this process) and prints it only
/// when the test records an issue.
public struct RunSlot: TestTrait, SuiteTrait, TestScoping {
  public let limit: Duration
  /// Every slot: no other test with a slot runs meanwhile.
  public let alone: Bool

  public var isRecursive: Bool { true }

  public func scopeProvider(for test: Test, testCase: Test.Case?) -> RunSlot? {
    // Suites get nothing of their own: each test case of theirs takes a slot.
    testCase == nil ? nil : self
  }

  public func provideScope(
    for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
  ) async throws {
    // A suite's trait and the test's own: the outermost takes the slot and gives the test the longest limit
    // among them (a test that says it needs longer than its suite gets it).
    if RunSlots.held != nil { return try await function() }
    let slots = test.traits.compactMap { $0 as? RunSlot }
    let limit = slots.map(\.limit).max() ?? limit
    let count = slots.contains(where: \.alone) || alone ? RunSlots.width : 1
    await RunSlots.shared.acquire(count)
    defer { RunSlots.shared.release(count) }
    let log = CapturedLog()
    let failed = Atomic(false)
    let noteFailure = IssueHandlingTrait.compactMapIssues { issue in
      failed.store(true, ordering: .relaxed)
      return issue
    }
    let start = ContinuousClock.now
    defer { RunSlots.record(ContinuousClock.now - start, of: test) }
    try await RunSlots.$held.withValue(Held(limit: limit, alone: count == RunSlots.width, log: log)) {
      try await noteFailure.provideScope(for: test, testCase: testCase) {
        try await withLimit(limit, test: test, function)
      }
    }
    if failed.load(ordering: .relaxed) { log.print(for: test) }
  }

  struct Held: Sendable {
    var limit: Duration
    var alone: Bool
    var log: CapturedLog
  }
}

extension Trait where Self == RunSlot {
  /// Runs the test (each test of the suite) in one of `RunSlots.width` slots — in all of them when `alone` —, with
  /// `limit` counted from when it gets them.
  public static func runSlot(_ limit: Duration, alone: Bool = false) -> RunSlot {
    RunSlot(limit: limit, alone: alone)
  }
}

/// Runs `function`; when it has not returned within `limit`, records the hang and cancels it (every wait of the
/// tests ends on cancellation).
private func withLimit(
  _ limit: Duration, test: Test, _ function: @Sendable () async throws -> Void
) async throws {
  try await withoutActuallyEscaping(function) { function in
    try await withThrowingTaskGroup(of: Bool.self) { group in
      group.addTask {
        try await function()
        return true
      }
      group.addTask {
        try await Task.sleep(for: limit)
        return false
      }
      defer { group.cancelAll() }
      while let finished = try await group.next() {
        if finished { return }
        Issue.record("'\(test.name)' did not finish within \(limit) of getting its run slot (a hang)")
        group.cancelAll()
      }
    }
  }
}

/// The run slots of the test process: at most `width` tests run at a time.
public final class RunSlots: Sendable {
  /// Twice the processors, at least 4: tests mostly wait on child processes, so a few more than the cores keep
  /// them busy without making every test's wall time the whole run's.
  public static let width = max(4, 2 * ProcessInfo.processInfo.activeProcessorCount)
  package static let shared = RunSlots(width: width, bootstrapLog: true)

  @TaskLocal static var held: RunSlot.Held?

  private struct State {
    var free: Int
    /// In the order asked for: a test that wants every slot is not passed over by the tests asking after it.
    var waiting: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
  }
  private let state: Mutex<State>

  /// `width` slots (another set than the test process's: for tests of the slots themselves).
  package init(width: Int, bootstrapLog: Bool = false) {
    state = Mutex(State(free: width))
    if bootstrapLog { CapturedLog.bootstrapOnce }
  }

  /// With `GC_TEST_TIMES=<file>`: one line per test case, "<seconds in its slot>\t<suite/test>", appended (what
  /// `make test` reports as the slowest tests; Swift Testing's own durations include the wait for a slot).
  static func record(_ duration: Duration, of test: Test) {
    guard let path = ProcessInfo.processInfo.environment["GC_TEST_TIMES"] else { return }
    let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    let line = String(format: "%.3f\t%@\n", seconds, test.id.description)
    guard
      let handle = FileHandle(forWritingAtPath: path)
        ?? {
          FileManager.default.createFile(atPath: path, contents: nil)
          return FileHandle(forWritingAtPath: path)
        }()
    else { return }
    timesLock.withLock { _ in
      handle.seekToEndOfFile()
      handle.write(Data(line.utf8))
      try? handle.close()
    }
  }
  private static let timesLock = Mutex(())

  /// Waits for `count` slots (at most the width), taken together once that many are free and nobody asked before.
  package func acquire(_ count: Int = 1) async {
    await withCheckedContinuation { continuation in
      let now = state.withLock { s -> Bool in
        if s.waiting.isEmpty && s.free >= count {
          s.free -= count
          return true
        }
        s.waiting.append((count, continuation))
        return false
      }
      if now { continuation.resume() }
    }
  }

  /// Gives back `count` slots, and hands them on to the waiting in order while the first of them can have its count.
  package func release(_ count: Int = 1) {
    let next = state.withLock { s -> [CheckedContinuation<Void, Never>] in
      s.free += count
      var next: [CheckedContinuation<Void, Never>] = []
      while let first = s.waiting.first, first.count <= s.free {
        s.free -= first.count
        next.append(s.waiting.removeFirst().continuation)
      }
      return next
    }
    for continuation in next { continuation.resume() }
  }

  /// Slots free now, and how many asked and wait (for tests of the slots).
  package var free: Int { state.withLock { $0.free } }
  package var waiting: Int { state.withLock { $0.waiting.count } }
}

/// Runs `body` with the test process's watcher reading nothing (`Watcher.shared.stall`) for at most `nanoseconds`:
/// its events and datagrams wait in the kernel's queues. Every test of the process shares that watcher, so a test
/// that does this must run alone (`.runSlot(_, alone: true)`); one that does not records an issue.
public func withWatcherStalled<T>(
  nanoseconds: UInt64, _ body: () async throws -> T
) async rethrows -> T {
  if RunSlots.held?.alone != true {
    Issue.record("the test stalls the watcher every test of this process shares: give it .runSlot(_, alone: true)")
  }
  Watcher.shared.stall(nanoseconds: nanoseconds)
  defer { Watcher.shared.stall(nanoseconds: 0) }
  return try await body()
}

/// What the library logged (swift-log) during one test, kept in memory and printed only if the test fails. Messages
/// logged on the library's own threads belong to no test: the last of them are kept process-wide and printed with
/// a failure too, marked as such.
final class CapturedLog: Sendable {
  private let lines = Mutex<[String]>([])
  private static let limit = 400
  /// Messages from threads outside any test's task (the library's watcher, sweepers, timers).
  static let unattributed = CapturedLog()

  /// Makes every logger of the test process write here (once; the first test's slot does it).
  static let bootstrapOnce: Void = {
    LoggingSystem.bootstrap { label in CapturingLogHandler(label: label) }
  }()

  func append(_ line: String) {
    lines.withLock {
      $0.append(line)
      if $0.count > Self.limit { $0.removeFirst($0.count - Self.limit) }
    }
  }

  /// Every line kept so far.
  var all: [String] { lines.withLock { $0 } }

  func print(for test: Test) {
    let own = lines.withLock { $0 }
    let other = Self.unattributed.lines.withLock { $0.suffix(60) }
    var text = "--- library log of '\(test.name)' (\(own.count) lines) ---\n"
    for line in own { text += line + "\n" }
    if !other.isEmpty {
      text += "--- the last \(other.count) lines the library logged outside any test's task ---\n"
      for line in other { text += line + "\n" }
    }
    FileHandle.standardError.write(Data(text.utf8))
  }
}

/// What the library has logged so far in this test's task and on the library's own threads (the newest lines of
/// both), for a test that checks a message.
public func libraryLog() -> [String] {
  (RunSlots.held?.log.all ?? []) + CapturedLog.unattributed.all
}

/// Sends each message to the running test's `CapturedLog` (or the unattributed one).
struct CapturingLogHandler: LogHandler {
  let label: String
  var logLevel: Logger.Level = .info
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    let line = "\(Date()) \(event.level) \(label): \(event.message)"
    (RunSlots.held?.log ?? CapturedLog.unattributed).append(line)
  }
}

extension Duration {
  /// `n` minutes (as `TimeLimitTrait.Duration.minutes` reads).
  public static func minutes(_ n: Int) -> Duration { .seconds(n * 60) }
}
