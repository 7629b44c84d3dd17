// How coordination scales (issue #8, "Scale"), each figure against its baseline in the same run:
//
//   Scale: write, no presenter                        a coordinated write; nobody presents anything
//   Scale: write with 5,000 files presented elsewhere the same write while another process presents 5,000 other
//                                                     files (`groupctl stress present-many`): should cost the same
//   Scale: write, no presenter vs 5,000 … (paired)    both in each iteration, as custom metrics (load drift cancels)
//   Scale: first write of a new process, none vs 5,000 presented elsewhere (paired)
//                                                     each iteration runs `groupctl write --print-duration` in a
//                                                     container nobody presents in and in one where another process
//                                                     presents 5,000 files: the first coordinated write of a new
//                                                     process, as it reports it (issue #33 item 5: ≤ 1.5×)
//   Scale: write presented by N processes (N=1/4/16/64) the same write while N `groupctl present --only reacquire`
//                                                     processes present the item; measured once all have it back
//   Scale: write presented by 64 processes (tmpfs)    the same in /dev/shm: what ext4 inode allocation costs
//   Scale: 64 presenter processes vs the floor (paired) (and tmpfs)
//                                                     the 64-process write and its floor without the framework
//                                                     (`gc-bench-answerer`), both in each iteration
//   Scale: 64 presenter processes, a new process's write (paired)
//                                                     what the issue measured (#37 item 5): each write a new
//                                                     `groupctl write` process's, beside the same of an unpresented
//                                                     item and a warm writer's (this process) of the presented one
//
// The presenter rows with the message files of before: run the binary with GROUP_CONTAINER_INBOX_FILES_ONLY=1 (the
// presenters bind no inbox socket, so every prepare and finish goes as a file: MessageTransport.swift) — a test hook,
// read only by a build with the root package's `TestHooks` trait (`swift package --traits TestHooks …`).
//   Scale: raw replace on tmpfs                        the flock + atomic-replace baseline, in /dev/shm
//   Scale: write on tmpfs                              the coordinated write, in /dev/shm
//
// (`Coordinated empty access` vs `Baseline: flock pair` are in CoordinationBenchmarks.swift.)
// Filter: `swift package --allow-writing-to-package-directory benchmark --filter 'Scale: .*'`.
//
// Setting up an access, measured (p50, release, 2 shared cores; the binaries built from the code before and after
// the access-setup fast paths — ContainerPath.lexical, ContainerDirectory.hasNoSymbolicLink /
// replaceFileIfNoSymbolicLink, the in-place lock table — run back to back, alternately, twice):
//
//   Coordinated empty access     20.5–22.4 µs → 10.9–11.1 µs   (flock pair 1.25–1.3 µs; mallocs 44–47 → 14)
//   Scale: write on tmpfs        76.8–83.7 µs → 51.5–52.3 µs   (raw replace on tmpfs 21–26 µs: 3.6× → 2.4×)
//   GroupContainer.write alone   45–48 µs → 34–45 µs on tmpfs  (mallocs 46 → 19)
//
// What is left of the empty access (2026-11-27, `Coordinated empty access vs flock pair (paired)`: 5.4–5.8 µs at a
// 1.14–1.19 µs flock pair, 4.7–4.95×): its system calls alone are the flock pair and the one openat2 that proves no
// link is on the way (it opens nothing: O_WRONLY | O_DIRECTORY fails once the path resolved) — in C on the same
// machine 1.0 + 1.9 µs, 2.9× a flock pair (a null system call costs 0.22 µs here, an fstat 0.5 µs, a path fstatat
// 1.24 µs). The rest, ~45 %, is Swift spread thin: the lock table (half of it the entries' dictionary lookups), the
// access's set-up and teardown, retain/release. A debug run of one binary:
// `.build/release/CoordinationBenchmarks --filter '^Coordinated empty access$'` prints the percentiles.
import Benchmark
import BenchmarkSupport
import Foundation
import GroupContainer
import Synchronization

