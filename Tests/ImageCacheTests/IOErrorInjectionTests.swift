import Foundation
import TestSupport
import Testing

/// Issue #36 item 1, the image cache: SQLite's I/O-error loop (TestSupport's `runIOFaultLoops`) over a store and a
/// trim. After each injected failure, the next fresh process reads every entry on disk whole, and every stored
/// image acknowledged (the trim's loop stores unarmed, and may drop them: only wholeness counts there), but for
/// those a store on a full disk purged.
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  @Test(arguments: [HelperCommand.IOFaultOperation.cacheStore, .cacheTrim])
  func everyInjectedIOErrorIsReportedAndLosesNothing(_ operation: HelperCommand.IOFaultOperation) async throws {
    // A trim skips an entry whose header it cannot read (the next trim sees it again): its failed open or read
    // does not fail the trim. The memory monitor's samples of the cgroup's files (open, read) run on its own thread
    // during a store (best-effort: sampled again at its next tick), and make the counts of a clean round vary.
    let summary = try await runIOFaultLoops(operation, tolerated: ["open", "read"]) {
      CacheFaultChecker(operation: operation)
    }
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }
}

extension IOErrorInjectionTests {
  /// Regression: a store that meets a full quota (EDQUOT) purges and tries again, as on a full disk (ENOSPC); it
  /// failed outright before.
  @Test func aStoreOnAFullQuotaPurgesAndRetriesAsOnAFullDisk() async throws {
    for code in [ENOSPC, EDQUOT] {
      let round = try await runIOFaultRound(
        .cacheStore, call: "write", nth: 1, errno: code, round: 1, root: try TestRoot(),
        group: "group.com.example.faults")
      #expect(round.injected == 1 && round.acknowledged != nil, "\(round) \(round.errors)")
    }
  }
}

struct CacheFaultChecker: IOFaultChecker {
  let operation: HelperCommand.IOFaultOperation
  var acknowledged: Set<String> = []

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    let seen = round.seenPairs
    for (key, state) in seen where state != "ok" { problems.append("entry \(key) reads \(state)") }
    for key in acknowledged.sorted() where seen[key] != "ok" {
      problems.append("acknowledged store of \(key) lost: a fresh process reads \(seen[key] ?? "nothing")")
    }
    if operation == .cacheStore {
      // A store that finds the disk or quota full trims the cache to its low watermark and tries once more (documented, as
      // iOS purges Caches): what it evicted was acknowledged, and is gone by design.
      if round.injected > 0 && (round.errno == ENOSPC || round.errno == EDQUOT) && round.acknowledged != nil {
        acknowledged = []
      }
      for ack in [round.acknowledged, round.next].compactMap({ $0 }) { acknowledged.insert(ack) }
    }
    return problems
  }
}
