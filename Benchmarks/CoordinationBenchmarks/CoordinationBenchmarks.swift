// What coordination costs, each figure measured in the same run as the raw-syscall baseline it is compared with.
//
//   Baseline: flock+write                     flock(LOCK_EX) → atomic replace of a 64-byte file → flock(LOCK_UN)
//   Coordinated write (no remote presenter)   FileCoordinator.coordinate(writingItemAt:) + GroupContainer.write
//   Baseline: flock pair                      flock(LOCK_EX) → flock(LOCK_UN)
//   Coordinated empty access                  coordinate(writingItemAt:) with an empty accessor
//   Handshake with one remote presenter       coordinated write while `groupctl present` presents the item
//   Uncoordinated write → presenter callback  raw open(O_TRUNC)/write/close → in-process presentedItemDidChange
//
// Run from this directory: `swift package --allow-writing-to-package-directory benchmark` (or `make bench`).
//
// The handshake benchmark runs `groupctl` as the other process. It takes, in this order: `$GROUPCTL`; the
// `groupctl` built next to this benchmark executable (Package.swift lists it as a dependency, so the benchmark
// build builds it in the same configuration); `<root package>/.build/release/groupctl`; `.../debug/groupctl`.
//
// Every benchmark uses its own container root under /tmp (`gc-bench-*`), removed by its teardown.

import Benchmark
import Dispatch
import Foundation
import Glibc
import GroupContainer
import Synchronization

let benchmarks: @Sendable () -> Void = {
  /// Fast benchmarks (a few µs each): many iterations.
  let fast = Benchmark.Configuration(
    metrics: [.wallClock, .throughput, .mallocCountTotal],
    timeUnits: .nanoseconds,
    warmupIterations: 100,
    maxDuration: .seconds(5),
    maxIterations: 100_000
  )
  /// Cross-thread / cross-process round trips (tens of µs to a millisecond).
  let slow = Benchmark.Configuration(
    metrics: [.wallClock, .throughput, .mallocCountTotal],
    timeUnits: .microseconds,
    warmupIterations: 50,
    maxDuration: .seconds(5),
    maxIterations: 10_000
  )

  // MARK: 1. Baseline: flock + atomic replace, raw syscalls

  let raw = RawFixture()
  Benchmark("Baseline: flock+write", configuration: fast) { benchmark in
    for _ in benchmark.scaledIterations {
      try raw.lockedReplace()
    }
  } setup: {
    try raw.setUp()
  } teardown: {
    raw.tearDown()
  }

  // MARK: 2. Coordinated write, nobody presents anything

  let write = ContainerFixture(identifier: "group.bench.write", item: "Documents/c.txt")
  Benchmark("Coordinated write (no remote presenter)", configuration: fast) { benchmark in
    let (coordinator, container, url) = try write.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
    }
  } setup: {
    try write.setUp()
  } teardown: {
    write.tearDown()
  }

  // MARK: 3. The locking alone

  let pair = RawFixture()
  Benchmark("Baseline: flock pair", configuration: fast) { benchmark in
    for _ in benchmark.scaledIterations {
      try pair.lockPair()
    }
  } setup: {
    try pair.setUp()
  } teardown: {
    pair.tearDown()
  }

  let empty = ContainerFixture(identifier: "group.bench.empty", item: "Documents/e.txt")
  Benchmark("Coordinated empty access", configuration: fast) { benchmark in
    let (coordinator, _, url) = try empty.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { _ in }
    }
  } setup: {
    try empty.setUp()
  } teardown: {
    empty.tearDown()
  }

  // MARK: 4. Full prepare/ack/finish handshake with a presenter in another process

  let handshake = ContainerFixture(identifier: "group.bench.handshake", item: "Documents/h.txt")
  let child = ChildFixture()
  Benchmark("Handshake with one remote presenter", configuration: slow) { benchmark in
    let (coordinator, container, url) = try handshake.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
    }
    child.writes.add(benchmark.scaledIterations.count, ordering: .relaxed)
  } setup: {
    try handshake.setUp()
    // A presenter that does not answer must fail the benchmark loudly, not add a silent 5 s per iteration.
    handshake.coordinator?.presenterTimeout = .seconds(2)
    handshake.coordinator?.presenterTimeoutPolicy = .fail
    do {
      try child.start(group: handshake.identifier, item: handshake.item, root: handshake.root!)
    } catch {
      child.stop()
      handshake.tearDown()
      throw error
    }
  } teardown: {
    child.stop()
    handshake.tearDown()
  }

  // MARK: 5. An uncoordinated write seen through inotify

  let callback = CallbackFixture()
  Benchmark("Uncoordinated write → presenter callback latency", configuration: slow) { benchmark in
    for _ in benchmark.scaledIterations {
      try callback.writeAndWait()
    }
  } setup: {
    try callback.setUp()
  } teardown: {
    callback.tearDown()
  }
}

