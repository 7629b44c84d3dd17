/// How far apart repeated reads of every task are, in the agent (listings of `tasks/`) and in an attached session
/// (its unfinished tasks' records): at least a floor, and at least 20 times what the last read cost, so that reading
/// 10,000 tasks takes at most 5 % of the time however often the other side posts.
package enum ScanPacing {
  /// The least time, in nanoseconds, between two reads with floor `minimum` when the last one took `lastCost`.
  package static func interval(minimum: UInt64, lastCost: UInt64) -> UInt64 {
    max(minimum, lastCost &* 20)
  }
}
