import Foundation
import Glibc
import TestSupport
import Testing

/// Issue #36 item 1, downloads: SQLite's I/O-error loop (TestSupport's `runIOFaultLoops`) over a download's
/// checkpoints and its publish, made by the agent's code in gc-test-helper (`DownloadFaultSubject`: armed after the
/// task is requested, so N counts the operation's calls only). After each round: the task failed with an error that
/// names what failed (its status, as a session's `didCompleteWithError` reports it) or the download completed;
/// `EINTR` was retried; every file in `Downloads/` has the served entity's bytes (nothing torn, each acknowledged
/// one there); no temp file is left; the next download succeeds.
///
/// The kinds looped (the rest are left out to keep `make test` short; each loop is 4 errnos × N rounds, every round
/// a process of its own):
/// - checkpoint: `fdatasync` (the checkpoint itself; a 256 KiB body with a checkpoint every 32 KiB takes several);
///   `pwrite` (the body into the partial) is left out: one call per body part, 10–20 rounds per errno for the same
///   path (`writeFailed`) that a failed checkpoint takes.
/// - publish: `fsync` (the partial, then the destination's directory), `rename` (the partial onto the destination)
///   and `flock` (the coordinated write's lock). Left out: `open` (the coordination's lock files and directories:
///   looped by the coordinated-write loops, same code) and `write` (none in a publish on one file system; the
///   `EXDEV` copy is not reached here).
///
/// What they caught: the publish classifying `EDQUOT` as `diskFull` ("no space left on the disk … free space"; 7
/// problems, "the error does not say what failed (Disk quota exceeded)": fixed, PublishTests). Mutant: a failed
/// checkpoint ignored (`TransferDelegate.checkpoint` dropping the fdatasync's error) — 7 problems, "a checkpoint's
/// fdatasync failed and the download completed as if it had not" (the generic count check saw 1 of them: the
/// number of checkpoints varies with timing); one publish in four cut to half its length after its fsync — 12
/// problems, "Downloads/p.bin is torn" and "acknowledged publish … lost".
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  static let kinds: [HelperCommand.IOFaultOperation: Set<String>] = [
    .downloadCheckpoint: ["fdatasync"], .downloadPublish: ["fsync", "rename", "flock"],
  ]

  @Test(arguments: [HelperCommand.IOFaultOperation.downloadCheckpoint, .downloadPublish])
  func everyInjectedIOErrorOfADownloadIsReportedAndNothingPublishedIsTorn(
    _ operation: HelperCommand.IOFaultOperation
  ) async throws {
    let server = try await FileServer.start()
    let base = String(server.url("/").absoluteString.dropLast())
    let summary = try await runIOFaultLoops(operation, only: Self.kinds[operation]) { root in
      try Data(base.utf8).write(to: root.url.appendingPathComponent("server-url"))
      return nil
    } checker: {
      DownloadFaultChecker(operation: operation)
    }
    _ = await server.stop()
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
    // Every kind looped was made by a clean round: a checkpoint did happen, and the publish renamed and fsynced.
    for kind in Self.kinds[operation] ?? [] { #expect(summary.calls[kind, default: 0] > 0, "\(kind): \(summary)") }
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }
}

/// Every file of `Downloads/` whole; each acknowledged download there (checkpoint: `c<round>.bin`); the published
/// `p.bin` holding the bytes of the previous process's last publish when that was acknowledged.
struct DownloadFaultChecker: IOFaultChecker {
  let operation: HelperCommand.IOFaultOperation
  var acknowledged: Set<String> = []
  var lastPublished: Int?

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    let seen = round.seenPairs
    for (name, state) in seen.sorted(by: { $0.key < $1.key }) where state == "torn" {
      problems.append("Downloads/\(name) is torn: its bytes are not the served entity's")
    }
    if operation == .downloadCheckpoint {
      // A failed checkpoint fails the attempt like a failed write (TransferDelegate), and the download with it: in a
      // round that completes, every fdatasync is a checkpoint (the failure paths' sync is the only other), so one
      // that failed and still let it complete was swallowed. (The generic check cannot tell: the number of
      // checkpoints varies with timing, so more fdatasyncs than the clean round does not mean a retry.)
      if round.call == "fdatasync", round.injected > 0, round.errno != EINTR, let done = round.acknowledged {
        problems.append("a checkpoint's fdatasync failed and the download completed as if it had not (\(done))")
      }
      for name in acknowledged.sorted() where seen[name] != "ok" {
        problems.append("acknowledged download \(name) lost: a fresh process reads \(seen[name] ?? "nothing")")
      }
      for ack in [round.acknowledged, round.next].compactMap({ $0 }) { acknowledged.insert(ack) }
    } else {
      // The previous process's last operation was its unarmed publish: when it was acknowledged, p.bin is that.
      if let lastPublished, seen["p.bin"] != "r\(lastPublished)" {
        problems.append("acknowledged publish of round \(lastPublished) lost: p.bin is \(seen["p.bin"] ?? "gone")")
      }
      lastPublished = round.next.flatMap { Int($0.dropFirst("p.bin=r".count)) }
    }
    return problems
  }
}