// MARK: - Fixtures

/// What every write stores: 64 bytes.
let payload = Data((0..<64).map { UInt8(truncatingIfNeeded: $0 &+ 0x20) })
let payloadBytes = [UInt8](payload)

struct BenchmarkSetupError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// A fresh directory under /tmp.
func makeTemporaryRoot() throws -> String {
  var template = Array("/tmp/gc-bench-XXXXXX".utf8CString)
  guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
    throw BenchmarkSetupError("mkdtemp failed: errno \(errno)")
  }
  return String(cString: made)
}

func removeTree(_ path: String?) {
  guard let path, path.hasPrefix("/tmp/gc-bench-") else { return }
  try? FileManager.default.removeItem(atPath: path)
}

/// The baselines: the same syscalls the coordinated write makes for its item lock and its atomic replace
/// (temp file with O_EXCL → write → fchmod → close → rename; no fsync), with none of the framework around them.
/// The benchmark runner calls setUp, the iterations and tearDown one after another, never at once.
final class RawFixture: @unchecked Sendable {
  private var root: String?
  private var lockFD: Int32 = -1
  private var target = ""
  private var tempPrefix = ""
  private var counter = 0

  func setUp() throws {
    let root = try makeTemporaryRoot()
    self.root = root
    let directory = root + "/Documents"
    guard mkdir(directory, 0o700) == 0 else { throw BenchmarkSetupError("mkdir \(directory): errno \(errno)") }
    lockFD = open(root + "/item.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard lockFD >= 0 else { throw BenchmarkSetupError("open lock file: errno \(errno)") }
    target = directory + "/b.txt"
    tempPrefix = directory + "/.gc-tmp-\(getpid())-"
  }

  func tearDown() {
    if lockFD >= 0 { close(lockFD) }
    lockFD = -1
    removeTree(root)
    root = nil
  }

  @inline(__always)
  func lockPair() throws {
    guard flock(lockFD, LOCK_EX) == 0 else { throw BenchmarkSetupError("flock: errno \(errno)") }
    flock(lockFD, LOCK_UN)
  }

  func lockedReplace() throws {
    guard flock(lockFD, LOCK_EX) == 0 else { throw BenchmarkSetupError("flock: errno \(errno)") }
    defer { flock(lockFD, LOCK_UN) }
    counter += 1
    let temp = tempPrefix + String(counter) + "-b.txt"
    let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw BenchmarkSetupError("open \(temp): errno \(errno)") }
    fchmod(fd, 0o600)
    let written = payloadBytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    guard written == payloadBytes.count, rename(temp, target) == 0 else {
      throw BenchmarkSetupError("write/rename \(temp): errno \(errno)")
    }
  }
}

/// A container in its own temp root, one item URL in it, and one coordinator reused by every iteration.
final class ContainerFixture: @unchecked Sendable {  // used by the runner's setup/run/teardown, one at a time
  let identifier: String
  let item: String
  private(set) var root: String?
  private(set) var container: GroupContainer?
  private(set) var coordinator: FileCoordinator?
  private(set) var url: URL?

  init(identifier: String, item: String) {
    self.identifier = identifier
    self.item = item
  }

  func setUp() throws {
    let root = try makeTemporaryRoot()
    self.root = root
    let container = try GroupContainer(identifier: identifier, root: URL(fileURLWithPath: root, isDirectory: true))
    let url = try container.url(forRelativePath: item)
    try container.write(payload, to: url)
    self.container = container
    self.url = url
    coordinator = FileCoordinator()
  }

