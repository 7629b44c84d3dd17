import Foundation
import PropertyList
import TestSupport
import Testing

/// Issue #36 item 1, the defaults: SQLite's I/O-error loop over a set, an `update`, a `synchronize()` and a
/// compaction. Each kind of system call the operation makes fails as its Nth call (N = 1, 2, … until the operation
/// completes) with EIO, ENOSPC, EDQUOT and EINTR, in a fresh gc-test-helper per round (the injection counts every
/// thread of a process: see IOFaultInjection.swift). After each round: a clear error or success (EINTR retried),
/// no temp file left, the next operation succeeds (TestSupport's `runIOFaultLoops`), and here — read by the next
/// round's fresh process — every acknowledged value is still there, `update` never returned a value twice, and the
/// export parses (and, after a synchronize that returned, holds every acknowledged value).
///
/// Mutants this suite catches (each run once, see the branch's final report): AtomicReplace's removal of the temp
/// file after a failed write skipped → "temp files left"; `SystemFD.sync()` ignoring fsync's error → "the operation
/// succeeded although a fsync failed"; `valueOrErrno` not retrying EINTR → "an EINTR was not retried".
@Suite(.runSlot(.minutes(30))) struct IOErrorInjectionTests {
  @Test(arguments: [
    HelperCommand.IOFaultOperation.defaultsSet, .defaultsUpdate, .defaultsSynchronize, .defaultsCompaction,
  ])
  func everyInjectedIOErrorIsReportedAndLosesNothing(_ operation: HelperCommand.IOFaultOperation) async throws {
    // Absorbed by design in a synchronize or compaction: the look at the export's state that picks the path (the
    // export is judged again when it is exchanged), and mapping the installed snapshot for reads (it is durable
    // already; the next read maps it).
    let tolerated: Set<String> =
      operation == .defaultsSynchronize || operation == .defaultsCompaction ? ["open", "mmap"] : []
    let summary = try await runIOFaultLoops(operation, tolerated: tolerated) {
      DefaultsFaultChecker(operation: operation)
    }
    #expect(summary.loops > 0 && summary.injected > 0, "\(summary)")
    #expect(summary.problems.isEmpty, "\(summary)\n\(summary.problems.prefix(30).joined(separator: "\n"))")
  }

  /// Regression: a journal that cannot grow by its doubling on a full quota (EDQUOT) tries the size the write needs,
  /// as on a full disk (ENOSPC); the set failed outright before.
  @Test func aSetOnAFullQuotaTriesTheSizeItNeedsAsOnAFullDisk() async throws {
    for code in [ENOSPC, EDQUOT] {
      let round = try await runIOFaultRound(
        .defaultsSet, call: "fallocate", nth: 1, errno: code, round: 1, root: try TestRoot(),
        group: "group.com.example.faults")
      #expect(round.injected == 1 && round.acknowledged != nil, "\(round) \(round.errors)")
    }
  }

  /// Regression: a failed read of `/proc/self/stat` left this process's identity (pid and start time: lock
  /// words, temp-file names) without its start time for the whole life of the process, and other processes then
  /// judged its lock word's owner dead while it held the suite's lock. Armed from the process's start, the Nth
  /// open or read fails (setup may fail with it: fine): a process that runs reports a whole identity.
  @Test func aFailedReadOfTheStartTimeDoesNotCostTheProcessItsIdentity() async throws {
    var ran = 0
    for call in ["open", "read"] {
      for n in 1...8 {
        let root = try TestRoot()
        var environment = ProcessInfo.processInfo.environment
        environment["GROUPCONTAINER_IO_FAULT"] = "\(call):\(n):EIO"
        let (status, output, errors) = try await runHelperToEnd(
          .ioFault(operation: .defaultsSet, call: nil, nth: 0, errno: EIO, round: 1), root: root.path,
          group: "group.com.example.faults", environment: environment)
        #expect(!output.contains("identity lost"), "\(call):\(n): \(output) \(errors)")
        if status == 0 && output.contains("identity ok") { ran += 1 }
      }
    }
    #expect(ran >= 8, "too few processes got past their setup to report their identity")
  }
}

/// The defaults' own checks: acknowledged values survive, `update`'s results are unique and rising, the export
/// is whole.
struct DefaultsFaultChecker: IOFaultChecker {
  let operation: HelperCommand.IOFaultOperation
  var acknowledged: [String: Int] = [:]
  var counter = 0

  static func pairs(_ text: String) -> [String: Int] {
    IOFaultRound.pairs(text).mapValues { Int($0) ?? Int.min }
  }

  mutating func check(_ round: IOFaultRound, container: URL) -> [String] {
    var problems: [String] = []
    let seen = Self.pairs(round.seen)
    for (key, value) in acknowledged.sorted(by: { $0.key < $1.key }) where seen[key] != value {
      problems.append(
        "acknowledged \(key)=\(value) lost: a fresh process reads \(seen[key].map(String.init) ?? "nothing")")
    }
    if (seen["counter"] ?? 0) < counter {
      problems.append("the counter went back from \(counter) to \(seen["counter"] ?? 0)")
    }
    for ack in [round.acknowledged, round.next].compactMap({ $0 }) {
      for (key, value) in Self.pairs(ack) {
        if key == "counter" {
          if value <= counter { problems.append("update returned \(value) after \(counter): a value twice") }
          counter = max(counter, value)
        } else {
          acknowledged[key] = value
        }
      }
    }
    // The export: whole whenever it is there; after a synchronize that returned, it holds every acknowledged value.
    let plist = container.appendingPathComponent("Library/Preferences/faults.plist")
    if let bytes = FileManager.default.contents(atPath: plist.path) {
      if let dictionary = (try? PropertyListValue(bytes: Array(bytes)))?.dictionaryValue {
        if operation == .defaultsSynchronize && round.next != nil {
          for (key, value) in acknowledged where dictionary[key]?.intValue != value {
            problems.append("the export after synchronize() lacks \(key)=\(value)")
          }
        }
      } else {
        problems.append("the export is torn (\(bytes.count) bytes)")
      }
    } else if operation == .defaultsSynchronize && round.next != nil {
      problems.append("no export after synchronize() returned")
    }
    return problems
  }
}
