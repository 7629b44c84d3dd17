// A Live Activity's update as a widget in another process sees it, against shared defaults' cross-process observer
// in the same run ("SharedDefaults set → observer in another process", DefaultsBenchmarks.swift), and what the
// update costs its writer, against a defaults set ("SharedDefaults set") and the floor of any record replace:
//
//   Live Activity update → observer in another process   `update(_:)` of the content state (one commit of the
//                                             records' suite, `<group-id>.liveactivities`); `groupctl activities
//                                             watch` in a child hears it through the suite's change stream, checks
//                                             the record and prints it; measured until its JSON line reaches us
//                                             through a pipe (from inside the iteration's task: not the wake-up of
//                                             the task itself, which the synchronous defaults row does not pay)
//   Live Activity update (the writer alone)   `update(_:)` with nobody watching: encoding, the suite's
//                                             read-modify-write (reading the record, the commit); 1,000 per
//                                             iteration, reported per update
//   Baseline: staged replace of a 400-byte record   raw system calls, no framework: a temp file created O_EXCL in a
//                                             staging directory, written, closed, renamed over the record in the
//                                             activities directory — the least a replace of a record file cost
//                                             (records were files until issue #37 item 3: kept for comparison)
//
// Run them with their baselines: `swift package --allow-writing-to-package-directory benchmark --target
//   DefaultsBenchmarks --filter 'Live Activity.*|SharedDefaults set( → observer in another process)?|Baseline: staged.*'`.
import Benchmark
import BenchmarkSupport
import Foundation
import Glibc
import GroupContainer

/// A minimal activity: one number in its content state.
struct CounterAttributes: ActivityAttributes {
  struct ContentState: Codable, Hashable, Sendable {
    var n: Int
  }
}

/// The container, the activity and the watching child of the benchmark.
final class ActivityFixture: @unchecked Sendable {  // set up and torn down by the runner, one call at a time
  var root: String?
  var activity: Activity<CounterAttributes>?
  let watcher = WatchChild(valueMarker: #""n":"#, readyMarker: #""attributes_type""#)
  let next = Counter()
}

func activityBenchmarks(_ configuration: Benchmark.Configuration) {
  let fixture = ActivityFixture()
  Benchmark("Live Activity update → observer in another process", configuration: configuration) { benchmark in
    let activity = fixture.activity!
    // Measured from the update to the line, inside the task: package-benchmark runs each iteration of an async
    // benchmark as a task it waits for on a semaphore, a thread wake-up the defaults row (synchronous) does not pay.
    benchmark.startMeasurement()
    for _ in benchmark.scaledIterations {
      let i = fixture.next.advance()
      try await activity.update(ActivityContent(state: .init(n: i), staleDate: nil))
      fixture.watcher.wait(for: i)
    }
    benchmark.stopMeasurement()
  } setup: {
    let root = try makeTemporaryRoot()
    fixture.root = root
    let container = try GroupContainer(identifier: "group.bench.activities", root: URL(fileURLWithPath: root))
    fixture.activity = try Activity.request(
      attributes: CounterAttributes(), content: ActivityContent(state: .init(n: 0), staleDate: nil), in: container)
    // `watch` prints every activity first: that line says it is ready.
    try fixture.watcher.start(arguments: ["activities", "watch", container.identifier, "--root", root])
  } teardown: {
    fixture.watcher.stop()
    fixture.activity = nil
    if let root = fixture.root { removeTree(root) }
  }

  let alone = ActivityFixture()
  // 1,000 updates per iteration, reported per update: `update` is async, and package-benchmark runs each iteration
  // of an async benchmark as a task it waits for on a semaphore — a thread wake-up per iteration that a defaults set
  // (a synchronous benchmark) does not pay, and that was most of this row when each iteration was one update.
  var perUpdate = configuration
  perUpdate.scalingFactor = .kilo
  perUpdate.timeUnits = .nanoseconds
  perUpdate.maxIterations = 2_000
  perUpdate.metrics += [.mallocCountTotal]
  Benchmark("Live Activity update (the writer alone)", configuration: perUpdate) { benchmark in
    let activity = alone.activity!
    for _ in benchmark.scaledIterations {
      try await activity.update(ActivityContent(state: .init(n: alone.next.advance()), staleDate: nil))
    }
  } setup: {
    let root = try makeTemporaryRoot()
    alone.root = root
    let container = try GroupContainer(identifier: "group.bench.activities", root: URL(fileURLWithPath: root))
    alone.activity = try Activity.request(
      attributes: CounterAttributes(), content: ActivityContent(state: .init(n: 0), staleDate: nil), in: container)
  } teardown: {
    alone.activity = nil
    if let root = alone.root { removeTree(root) }
  }

  let floor = RawReplace()
  Benchmark("Baseline: staged replace of a 400-byte record", configuration: configuration) { benchmark in
    for _ in benchmark.scaledIterations { floor.replace() }
  } setup: {
    try floor.setUp()
  } teardown: {
    floor.tearDown()
  }
}

/// The floor of a record replace, in raw system calls: what the framework's replace does (AtomicReplace.swift) with
/// nothing around it — no lock, no read, no encoding, no checks.
final class RawReplace: @unchecked Sendable {  // set up and torn down by the runner, one call at a time
  private var root: String?
  private var staging: Int32 = -1
  private var directory: Int32 = -1
  private let record = [UInt8](repeating: UInt8(ascii: "x"), count: 400)

  func setUp() throws {
    let root = try makeTemporaryRoot()
    self.root = root
    for name in ["staging", "activities"] { mkdir(root + "/" + name, 0o700) }
    staging = open(root + "/staging", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    directory = open(root + "/activities", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard staging >= 0, directory >= 0 else { throw BenchmarkSetupError("open: errno \(errno)") }
  }

  func replace() {
    let fd = openat(staging, ".tmp", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    record.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
    close(fd)
    renameat(staging, ".tmp", directory, "record.activity")
  }

  func tearDown() {
    close(staging)
    close(directory)
    removeTree(root)
  }
}
