import Foundation
import TestSupport
import Testing

/// Issue #36 item 1, Live Activities: SQLite's I/O-error loop (TestSupport's `runIOFaultLoops`) over an activity
/// update. After each injected failure, the next fresh process reads the score last acknowledged (the record is
/// one commit of the records' suite: never torn, never rolled back). An update of an open suite usually makes no
/// system call at all (a commit is a write to the shared mapping): then there is nothing to inject, and the calls a
/// commit can make (the journal's growth, a compaction) are the defaults' own loops' (SharedDefaultsTests'
/// `IOErrorInjectionTests`, `defaultsUpdate`).
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  @Test func everyInjectedIOErrorOfAnUpdateIsReportedAndLosesNothing() async throws {
    let summary = try await runIOFaultLoops(.activityUpdate) { ActivityFaultChecker() }
    #expect(summary.calls.isEmpty || (summary.loops > 0 && summary.injected > 0), "\(summary)")
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }
}

struct ActivityFaultChecker: IOFaultChecker {
  var last: String?

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    if let last, round.seen != last {
      problems.append("acknowledged \(last) lost: a fresh process reads \(round.seen)")
    }
    for ack in [round.acknowledged, round.next].compactMap({ $0 }) { last = ack }
    return problems
  }
}
