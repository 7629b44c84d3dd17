import Foundation
import TestSupport
import Testing

/// Issue #36 item 1, coordination: SQLite's I/O-error loop (TestSupport's `runIOFaultLoops`) over a coordinated,
/// durable replace of a document and a coordinated move. After each injected failure, the next fresh process finds
/// the document whole and as last acknowledged, and the moved file at exactly one of its two names, whole.
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  @Test(arguments: [HelperCommand.IOFaultOperation.coordinatedWrite, .coordinatedMove])
  func everyInjectedIOErrorIsReportedAndLosesNothing(_ operation: HelperCommand.IOFaultOperation) async throws {
    // A watch the access adds on the watcher thread that fails is only logged (found by these loops, left as it
    // is: the access itself needs no watch; see the branch report).
    let summary = try await runIOFaultLoops(operation, tolerated: ["inotify_add_watch"]) {
      CoordinationFaultChecker(operation: operation)
    }
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }

  /// A hand-over to a receiver running in another process (`inboxReceiver`): each acknowledged copy is in the
  /// Inbox, whole; no copy is ever torn.
  @Test func everyInjectedIOErrorOfAnInboxSendIsReportedAndLosesNothing() async throws {
    // Absorbed by design: the liveness probe of the receiver (flock, open: taken as alive, the delivery then
    // waits for its answer) and the removal of the answer once read (unlinkat).
    let summary = try await runIOFaultLoops(.inboxSend, tolerated: ["flock", "open", "unlinkat"]) { root in
      let container = try root.container("group.com.example.faults")
      try container.registerURLScheme("faultsink", launching: URL(fileURLWithPath: "/bin/false"))
      let receiver = try Child(
        .inboxReceiver(scheme: "faultsink", log: root.path + "/opened.log"), root: root.path,
        group: "group.com.example.faults")
      await receiver.line { $0.hasPrefix("ready ") }
      return receiver
    } checker: {
      InboxFaultChecker()
    }
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
    // An answer this process's watcher fails to read (an injected EIO, ENOMEM…) is read again, not dropped: the
    // send said "did not answer" although the receiver opened the copy (Messenger.receive).
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }
}

/// Every copy in the Inbox is whole, and each acknowledged one is there.
struct InboxFaultChecker: IOFaultChecker {
  var acknowledged: Set<String> = []

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    let seen = round.seenPairs
    for (name, state) in seen where state != "ok" { problems.append("the Inbox's \(name) is torn") }
    for name in acknowledged.sorted() where seen[name] != "ok" {
      problems.append("acknowledged hand-over of \(name) lost: a fresh process reads \(seen[name] ?? "nothing")")
    }
    for ack in [round.acknowledged, round.next].compactMap({ $0 }) { acknowledged.insert(ack) }
    return problems
  }
}

/// The document (`Documents/doc.txt`) reads as the last acknowledged write, whole; the moved file
/// (`Documents/m/a.txt` or `b.txt`) is at the name the last acknowledged move gave it, whole, and only there.
struct CoordinationFaultChecker: IOFaultChecker {
  let operation: HelperCommand.IOFaultOperation
  var last: String?

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    if operation == .coordinatedWrite {
      if round.seen.hasPrefix("torn") { problems.append("the document is torn: \(round.seen)") }
      if let last, round.seen != last {
        problems.append("acknowledged \(last) lost: a fresh process reads \(round.seen)")
      }
    } else {
      let expected = last.map { "\($0):whole" } ?? "a.txt:whole"
      if round.seen != expected {
        problems.append("after the moves acknowledged, expected \(expected), found \(round.seen)")
      }
    }
    for ack in [round.acknowledged, round.next].compactMap({ $0 }) { last = ack }
    return problems
  }
}
