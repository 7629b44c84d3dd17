// How coordination scales (issue #8, "Scale"), each figure against its baseline in the same run:
//
//   Scale: write, no presenter                        a coordinated write; nobody presents anything
//   Scale: write with 5,000 files presented elsewhere the same write while another process presents 5,000 other
//                                                     files (`groupctl stress present-many`): should cost the same
//   Scale: write, no presenter vs 5,000 … (paired)    both in each iteration, as custom metrics (load drift cancels)
//   Scale: write presented by N processes (N=1/4/16/64) the same write while N `groupctl present --only reacquire`
//                                                     processes present the item; measured once all have it back
//   Scale: write presented by 64 processes (tmpfs)    the same in /dev/shm: what ext4 inode allocation costs
//
// The presenter rows with the message files of before: run the binary with GROUP_CONTAINER_INBOX_FILES_ONLY=1 (the
// presenters bind no inbox socket, so every prepare and finish goes as a file: MessageTransport.swift).
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
// What is left of the empty access (perf, 4.6–4.8 µs): ~35 % the one openat2 that proves no link is on the way
// (it opens nothing: O_WRONLY | O_DIRECTORY fails once the path resolved), ~25 % the item's flock pair (the tree
// locks stay cached), the rest Swift (lock table, access set-up, coordinator state). A debug run of one
// binary: `.build/release/CoordinationBenchmarks --filter '^Coordinated empty access$'` prints the percentiles.
import Benchmark
import BenchmarkSupport
import Foundation
import GroupContainer

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
      try presented.setUp()
      presented.coordinator?.presenterTimeout = .seconds(2)
      presented.coordinator?.presenterTimeoutPolicy = .fail
      do {
        for child in children {
          // Each prints only its "reacquire" lines (what the loop counts): a line per callback would put the
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
    } teardown: {
      for child in children { child.stop() }
      presented.tearDown()
    }
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
