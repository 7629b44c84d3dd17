// What coordination costs, each figure measured in the same run as the raw-syscall baseline it is compared with.
//
//   Baseline: flock+write                     flock(LOCK_EX) → atomic replace of a 64-byte file → flock(LOCK_UN)
//   Coordinated write (no remote presenter)   FileCoordinator.coordinate(writingItemAt:) + GroupContainer.write
//   GroupContainer.write alone (uncoordinated) the same write without the coordinator (splits 1 → 2)
//   Baseline: flock pair                      flock(LOCK_EX) → flock(LOCK_UN)
//   Coordinated empty access                  coordinate(writingItemAt:) with an empty accessor
//   Coordinated empty access vs flock pair (paired)  both, batch after batch in each iteration (the ratio to use)
//   Coordinated empty access of a new item vs …     a new item each access (its lock file made, unused ones swept)
//                                             against making a new lock file and a flock pair on it (paired)
//   Handshake with one remote presenter       coordinated write while `groupctl present` presents the item, once
//                                             the presenter has its item back from the previous one
//   Handshake …, back to back                 the same, the next write starting at once (pays the last one's tail)
//   Baseline: O_TRUNC write (no presenter)    open(O_TRUNC)/write/close of an existing 64-byte file
//   Uncoordinated write → presenter callback  the same write → in-process presentedItemDidChange arrives
//
// Run from this directory: `swift package --allow-writing-to-package-directory benchmark` (or `make bench`).
//
// The handshake benchmark runs `groupctl` as the other process. It takes, in this order: `$GROUPCTL`; the
// `groupctl` built next to this benchmark executable (Package.swift lists it as a dependency, so the benchmark
// build builds it in the same configuration); `<root package>/.build/release/groupctl`; `.../debug/groupctl`.
//
// Every benchmark uses its own container root, /tmp/gc-bench-* (or under $GC_BENCH_TMPDIR), removed by its
// teardown. On ext4 a rename over an existing file or a truncating rewrite starts writeback at once
// (auto_da_alloc), which makes these small writes cost ~200 µs; `GC_BENCH_TMPDIR=/dev/shm` shows the
// framework's own cost without it.

