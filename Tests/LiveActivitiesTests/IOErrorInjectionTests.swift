import Foundation
import TestSupport
import Testing

/// Issue #36 item 1, Live Activities: SQLite's I/O-error loop (TestSupport's `runIOFaultLoops`) over an activity
/// update. After each injected failure, the next fresh process reads the score last acknowledged (the record is
/// replaced atomically: never torn, never rolled back).
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  @Test func everyInjectedIOErrorOfAnUpdateIsReportedAndLosesNothing() async throws {
    let summary = try await runIOFaultLoops(.activityUpdate) { ActivityFaultChecker() }
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
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