func scaleBenchmarks(fast: Benchmark.Configuration, slow: Benchmark.Configuration) {
  // MARK: Unrelated presenters

  let alone = ContainerFixture(identifier: "group.bench.alone", item: "Documents/w.txt")
  Benchmark("Scale: write, no presenter", configuration: slow) { benchmark in
    let (coordinator, container, url) = try alone.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
    }
  } setup: {
    try alone.setUp()
  } teardown: {
    alone.tearDown()
  }

  let crowded = ContainerFixture(identifier: "group.bench.crowded", item: "Documents/w.txt")
  let crowd = ChildFixture()
  Benchmark("Scale: write with 5,000 files presented elsewhere", configuration: slow) { benchmark in
    let (coordinator, container, url) = try crowded.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
    }
  } setup: {
    try crowded.setUp()
    do {
      try crowd.start(
        group: crowded.identifier, item: "", root: crowded.root!,
        command: ["stress", "present-many", crowded.identifier, "--count", "5000"], quiet: true)
    } catch {
      crowd.stop()
      crowded.tearDown()
      throw error
    }
  } teardown: {
    crowd.stop()
    crowded.tearDown()
  }

  // The same comparison paired, robust to the load of a shared machine drifting between two benchmarks: each
  // iteration writes once in a container nobody presents in and once in the crowded one (wall clock: both).
  let quiet = ContainerFixture(identifier: "group.bench.quiet", item: "Documents/w.txt")
  let pairedCrowded = ContainerFixture(identifier: "group.bench.paired", item: "Documents/w.txt")
  let pairedCrowd = ChildFixture()
  let withoutOthers = BenchmarkMetric.custom("no presenter (ns)", useScalingFactor: false)
  let withOthers = BenchmarkMetric.custom("5,000 presented elsewhere (ns)", useScalingFactor: false)
  var paired = slow
  paired.metrics += [withoutOthers, withOthers]
  Benchmark("Scale: write, no presenter vs 5,000 files presented elsewhere (paired)", configuration: paired) {
    benchmark in
    let (coordinator, container, url) = try quiet.parts()
    let (crowdedCoordinator, crowdedContainer, crowdedURL) = try pairedCrowded.parts()
    for _ in benchmark.scaledIterations {
      let start = monotonicNanoseconds()
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
      let middle = monotonicNanoseconds()
      try crowdedCoordinator.coordinate(writingItemAt: crowdedURL) { try crowdedContainer.write(payload, to: $0) }
      let end = monotonicNanoseconds()
      benchmark.measurement(withoutOthers, elapsed(start, middle))
      benchmark.measurement(withOthers, elapsed(middle, end))
    }
  } setup: {
    try quiet.setUp()
    try pairedCrowded.setUp()
    do {
      try pairedCrowd.start(
        group: pairedCrowded.identifier, item: "", root: pairedCrowded.root!,
        command: ["stress", "present-many", pairedCrowded.identifier, "--count", "5000"], quiet: true)
    } catch {
      pairedCrowd.stop()
      pairedCrowded.tearDown()
      quiet.tearDown()
      throw error
    }
  } teardown: {
    pairedCrowd.stop()
    pairedCrowded.tearDown()
    quiet.tearDown()
  }

  // A new process's first coordinated write: it has no listing of the registry cached, so what it reads is what
  // its path costs — the buckets of the item and its ancestors (PresenterRegistry), not every record.
  let firstQuiet = ContainerFixture(identifier: "group.bench.firstquiet", item: "Documents/w.txt")
  let firstCrowded = ContainerFixture(identifier: "group.bench.firstcrowded", item: "Documents/w.txt")
  let firstCrowd = ChildFixture()
  let firstWithout = BenchmarkMetric.custom("first write, no presenter (ns)", useScalingFactor: false)
  let firstWith = BenchmarkMetric.custom("first write, 5,000 presented elsewhere (ns)", useScalingFactor: false)
  var firstPaired = slow
  firstPaired.metrics = [firstWithout, firstWith]
  firstPaired.maxIterations = 60
  func firstWrite(_ fixture: ContainerFixture) throws -> Int { try newProcessWrite(fixture, item: "Documents/w.txt") }
  Benchmark(
    "Scale: first write of a new process, none vs 5,000 presented elsewhere (paired)", configuration: firstPaired
  ) {
    benchmark in
    for _ in benchmark.scaledIterations {
      benchmark.measurement(firstWithout, try firstWrite(firstQuiet))
      benchmark.measurement(firstWith, try firstWrite(firstCrowded))
    }
  } setup: {
    try firstQuiet.setUp()
    try firstCrowded.setUp()
    do {
      try firstCrowd.start(
        group: firstCrowded.identifier, item: "", root: firstCrowded.root!,
        command: ["stress", "present-many", firstCrowded.identifier, "--count", "5000"], quiet: true)
    } catch {
      firstCrowd.stop()
      firstCrowded.tearDown()
      firstQuiet.tearDown()
      throw error
    }
  } teardown: {
    firstCrowd.stop()
    firstCrowded.tearDown()
    firstQuiet.tearDown()
  }

  // MARK: Presenter processes of the written item

  // The tmpfs variant shows what the message files cost on ext4: creating one allocates an inode, and with the
  // churn of a handshake ext4's inode allocator scans past every recently deleted one (find_inode_bit →
  // recently_deleted dominated `perf record -a` of the 64-process run).
  for (n, base) in [(1, nil), (4, nil), (16, nil), (64, nil), (64, "/dev/shm")] as [(Int, String?)] {
    let presented = ContainerFixture(identifier: "group.bench.presented\(n)", item: "Documents/p.txt", base: base)
    let children = (0..<n).map { _ in ChildFixture() }
    let name = "Scale: write presented by \(n) processes" + (base == nil ? "" : " (tmpfs)")
    Benchmark(name, configuration: slow) { benchmark in
      let (coordinator, container, url) = try presented.parts()
      for _ in benchmark.scaledIterations {
        let reacquired = children.map { $0.count("reacquire") }
        benchmark.startMeasurement()
        try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
        benchmark.stopMeasurement()
        // Each iteration starts once every presenter has its item back (what an app and its widgets do).
        for (child, count) in zip(children, reacquired) { try child.wait(for: "reacquire", count: count + 1) }
      }
    } setup: {
      try present(presented, by: children)
    } teardown: {
      for child in children { child.stop() }
      presented.tearDown()
    }
  }

  // MARK: The 64-process handshake against its floor, paired

  // The floor: what any implementation of Apple's API pays on this machine for the 64-process write. The writer asks
  // 64 processes at once (one datagram each) and waits for all; each answers from an `OperationQueue`, as a
  // presenter must (`presentedItemOperationQueue`), through a thread of its own that polls its socket
  // (`gc-bench-answerer`); then the writer replaces the file under a flock. No messages to decode, no presenter
  // records, no coordination state. Each iteration runs the floor and the framework's write (64 `groupctl present`
  // processes, as above) one after the other, in alternating order, as custom metrics: this machine's speed swings
  // by 2× within an hour, and paired the swing cancels out of the ratio.
  for base in [nil, "/dev/shm"] as [String?] {
    let crowd = RawCrowd(processes: 64, base: base)
    let presented = ContainerFixture(
      identifier: "group.bench.floor64", item: "Documents/p.txt", base: base)
    let children = (0..<64).map { _ in ChildFixture() }
    let floor = BenchmarkMetric.custom("floor (ns)", useScalingFactor: false)
    let framework = BenchmarkMetric.custom("framework (ns)", useScalingFactor: false)
    var pairedFloor = slow
    pairedFloor.metrics += [floor, framework]
    let name = "Scale: 64 presenter processes vs the floor (paired)" + (base == nil ? "" : " (tmpfs)")
    // Outside the closure, which runs once per iteration (a variable inside it put the floor first every time).
    let rounds = Atomic<Int>(0)
    Benchmark(name, configuration: pairedFloor) { benchmark in
      let (coordinator, container, url) = try presented.parts()
      for _ in benchmark.scaledIterations {
        let floorFirst = rounds.wrappingAdd(1, ordering: .relaxed).oldValue % 2 == 0
        var floorTime = 0
        var frameworkTime = 0
        for step in floorFirst ? [0, 1] : [1, 0] {
          if step == 0 {
            let reacquired = crowd.children.map { $0.count("reacquire") }
            let start = monotonicNanoseconds()
            try crowd.askAllThenReplace()
            floorTime = elapsed(start, monotonicNanoseconds())
            try crowd.finish()
            for (child, count) in zip(crowd.children, reacquired) {
              try child.wait(for: "reacquire", count: count + 1)
            }
          } else {
            let reacquired = children.map { $0.count("reacquire") }
            let start = monotonicNanoseconds()
            try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
            frameworkTime = elapsed(start, monotonicNanoseconds())
            for (child, count) in zip(children, reacquired) { try child.wait(for: "reacquire", count: count + 1) }
          }
        }
        benchmark.measurement(floor, floorTime)
        benchmark.measurement(framework, frameworkTime)
      }
    } setup: {
      try crowd.setUp()
      do { try present(presented, by: children) } catch {
        crowd.tearDown()
        throw error
      }
    } teardown: {
      for child in children { child.stop() }
      presented.tearDown()
      crowd.tearDown()
    }
  }

  // MARK: What a user sees: a new process's write of an item 64 processes present

  // The issue's measurement (#37 item 5): 64 `groupctl present --only reacquire` processes on one item, and each
  // write a new release process's — `groupctl write --print-duration`, as a widget or a tool writes once — timed
  // as the process reports it. Each iteration times, in alternating order: that write of the presented item, the
  // same of another item of the container (nobody presents it), and this process's own write of the presented item
  // (a warm writer: records, sockets and the presenters' mapping of its ack board all known). Each starts once every
  // presenter has its item back. A new process pays what a warm one has cached: the 64 records read and decoded, 64
  // sockets connected, and every presenter maps the new process's ack board before it can answer.
  let userSees = ContainerFixture(identifier: "group.bench.newwriter64", item: "Documents/p.txt")
  let userChildren = (0..<64).map { _ in ChildFixture() }
  let newPresented = BenchmarkMetric.custom("new process, presented item (ns)", useScalingFactor: false)
  let newOther = BenchmarkMetric.custom("new process, another item (ns)", useScalingFactor: false)
  let warmPresented = BenchmarkMetric.custom("this process, presented item (ns)", useScalingFactor: false)
  var userPaired = slow
  userPaired.metrics = [newPresented, newOther, warmPresented]
  userPaired.maxIterations = 100
  userPaired.maxDuration = .seconds(30)  // each iteration starts a process twice: 5 s gave ~30 iterations
  // Outside the closure, which runs once per iteration (a variable inside it gave the same order every time).
  let userRounds = Atomic<Int>(0)
  Benchmark("Scale: 64 presenter processes, a new process's write (paired)", configuration: userPaired) { benchmark in
    let (coordinator, container, url) = try userSees.parts()
    for _ in benchmark.scaledIterations {
      let order = userRounds.wrappingAdd(1, ordering: .relaxed).newValue
      for step in [order % 3, (order + 1) % 3, (order + 2) % 3] {
        let reacquired = userChildren.map { $0.count("reacquire") }
        switch step {
        case 0: benchmark.measurement(newPresented, try newProcessWrite(userSees, item: userSees.item))
        case 1:
          benchmark.measurement(newOther, try newProcessWrite(userSees, item: "Documents/other.txt"))
          continue  // nobody presents it: no reacquire to wait for
        default:
          let start = monotonicNanoseconds()
          try coordinator.coordinate(writingItemAt: url, options: .forReplacing) {
            try container.write(payload, to: $0)
          }
          benchmark.measurement(warmPresented, elapsed(start, monotonicNanoseconds()))
        }
        for (child, count) in zip(userChildren, reacquired) { try child.wait(for: "reacquire", count: count + 1) }
      }
    }
  } setup: {
    try present(userSees, by: userChildren)
  } teardown: {
    for child in userChildren { child.stop() }
    userSees.tearDown()
  }

  // MARK: tmpfs: the framework's own cost, without ext4's writeback

  let rawShm = RawFixture(base: "/dev/shm")
  Benchmark("Scale: raw replace on tmpfs", configuration: fast) { benchmark in
    for _ in benchmark.scaledIterations {
      try rawShm.lockedReplace()
    }
  } setup: {
    try rawShm.setUp()
  } teardown: {
    rawShm.tearDown()
  }

  let shm = ContainerFixture(identifier: "group.bench.shm", item: "Documents/s.txt", base: "/dev/shm")
  Benchmark("Scale: write on tmpfs", configuration: fast) { benchmark in
    let (coordinator, container, url) = try shm.parts()
    for _ in benchmark.scaledIterations {
      try coordinator.coordinate(writingItemAt: url) { try container.write(payload, to: $0) }
    }
  } setup: {
    try shm.setUp()
  } teardown: {
    shm.tearDown()
  }
}