  func parts() throws -> (FileCoordinator, GroupContainer, URL) {
    guard let coordinator, let container, let url else { throw BenchmarkSetupError("fixture not set up") }
    return (coordinator, container, url)
  }

  func tearDown() {
    coordinator = nil
    container = nil
    url = nil
    removeTree(root)
    root = nil
  }
}

// MARK: - The other process

/// Every presenter child still running, so an exit of this process kills them (see `killLeftoverChildren`).
let livePresenterPIDs = Mutex<Set<Int32>>([])

/// `atexit` handler: a child must never outlive the benchmark.
func killLeftoverChildren() {
  for pid in livePresenterPIDs.withLock({ $0 }) { kill(pid, SIGKILL) }
}

/// `groupctl present <group> <item> --root <root>` as a child process.
///
/// It runs under a small `sh` guard that holds a pipe from us on its stdin: when that pipe closes — `stop()`, or
/// this process dying in any way, SIGKILL included — the guard sends the presenter SIGTERM and waits for it.
/// `stop()` also escalates to SIGKILL, and an `atexit` handler kills whatever is left.
final class ChildFixture: @unchecked Sendable {  // fields set by start/stop (runner: one at a time); `events` is a Mutex
  private var guardProcess: Process?
  private var guardInput: Pipe?
  private var presenterPID: Int32?
  private let ready = DispatchSemaphore(value: 0)
  private let readyPID = Mutex<Int32?>(nil)
  /// Callback lines the presenter printed, by event name.
  let events = Mutex<[String: Int]>([:])
  /// Coordinated writes measured (warm-up and measured iterations).
  let writes = Atomic<Int>(0)
  private static let registerExitHandler: Void = { atexit { killLeftoverChildren() } }()

  static func locateGroupctl() throws -> String {
    let fm = FileManager.default
    if let path = ProcessInfo.processInfo.environment["GROUPCTL"], !path.isEmpty {
      guard fm.isExecutableFile(atPath: path) else { throw BenchmarkSetupError("GROUPCTL=\(path) is not executable") }
      return path
    }
    var candidates: [String] = []
    if let exe = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
      candidates.append((exe as NSString).deletingLastPathComponent + "/groupctl")
    }
    // <root>/Benchmarks/CoordinationBenchmarks/CoordinationBenchmarks.swift
    let rootPackage = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
      .deletingLastPathComponent().path
    candidates += [rootPackage + "/.build/release/groupctl", rootPackage + "/.build/debug/groupctl"]
    guard let found = candidates.first(where: { fm.isExecutableFile(atPath: $0) }) else {
      throw BenchmarkSetupError(
        "groupctl not found (tried \(candidates.joined(separator: ", "))): set GROUPCTL or `swift build --product groupctl`")
    }
    return found
  }

  func start(group: String, item: String, root: String) throws {
    _ = Self.registerExitHandler
    let groupctl = try Self.locateGroupctl()
    FileHandle.standardError.write(Data("handshake: presenter is \(groupctl)\n".utf8))
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = [
      "-c",
      """
      "$@" </dev/null &
      child=$!
      read -r _ || true
      kill -TERM "$child" 2>/dev/null
      wait "$child"
      """,
      "gc-bench-guard", groupctl, "present", group, item, "--root", root,
    ]
    let input = Pipe()
    let output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    guardProcess = process
    guardInput = input
    readyPID.withLock { $0 = nil }
    events.withLock { $0 = [:] }
    writes.store(0, ordering: .relaxed)

    // Drain the child's stdout for as long as it runs (a full pipe would block its presenter callbacks).
    let handle = output.fileHandleForReading
    let fd = handle.fileDescriptor
    let thread = Thread { [self] in readLines(fd: fd, handle: handle) }
    thread.name = "gc-bench presenter stdout"
    thread.start()

    guard ready.wait(timeout: .now() + 20) == .success, let pid = readyPID.withLock({ $0 }) else {
      throw BenchmarkSetupError("`groupctl present` did not print its ready line within 20 s")
    }
    presenterPID = pid
    livePresenterPIDs.withLock { _ = $0.insert(pid) }
  }

  private func readLines(fd: Int32, handle: FileHandle) {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    var pending: [UInt8] = []
    while true {
      let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if n < 0 && errno == EINTR { continue }
      if n <= 0 { break }
      pending += buffer[0..<n]
      while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
        handleLine(Array(pending[..<newline]))
        pending.removeSubrange(...newline)
      }
    }
    _ = handle  // keep the handle (and its descriptor) alive while reading
  }

  private func handleLine(_ line: [UInt8]) {
    guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
      let event = object["event"] as? String
    else { return }
    events.withLock { $0[event, default: 0] += 1 }
    if event == "ready", let pid = object["pid"] as? Int {
      readyPID.withLock { $0 = Int32(pid) }
      ready.signal()
    }
  }

  func stop() {
    guard let process = guardProcess else { return }
    // Closing the guard's stdin makes it SIGTERM the presenter and wait for it.
    try? guardInput?.fileHandleForWriting.close()
    let deadline = Date().addingTimeInterval(5)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    if let pid = presenterPID, kill(pid, 0) == 0 {
      // Still there (the guard is gone or stuck): no more politeness.
      if !process.isRunning { usleep(50_000) }
      if kill(pid, 0) == 0 { kill(pid, SIGKILL) }
    }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    if let pid = presenterPID { livePresenterPIDs.withLock { _ = $0.remove(pid) } }
    let seen = events.withLock { $0 }
    let summary = seen.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    FileHandle.standardError.write(
      Data("handshake: \(writes.load(ordering: .relaxed)) coordinated writes; presenter printed \(summary)\n".utf8))
    guardProcess = nil
    guardInput = nil
    presenterPID = nil
  }
}

