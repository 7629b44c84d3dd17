import SystemLayer

/// How far apart repeated reads of every task are, in the agent (listings of `tasks/`) and in an attached session
/// (its unfinished tasks' records): at least a floor, and at least 20 times what the last read cost, so that reading
/// 10,000 tasks takes at most 5 % of a core however often the other side posts.
///
/// A read's cost is the CPU time of the thread that made it (`measure`), not the wall time: the agent's scan ends
/// with the group commit of new requests, whose `fsync` took 10–15 ms on a journaled ext4, and counted as cost it
/// put the next listing 200–300 ms off — the rest of a burst of 200 new tasks sat unseen that long, the agent idle
/// (a fifth of the 200-file download row). Waiting and a loaded machine's preemption are not work that grows with
/// the number of tasks.
///
/// A reader with nothing else to do (`idle`: an agent with no transfer running or waiting to start) keeps its reads
/// only 2 times their cost apart: the factor 20 keeps reads from taking the CPU of the work, and there is none — an
/// agent that had started every task it knew of sat idle for 20 times its last scan (400–700 ms in a burst of 2,000
/// new tasks, most of that scan the reading of new requests) while the session went on posting. A third of a core
/// at most, and only while sessions post without a pause.
package enum ScanPacing {
  /// The least time, in nanoseconds, between two reads with floor `minimum` when the last one took `lastCost`.
  package static func interval(minimum: UInt64, lastCost: UInt64, idle: Bool = false) -> UInt64 {
    max(minimum, lastCost &* (idle ? 2 : 20))
  }

  /// Runs `read` and returns its result with its cost for `interval`: the CPU time this thread spent in it.
  package static func measure<T>(_ read: () -> T) -> (T, cost: UInt64) {
    let began = ThreadCPUClock.nanoseconds()
    let result = read()
    return (result, ThreadCPUClock.nanoseconds() &- began)
  }
}