import Benchmark
import BenchmarkSupport
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

  // Where the difference between 1 and 2 goes: the library's write without any coordination.
  let plain = ContainerFixture(identifier: "group.bench.plain", item: "Documents/p.txt")
  Benchmark("GroupContainer.write alone (uncoordinated)", configuration: fast) { benchmark in
    let (_, container, url) = try plain.parts()
    for _ in benchmark.scaledIterations {
      try container.write(payload, to: url)
    }
  } setup: {
    try plain.setUp()
  } teardown: {
    plain.tearDown()
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

  // The two above, paired: each iteration times a batch of 200 flock pairs and a batch of 200 empty accesses, one
  // right after the other, in alternating order. This machine's syscall speed swings by 1.5× within minutes, so the
  // two separate benchmarks' ratio depends on when each ran; paired, the swing cancels out of it. Custom metrics
  // in ns per operation: "flock pair (ns)", "empty access (ns)". `scripts/floor-ratio.sh empty` compares builds on it.
  let flockMetric = BenchmarkMetric.custom("flock pair (ns)", useScalingFactor: false)
  let emptyMetric = BenchmarkMetric.custom("empty access (ns)", useScalingFactor: false)
  var pairedFast = slow
  pairedFast.metrics = [flockMetric, emptyMetric]
  pairedFast.maxIterations = 2_000
  let pairedEmpty = ContainerFixture(identifier: "group.bench.empty2", item: "Documents/e.txt")
  let pairedLock = RawFixture()
  // Outside the closure, which runs once per iteration (a variable inside it gave the same order every time).
  let emptyRounds = Atomic<Int>(0)
  Benchmark("Coordinated empty access vs flock pair (paired)", configuration: pairedFast) { benchmark in
    let (coordinator, _, url) = try pairedEmpty.parts()
    let batch = 200
    for _ in benchmark.scaledIterations {
      let emptyFirst = emptyRounds.wrappingAdd(1, ordering: .relaxed).oldValue % 2 == 0
      var times = [0, 0]
      for step in emptyFirst ? [1, 0] : [0, 1] {
        let start = monotonicNanoseconds()
        if step == 0 {
          for _ in 0..<batch { try pairedLock.lockPair() }
        } else {
          for _ in 0..<batch { try coordinator.coordinate(writingItemAt: url) { _ in } }
        }
        times[step] = elapsed(start, monotonicNanoseconds()) / batch
      }
      benchmark.measurement(flockMetric, times[0])
      benchmark.measurement(emptyMetric, times[1])
    }
  } setup: {
    try pairedEmpty.setUp()
    try pairedLock.setUp()
  } teardown: {
    pairedEmpty.tearDown()
    pairedLock.tearDown()
  }

  // A new item each time: the access makes the item's lock file (and, every 256 made, a sweep in the background
  // removes the unused ones: LockFileSweep.swift). Its floor makes a new lock file per lock pair (and removes a
  // batch's files after it, untimed). Paired as above; custom metrics in ns per operation: "new lock file + flock
  // pair (ns)", "new item's empty access (ns)". What the sweeps cost is this row's figure against a build without
  // them.
  let newFloorMetric = BenchmarkMetric.custom("new lock file + flock pair (ns)", useScalingFactor: false)
  let newItemMetric = BenchmarkMetric.custom("new item's empty access (ns)", useScalingFactor: false)
  var pairedNew = pairedFast
  pairedNew.metrics = [newFloorMetric, newItemMetric]
  pairedNew.maxIterations = 500
  let newItems = ContainerFixture(identifier: "group.bench.new", item: "Documents/e.txt")
  let newLocks = RawFixture()
  // Outside the closure, which runs once per iteration: each batch's names are new.
  let newBatches = Atomic<Int>(0)
  Benchmark("Coordinated empty access of a new item vs a new lock file's flock pair (paired)", configuration: pairedNew)
  { benchmark in
    let (coordinator, container, _) = try newItems.parts()
    let documents = container.documentsURL
    let batch = 200
    for _ in benchmark.scaledIterations {
      let round = newBatches.wrappingAdd(1, ordering: .relaxed).oldValue
      let floorFirst = round % 2 == 0
      let made = round * batch
      // The names, made before the clock starts: the row times the access, not the URL.
      let urls = (0..<batch).map { documents.appending(path: "n\(made + $0)", directoryHint: .notDirectory) }
      var times = [0, 0]
      for step in floorFirst ? [0, 1] : [1, 0] {
        let start = monotonicNanoseconds()
        if step == 0 {
          for index in 0..<batch { try newLocks.newLockPair(made + index) }
        } else {
          for url in urls { try coordinator.coordinate(writingItemAt: url) { _ in } }
        }
        times[step] = elapsed(start, monotonicNanoseconds()) / batch
      }
      // Untimed: the floor's directory stays as small as the sweeps keep the framework's.
      for index in 0..<batch { newLocks.removeNewLock(made + index) }
      benchmark.measurement(newFloorMetric, times[0])
      benchmark.measurement(newItemMetric, times[1])
    }
  } setup: {
    try newItems.setUp()
    try newLocks.setUp()
  } teardown: {
    newItems.tearDown()
    newLocks.tearDown()
  }

  // MARK: 4. Full prepare/ack/finish handshake with a presenter in another process

  // Where the time goes, measured from outside the library: before the accessor runs (prepare → the other
  // process relinquishes → ack → locks), the accessor (the write), after it (unlock, finish message).
  let beforeAccessor = BenchmarkMetric.custom("before accessor (ns)", useScalingFactor: false)
  let inAccessor = BenchmarkMetric.custom("accessor (ns)", useScalingFactor: false)
  let afterAccessor = BenchmarkMetric.custom("after accessor (ns)", useScalingFactor: false)
  var phases = slow
  phases.metrics += [beforeAccessor, inAccessor, afterAccessor]

  // Two runs: one handshake at a time (the next write starts once the presenter has its item back — what an app
  // and its widget do), and back to back (the next write starts while the presenter still handles the last one's
  // didChange and reacquire: a throughput figure, each write paying for the tail of the one before).
  for settled in [true, false] {
    let handshake = ContainerFixture(identifier: "group.bench.handshake", item: "Documents/h.txt")
    let child = ChildFixture()
    let name = settled ? "Handshake with one remote presenter" : "Handshake with one remote presenter, back to back"
    Benchmark(name, configuration: phases) { benchmark in
      let (coordinator, container, url) = try handshake.parts()
      for _ in benchmark.scaledIterations {
        let reacquired = child.count("reacquire")
        var entered: UInt64 = 0
        var left: UInt64 = 0
        benchmark.startMeasurement()
        let start = monotonicNanoseconds()
        try coordinator.coordinate(writingItemAt: url) {
          entered = monotonicNanoseconds()
          try container.write(payload, to: $0)
          left = monotonicNanoseconds()
        }
        let end = monotonicNanoseconds()
        benchmark.stopMeasurement()
        benchmark.measurement(beforeAccessor, elapsed(start, entered))
        benchmark.measurement(inAccessor, elapsed(entered, left))
        benchmark.measurement(afterAccessor, elapsed(left, end))
        if settled { try child.wait(for: "reacquire", count: reacquired + 1) }
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
  }

  // MARK: 5. An uncoordinated write seen through inotify

  // What the write itself costs, so the callback latency below can be split into write + delivery.
  let truncate = RawFixture()
  Benchmark("Baseline: O_TRUNC write (no presenter)", configuration: slow) { benchmark in
    for _ in benchmark.scaledIterations {
      try truncate.truncatingWrite()
    }
  } setup: {
    try truncate.setUp()
  } teardown: {
    truncate.tearDown()
  }

  // The same split: the write syscalls, write done → callback entered (inotify, watcher thread, operation
  // queue; 0 when the callback starts before close() returns, as it can on ext4, whose close starts writeback
  // after the CLOSE_WRITE event), callback → this thread running again.
  let writeTime = BenchmarkMetric.custom("write (ns)", useScalingFactor: false)
  let delivery = BenchmarkMetric.custom("delivery (ns)", useScalingFactor: false)
  let wakeUp = BenchmarkMetric.custom("wake-up (ns)", useScalingFactor: false)
  var callbackPhases = slow
  callbackPhases.metrics += [writeTime, delivery, wakeUp]

  let callback = CallbackFixture()
  Benchmark("Uncoordinated write → presenter callback latency", configuration: callbackPhases) { benchmark in
    for _ in benchmark.scaledIterations {
      let times = try callback.writeAndWait()
      benchmark.measurement(writeTime, elapsed(times.start, times.written))
      benchmark.measurement(delivery, elapsed(times.written, times.callback))
      benchmark.measurement(wakeUp, elapsed(times.callback, times.end))
    }
  } setup: {
    try callback.setUp()
  } teardown: {
    callback.tearDown()
  }

  scaleBenchmarks(fast: fast, slow: slow)
}

// MARK: - Fixtures

/// What every write stores: 64 bytes.
let payload = Data((0..<64).map { UInt8(truncatingIfNeeded: $0 &+ 0x20) })
let payloadBytes = [UInt8](payload)

func monotonicNanoseconds() -> UInt64 {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// `to - from` in ns, 0 if `to` is earlier (a callback can start before the writer reads the clock again).
func elapsed(_ from: UInt64, _ to: UInt64) -> Int {
  to > from ? Int(to - from) : 0
}

/// The baselines: the same syscalls the coordinated write makes for its item lock and its atomic replace
/// (temp file with O_EXCL → write → fchmod → close → rename; no fsync), with none of the framework around them.
/// The benchmark runner calls setUp, the iterations and tearDown one after another, never at once.
final class RawFixture: @unchecked Sendable {
  private let base: String?
  private var root: String?
  private var lockFD: Int32 = -1
  private var target = ""
  private var tempPrefix = ""
  private var counter = 0

  /// `base`: where the temp root goes (default: `temporaryBase`).
  init(base: String? = nil) { self.base = base }

  func setUp() throws {
    do { try makeFiles() } catch {
      tearDown()
      throw error
    }
  }

  private func makeFiles() throws {
    let root = try makeTemporaryRoot(base: base)
    self.root = root
    let directory = root + "/Documents"
    guard mkdir(directory, 0o700) == 0 else { throw BenchmarkSetupError("mkdir \(directory): errno \(errno)") }
    lockFD = open(root + "/item.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard lockFD >= 0 else { throw BenchmarkSetupError("open lock file: errno \(errno)") }
    target = directory + "/b.txt"
    tempPrefix = directory + "/.gc-tmp-\(getpid())-"
    try truncatingWrite()
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

  /// A new lock file (numbered `index`), made as the framework makes one (O_EXCL, fchmod, its line written), locked
  /// and unlocked, closed; never removed.
  func newLockPair(_ index: Int) throws {
    let fd = open(root! + "/lock-\(index)", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw BenchmarkSetupError("open lock-\(index): errno \(errno)") }
    defer { close(fd) }
    fchmod(fd, 0o600)
    let written = payloadBytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, 24) }
    guard written == 24, flock(fd, LOCK_EX) == 0 else { throw BenchmarkSetupError("lock-\(index): errno \(errno)") }
    flock(fd, LOCK_UN)
  }

  func removeNewLock(_ index: Int) { unlink(root! + "/lock-\(index)") }

  /// What an outside tool's `echo > file` does (the file exists: created by setUp's first call).
  func truncatingWrite() throws {
    let fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw BenchmarkSetupError("open \(target): errno \(errno)") }
    let written = payloadBytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    guard written == payloadBytes.count else { throw BenchmarkSetupError("write \(target): errno \(errno)") }
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

  private let base: String?

  init(identifier: String, item: String, base: String? = nil) {
    self.identifier = identifier
    self.item = item
    self.base = base
  }

  func setUp() throws {
    do { try open() } catch {
      tearDown()
      throw error
    }
  }

  private func open() throws {
    let root = try makeTemporaryRoot(base: base)
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

/// The process groups of presenter children still running, so an exit of this process kills them.
let liveChildGroups = Mutex<Set<pid_t>>([])

/// `atexit` handler: a child must never outlive the benchmark.
func killLeftoverChildren() {
  for group in liveChildGroups.withLock({ $0 }) { kill(-group, SIGKILL) }
}

/// `groupctl present <group> <item> --root <root>` as a child process.
///
/// It runs under a small `sh` guard, in a process group of its own, with a pipe from us on the guard's stdin:
/// when that pipe closes — `stop()`, or this process dying in any way, SIGKILL included — the guard sends the
/// presenter SIGTERM and waits for it. `stop()` escalates to SIGKILL of the whole group after 2 s, and an
/// `atexit` handler kills any group left. (Seen here: `groupctl present` does not exit on SIGTERM or SIGINT,
/// whatever signal mask it starts with, so in practice the SIGKILL is what ends it.)
///
/// Spawned with `posix_spawn` and an empty signal mask: Foundation's `Process`, called from a Dispatch worker
/// thread, passes on that thread's blocked-signal mask (SIGTERM blocked), and its `waitUntilExit()` was seen
/// hanging on a SIGKILLed child.
final class ChildFixture: @unchecked Sendable {  // vars: start/stop only (the runner calls them in turn)
  private var guardPID: pid_t?
  private var guardInput: Int32 = -1
  private var presenterPID: Int32?
  private var quiet = false
  private let ready = DispatchSemaphore(value: 0)
  private let readyPID = Mutex<Int32?>(nil)
  /// Callback lines the presenter printed, by event name.
  let events = Mutex<[String: Int]>([:])
  /// Coordinated writes done (warm-up and measured iterations).
  let writes = Atomic<Int>(0)

  func count(_ event: String) -> Int { events.withLock { $0[event] ?? 0 } }

  /// Polls (outside the measured time) until the presenter printed `event` `count` times.
  func wait(for event: String, count: Int) throws {
    let deadline = monotonicNanoseconds() + 2_000_000_000
    while self.count(event) < count {
      guard monotonicNanoseconds() < deadline else {
        throw BenchmarkSetupError("the presenter did not print \(event) #\(count) within 2 s")
      }
      usleep(50)
    }
  }
  private static let registerExitHandler: Void = { atexit { killLeftoverChildren() } }()

  /// Starts `groupctl present <group> <item>`, or `groupctl <command…> --root <root>` (a command that prints
  /// {"event":"ready","pid":…} once set up); with `executable`, that program instead of `groupctl`.
  func start(
    group: String, item: String, root: String, command: [String]? = nil, quiet: Bool = false,
    executable: String? = nil
  ) throws {
    _ = Self.registerExitHandler
    let groupctl = try executable ?? locateGroupctl()
    self.quiet = quiet
    if !quiet { FileHandle.standardError.write(Data("handshake: presenter is \(groupctl)\n".utf8)) }
    let script = """
      "$@" </dev/null &
      child=$!
      read -r _ || true
      kill -TERM "$child" 2>/dev/null
      wait "$child"
      """
    var input: [Int32] = [-1, -1]
    var output: [Int32] = [-1, -1]
    guard pipe(&input) == 0 else { throw BenchmarkSetupError("pipe: errno \(errno)") }
    guard pipe(&output) == 0 else {
      close(input[0])
      close(input[1])
      throw BenchmarkSetupError("pipe: errno \(errno)")
    }
    // Only the ends dup2'ed onto the child's stdin/stdout may reach it (pipe2 is not imported into Swift).
    for fd in input + output { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    let pid: pid_t
    do {
      pid = try Self.spawn(
        ["/bin/sh", "-c", script, "gc-bench-guard", groupctl] + (command ?? ["present", group, item])
          + ["--root", root],
        stdin: input[0], stdout: output[1])
    } catch {
      for fd in input + output { close(fd) }
      throw error
    }
    close(input[0])
    close(output[1])
    guardPID = pid
    guardInput = input[1]
    liveChildGroups.withLock { _ = $0.insert(pid) }  // the guard leads its own process group
    readyPID.withLock { $0 = nil }
    events.withLock { $0 = [:] }
    writes.store(0, ordering: .relaxed)

    // Drain the child's stdout for as long as it runs (a full pipe would block its presenter callbacks).
    let fd = output[0]
    let thread = Thread { [self] in
      readLines(fd: fd)
      close(fd)
    }
    thread.name = "gc-bench presenter stdout"
    thread.start()

    guard ready.wait(timeout: .now() + 60) == .success, let presenter = readyPID.withLock({ $0 }) else {
      throw BenchmarkSetupError("`\(groupctl) \(command?.first ?? "present")` did not print its ready line within 60 s")
    }
    presenterPID = presenter
  }

  /// posix_spawn with `stdin`/`stdout` in place, an empty signal mask, default signal actions and a new process
  /// group led by the child.
  private static func spawn(_ arguments: [String], stdin: Int32, stdout: Int32) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    var attributes = posix_spawnattr_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawnattr_init(&attributes)
    defer {
      posix_spawn_file_actions_destroy(&actions)
      posix_spawnattr_destroy(&attributes)
    }
    posix_spawn_file_actions_adddup2(&actions, stdin, 0)
    posix_spawn_file_actions_adddup2(&actions, stdout, 1)
    // Nothing else of ours (the benchmark runner's pipes among them) leaks into the child
    // (posix_spawn_file_actions_addclosefrom_np is not imported into Swift).
    for fd in inheritableDescriptors() where fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signo in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signo) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setpgroup(&attributes, 0)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    // The benchmark runs with package-benchmark's malloc interposer preloaded; the presenter must not.
    let environment = ProcessInfo.processInfo.environment.filter { $0.key != "LD_PRELOAD" }
    let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for arg in argv + envp { free(arg) } }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
    guard rc == 0 else { throw BenchmarkSetupError("posix_spawn \(arguments[0]): errno \(rc)") }
    return pid
  }

  /// This process's descriptors without FD_CLOEXEC.
  private static func inheritableDescriptors() -> [Int32] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.compactMap(Int32.init).filter { fd in
      let flags = fcntl(fd, F_GETFD)
      return flags >= 0 && flags & FD_CLOEXEC == 0
    }
  }

  private func readLines(fd: Int32) {
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
  }

  /// Counts the line's event. Lines are parsed as JSON only until "ready": this thread shares the 2 cores with
  /// the measurement, so afterwards it just picks the event name out of the bytes.
  private func handleLine(_ line: [UInt8]) {
    if readyPID.withLock({ $0 }) != nil {
      let key = Array(#""event":""#.utf8)
      guard let at = line.indices.first(where: { line[$0...].starts(with: key) }) else { return }
      let name = line[(at + key.count)...].prefix { $0 != UInt8(ascii: "\"") }
      events.withLock { $0[String(decoding: name, as: UTF8.self), default: 0] += 1 }
      return
    }
    guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
      let event = object["event"] as? String
    else { return }
    events.withLock { $0[event, default: 0] += 1 }
    if event == "ready", let pid = object["pid"] as? Int {
      readyPID.withLock { $0 = Int32(pid) }
      ready.signal()
    }
  }

  /// Whether `pid` (our child) has exited; reaps it if so.
  private static func reaped(_ pid: pid_t) -> Bool {
    var status: Int32 = 0
    let rc = waitpid(pid, &status, WNOHANG)
    return rc == pid || (rc < 0 && errno == ECHILD)
  }

  func stop() {
    guard let pid = guardPID else { return }
    // Closing the guard's stdin makes it SIGTERM the presenter and wait for it.
    if guardInput >= 0 { close(guardInput) }
    guardInput = -1
    let deadline = Date().addingTimeInterval(2)
    var exited = Self.reaped(pid)
    while !exited && Date() < deadline {
      usleep(5_000)
      exited = Self.reaped(pid)
    }
    // Whatever is left of the group — a stuck presenter, or the guard itself — goes now.
    kill(-pid, SIGKILL)
    if !exited {
      var status: Int32 = 0
      while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
    liveChildGroups.withLock { _ = $0.remove(pid) }
    let seen = events.withLock { $0 }
    guard !quiet else {
      guardPID = nil
      presenterPID = nil
      return
    }
    let summary = seen.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    FileHandle.standardError.write(
      Data(
        ("handshake: \(writes.load(ordering: .relaxed)) coordinated writes; presenter printed \(summary); "
          + "\(exited ? "exited on SIGTERM" : "killed after 2 s")\n").utf8))
    guardPID = nil
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
  /// When the last callback started (monotonic ns).
  let lastCallback = Atomic<UInt64>(0)

  init(url: URL) {
    presentedItemURL = url
    presentedItemOperationQueue = OperationQueue()
    presentedItemOperationQueue.maxConcurrentOperationCount = 1
  }

  func presentedItemDidChange() {
    lastCallback.store(monotonicNanoseconds(), ordering: .relaxed)
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
    do { try register() } catch {
      tearDown()
      throw error
    }
  }

  private func register() throws {
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

  /// Monotonic timestamps of one iteration (ns).
  struct Times {
    var start: UInt64
    var written: UInt64
    var callback: UInt64
    var end: UInt64
  }

  func writeAndWait() throws -> Times {
    guard let presenter else { throw BenchmarkSetupError("fixture not set up") }
    // A callback nobody waited for (a duplicate, or one that came after a timeout) would make this iteration
    // look instant: consume its signal and count it (should stay 0). Only then poll the semaphore: a wait with a
    // deadline of `.now()` is not free, it sleeps for the timer slack (~50-100 µs here).
    let surplus = presenter.callbacks.load(ordering: .relaxed) - (writes - timeouts) - early
    if surplus > 0 {
      early += surplus
      for _ in 0..<surplus { _ = presenter.changed.wait(timeout: .now() + 0.1) }
    }
    let start = monotonicNanoseconds()
    let fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
    guard fd >= 0 else { throw BenchmarkSetupError("open \(path): errno \(errno)") }
    _ = payloadBytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    close(fd)
    let written = monotonicNanoseconds()
    writes += 1
    if presenter.changed.wait(timeout: .now() + 2) == .timedOut { timeouts += 1 }
    let end = monotonicNanoseconds()
    return Times(start: start, written: written, callback: presenter.lastCallback.load(ordering: .relaxed), end: end)
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