// MARK: - In-process presenter

/// Signals every `presentedItemDidChange`.
final class SignalingPresenter: FilePresenter, @unchecked Sendable {  // all `let`; OperationQueue is thread-safe
  let presentedItemURL: URL?
  let presentedItemOperationQueue: OperationQueue
  let changed = DispatchSemaphore(value: 0)
  let callbacks = Atomic<Int>(0)

  init(url: URL) {
    presentedItemURL = url
    presentedItemOperationQueue = OperationQueue()
    presentedItemOperationQueue.maxConcurrentOperationCount = 1
  }

  func presentedItemDidChange() {
    callbacks.add(1, ordering: .relaxed)
    changed.signal()
  }
}

/// A presenter of Documents/u.txt in this process; each iteration writes the file with plain syscalls and waits
/// for the callback (the presenter coalesces queued changes, so never write again before it arrived).
final class CallbackFixture: @unchecked Sendable {  // used by the runner's setup/run/teardown, one at a time
  private let containerFixture = ContainerFixture(identifier: "group.bench.callback", item: "Documents/u.txt")
  private var presenter: SignalingPresenter?
  private var path = ""
  private var writes = 0
  private var timeouts = 0
  private var early = 0

  func setUp() throws {
    try containerFixture.setUp()
    let (_, _, url) = try containerFixture.parts()
    path = url.path
    writes = 0
    timeouts = 0
    early = 0
    let presenter = SignalingPresenter(url: url)
    try FileCoordinator.addFilePresenter(presenter)
    self.presenter = presenter
    // Let anything caused by the setup itself arrive and drain it.
    usleep(100_000)
    while presenter.changed.wait(timeout: .now()) == .success {}
    presenter.callbacks.store(0, ordering: .relaxed)
  }

  func writeAndWait() throws {
    guard let presenter else { throw BenchmarkSetupError("fixture not set up") }
    // A callback nobody waited for would make this iteration look instant: count it (should stay 0).
    while presenter.changed.wait(timeout: .now()) == .success { early += 1 }
    let fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
    guard fd >= 0 else { throw BenchmarkSetupError("open \(path): errno \(errno)") }
    _ = payloadBytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    writes += 1
    if presenter.changed.wait(timeout: .now() + 2) == .timedOut { timeouts += 1 }
  }

  func tearDown() {
    if let presenter {
      usleep(50_000)  // late duplicates, if any, show up in the count below
      FileCoordinator.removeFilePresenter(presenter)
      FileHandle.standardError.write(
        Data(
          ("callback: \(writes) writes, \(presenter.callbacks.load(ordering: .relaxed)) callbacks, "
            + "\(timeouts) timed out (2 s), \(early) unexpected extra\n").utf8))
    }
    presenter = nil
    containerFixture.tearDown()
  }
}