/// `groupctl write <group> <item> --print-duration` in a new process (a widget or a tool writing once, as the issue
/// measured it): the ns it reports, its coordinated write alone.
func newProcessWrite(_ fixture: ContainerFixture, item: String) throws -> Int {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: try locateGroupctl())
  process.arguments = ["write", fixture.identifier, item, "--root", fixture.root!, "--print-duration"]
  let output = Pipe()
  let input = Pipe()
  process.standardOutput = output
  process.standardInput = input
  try process.run()
  input.fileHandleForWriting.write(payload)  // the 64 bytes every write of these benchmarks writes
  try input.fileHandleForWriting.close()
  let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
  process.waitUntilExit()
  let words = text.split(separator: " ")
  guard process.terminationStatus == 0, words.count == 4, let ns = Int(words[2]) else {
    throw BenchmarkSetupError(
      "groupctl write --print-duration printed '\(text)' (status \(process.terminationStatus))")
  }
  return ns
}

/// Sets up `presented` and starts `children` presenting its item, each a `groupctl present` that answers at once;
/// on failure, stops them and tears it down.
func present(_ presented: ContainerFixture, by children: [ChildFixture]) throws {
  try presented.setUp()
  presented.coordinator?.presenterTimeout = .seconds(2)
  presented.coordinator?.presenterTimeoutPolicy = .fail
  do {
    for child in children {
      // Each prints only its "reacquire" lines (what the loops count): a line per callback would put the
      // formatting and 64 pipe reads of this process inside the measured handshake.
      try child.start(
        group: presented.identifier, item: presented.item, root: presented.root!,
        command: ["present", presented.identifier, presented.item, "--only", "reacquire"], quiet: true)
    }
  } catch {
    for child in children { child.stop() }
    presented.tearDown()
    throw error
  }
}

