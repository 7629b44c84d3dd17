// A Live Activity's update as a widget in another process sees it, against shared defaults' cross-process observer
// in the same run ("SharedDefaults set → observer in another process", DefaultsBenchmarks.swift):
//
//   Live Activity update → observer in another process   `update(_:)` of the content state (an atomic replace of
//                                             the activity's record under its flock); `groupctl activities watch`
//                                             in a child hears the rename through inotify, re-reads the record
//                                             and prints it; measured until its JSON line reaches us through a pipe
//
// Run both: `swift package --allow-writing-to-package-directory benchmark --target DefaultsBenchmarks
//   --filter '.*observer in another process'`.
import Benchmark
import BenchmarkSupport
import Foundation
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
    for _ in benchmark.scaledIterations {
      let i = fixture.next.advance()
      try await activity.update(ActivityContent(state: .init(n: i), staleDate: nil))
      fixture.watcher.wait(for: i)
    }
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
}