/// The writer's side of the 64-process baseline: a datagram socket of its own, one connected socket per
/// `gc-bench-answerer` process, and a `RawFixture` for the replace.
final class RawCrowd: @unchecked Sendable {  // vars: set up, used and torn down by the runner in turn
  let children: [ChildFixture]
  private let base: String?
  private let replace: RawFixture
  private var root: String?
  private var inbox: Int32 = -1
  private var peers: [Int32] = []
  private var token: UInt64 = 0

  init(processes: Int, base: String?) {
    children = (0..<processes).map { _ in ChildFixture() }
    self.base = base
    replace = RawFixture(base: base)
  }

  func setUp() throws {
    do { try start() } catch {
      tearDown()
      throw error
    }
  }

  private func start() throws {
    try replace.setUp()
    let root = try makeTemporaryRoot(base: base)
    self.root = root
    inbox = try Self.socket(root + "/writer.sock")
    // An answer missing for 2 s fails the benchmark instead of hanging it.
    var timeout = timeval(tv_sec: 2, tv_usec: 0)
    setsockopt(inbox, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let answerer = try locateBesideBenchmark("gc-bench-answerer")
    for (index, child) in children.enumerated() {
      try child.start(group: "", item: "", root: root, command: ["\(index)"], quiet: true, executable: answerer)
      peers.append(try Self.socket(root + "/a\(index).sock", connect: true))
    }
  }

  func tearDown() {
    for child in children { child.stop() }
    for fd in peers + [inbox] where fd >= 0 { close(fd) }
    peers = []
    inbox = -1
    replace.tearDown()
    removeTree(root)
    root = nil
  }

  /// Sends every process a prepare, waits until all have answered it, then replaces the file.
  func askAllThenReplace() throws {
    token += 1
    try sendAll(kind: 1)
    var answered = 0
    var answer: UInt64 = 0
    while answered < peers.count {
      let count = recv(inbox, &answer, 8, 0)
      if count == 8 && answer == token { answered += 1 }
      if count < 0 && errno != EINTR {
        throw BenchmarkSetupError("\(answered) of \(peers.count) answered: errno \(errno)")
      }
    }
    try replace.lockedReplace()
  }

  /// Sends every process a finish (each prints "reacquire" from its queue).
  func finish() throws { try sendAll(kind: 2) }

  private func sendAll(kind: UInt8) throws {
    var message = [UInt8](repeating: 0, count: 9)
    withUnsafeBytes(of: token.littleEndian) { message.replaceSubrange(0..<8, with: $0) }
    message[8] = kind
    for peer in peers where send(peer, message, message.count, 0) != message.count {
      throw BenchmarkSetupError("send: errno \(errno)")
    }
  }

  /// A datagram socket bound to `path` (`connect` false) or connected to it.
  private static func socket(_ path: String, connect: Bool = false) throws -> Int32 {
    let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw BenchmarkSetupError("socket: errno \(errno)") }
    guard withUnixSocketAddress(path, { connect ? Glibc.connect(fd, $0, $1) : bind(fd, $0, $1) }) == 0 else {
      close(fd)
      throw BenchmarkSetupError("\(connect ? "connect" : "bind") \(path): errno \(errno)")
    }
    return fd
  }
}

/// An executable built beside this benchmark (a dependency of its target, so the same configuration).
func locateBesideBenchmark(_ name: String) throws -> String {
  guard let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
    throw BenchmarkSetupError("cannot read /proc/self/exe")
  }
  let path = (exe as NSString).deletingLastPathComponent + "/" + name
  guard FileManager.default.isExecutableFile(atPath: path) else {
    throw BenchmarkSetupError("\(path) not found: build the benchmark package (its target depends on it)")
  }
  return path
}
