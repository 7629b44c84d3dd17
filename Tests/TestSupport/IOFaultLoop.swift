import Foundation
import Glibc
import SystemLayer
import Testing

/// One round of an I/O-error loop, as gc-test-helper reported it (`HelperCommand.ioFault`).
public struct IOFaultRound: Sendable, CustomStringConvertible {
  public var call: String
  public var nth: Int
  public var errno: Int32
  /// What the fresh process read before the operation (the previous rounds' state).
  public var seen: String
  /// What the operation acknowledged, when it returned.
  public var acknowledged: String?
  /// What it threw, when it did.
  public var error: String?
  public var injected: Int
  public var calls: [String: Int]
  /// What the next operation (unarmed, same process) acknowledged, or nil.
  public var next: String?
  public var nextError: String?
  /// Where the injected failure struck: this package's frames (mangled), innermost first.
  public var stack = ""
  public var status: Int32?
  public var output: String
  public var errors: String

  public var description: String {
    "\(call)#\(nth) \(errnoName(errno)): result \(acknowledged.map { "ok " + $0 } ?? "error " + (error ?? "?"))"
      + " injected \(injected), next \(next.map { "ok " + $0 } ?? "error " + (nextError ?? "?"))"
  }

  /// The errors the loops inject: the I/O errors a disk gives, and `EINTR`, which must be retried.
  public static let errnos: [Int32] = [EIO, ENOSPC, EDQUOT, EINTR]

  /// What the fresh process read (`seen`), as the helper prints it: `name=state,name=state…`.
  public var seenPairs: [String: String] { Self.pairs(seen) }

  /// `k=v,k=v…` as a dictionary (a pair without exactly one `=` is skipped).
  public static func pairs(_ text: String) -> [String: String] {
    var result: [String: String] = [:]
    for pair in text.split(separator: ",") {
      let parts = pair.split(separator: "=")
      if parts.count == 2 { result[String(parts[0])] = String(parts[1]) }
    }
    return result
  }
}

public func errnoName(_ code: Int32) -> String {
  [EIO: "EIO", ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", EINTR: "EINTR"][code] ?? "errno \(code)"
}

/// What a loop's checker says about one round, given the container it ran in.
public protocol IOFaultChecker {
  /// The problems this round shows (empty: none) — lost acknowledged values, torn files — and takes in what it
  /// acknowledged for the next rounds.
  mutating func check(_ round: IOFaultRound, container: URL) -> [String]
}

/// What the loops of one operation found.
public struct IOFaultSummary: Sendable, CustomStringConvertible {
  public var operation: HelperCommand.IOFaultOperation
  /// Rounds run (children started), failures injected, loops (kind × errno) run.
  public var rounds = 0
  public var injected = 0
  public var loops = 0
  /// The calls the operation made, by kind, in a round without injection.
  public var calls: [String: Int] = [:]
  public var problems: [String] = []

  public var description: String {
    "\(operation.rawValue): \(loops) loops, \(rounds) rounds, \(injected) injected failures, "
      + "\(problems.count) problems; calls \(calls.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })"
  }
}

/// SQLite's I/O-error loop for one operation: for each kind of call the operation makes and each injected errno,
/// N = 1, 2, … in a fresh gc-test-helper each time, until a round completes without an injected failure. After
/// each round the generic checks — no crash, a clear error (its text names the errno) or a success, `EINTR` always
/// retried, no temp file left in the container, the next operation succeeding — then `checker`'s (what a fresh
/// process reads: nothing acknowledged lost, nothing torn). Each loop works in a container of its own.
///
/// `tolerated`: kinds whose injected failure the operation may absorb and still succeed (a best-effort step, such
/// as the removal of a temp file or an export that the next synchronize makes); any other kind must make the
/// operation fail. `only`: the kinds to loop (nil: every kind the clean round made), for an operation whose rounds
/// are slow.
public func runIOFaultLoops(
  _ operation: HelperCommand.IOFaultOperation, group: String = "group.com.example.faults",
  errnos: [Int32] = IOFaultRound.errnos, tolerated: Set<String> = [], only: Set<String>? = nil, maximumN: Int = 400,
  setUp: (@Sendable (TestRoot) async throws -> Child?)? = nil,
  checker: @escaping @Sendable () -> any IOFaultChecker
) async throws -> IOFaultSummary {
  var summary = IOFaultSummary(operation: operation)
  // A round that only counts: which kinds of calls the operation makes, and how many.
  let dryRoot = try TestRoot()
  let dryPeer = try await setUp?(dryRoot)
  let dry = try await runIOFaultRound(operation, call: nil, nth: 0, errno: EIO, round: 1, root: dryRoot, group: group)
  dryPeer?.kill()
  // And a second one: a kind counted in one only was background work that timing brings or not (an export check,
  // the watcher), which no loop can reach — an activity update, which makes no call, once counted such work's
  // opens, reads and writes, and then 12 loops injected nothing (CI). The loops are over kinds both counted.
  let secondRoot = try TestRoot()
  let secondPeer = try await setUp?(secondRoot)
  let second = try await runIOFaultRound(
    operation, call: nil, nth: 0, errno: EIO, round: 2, root: secondRoot, group: group)
  secondPeer?.kill()
  summary.rounds += 2
  summary.calls = dry.calls.filter { second.calls[$0.key] != nil }
  guard dry.acknowledged != nil else {
    summary.problems.append("the operation fails without any injected failure: \(dry) \(dry.errors)")
    return summary
  }
  for call in summary.calls.keys.sorted() where only?.contains(call) ?? true {
    for code in errnos {
      // mmap and inotify_add_watch never fail with EINTR.
      if code == EINTR && (call == "mmap" || call == "inotify_add_watch") { continue }
      summary.loops += 1
      let root = try TestRoot()
      let container = root.url.appendingPathComponent(group)
      let peer = try await setUp?(root)
      defer { peer?.kill() }
      var check = checker()
      var nth = 1
      while nth <= maximumN {
        let round = try await runIOFaultRound(
          operation, call: call, nth: nth, errno: code, round: nth, root: root, group: group)
        summary.rounds += 1
        summary.injected += round.injected
        var problems = genericProblems(round, container: container, tolerated: tolerated, clean: dry.calls)
        problems += check.check(round, container: container)
        if problems.contains(where: { $0.hasPrefix(unretriedSuccess) }) {
          // "Nothing was retried" compares counts of calls with the clean round, and the helper's background work
          // (an export check, the watcher) makes them vary with timing: on a loaded CI machine the Nth call fell
          // once in such work. The same round is run again (as a round of its own); a finding it does not repeat
          // is timing, not a missing retry.
          let again = try await runIOFaultRound(
            operation, call: call, nth: nth, errno: code, round: nth + 200_000, root: root, group: group)
          summary.rounds += 1
          summary.injected += again.injected
          let repeated = genericProblems(again, container: container, tolerated: tolerated, clean: dry.calls)
            .contains { $0.hasPrefix(unretriedSuccess) }
          if !repeated { problems.removeAll { $0.hasPrefix(unretriedSuccess) } }
          problems += check.check(again, container: container)
        }
        summary.problems += problems.map {
          "\(round.call)#\(round.nth) \(errnoName(code)): \($0)" + (round.stack.isEmpty ? "" : " [at \(round.stack)]")
        }
        if round.status != 0 || round.injected == 0 { break }
        nth += 1
      }
      if nth > maximumN { summary.problems.append("\(call) \(errnoName(code)): still injecting at N = \(maximumN)") }
      // A last fresh process reads what the last round acknowledged.
      let last = try await runIOFaultRound(
        operation, call: nil, nth: 0, errno: code, round: nth + 1, root: root, group: group)
      summary.rounds += 1
      let problems =
        genericProblems(last, container: container, tolerated: tolerated, clean: dry.calls)
        + check.check(last, container: container)
      summary.problems += problems.map { "\(call) \(errnoName(code)) after the loop: \($0)" }
    }
  }
  if let path = ProcessInfo.processInfo.environment["GC_IO_FAULT_COUNTS"] {
    let line = summary.description + "\n" + summary.problems.map { "  " + $0 + "\n" }.joined()
    if let handle = FileHandle(forWritingAtPath: path)
      ?? {
        FileManager.default.createFile(atPath: path, contents: nil)
        return FileHandle(forWritingAtPath: path)
      }()
    {
      handle.seekToEndOfFile()
      handle.write(Data(line.utf8))
      try? handle.close()
    }
  }
  return summary
}

/// How a success after an injected failure with no sign of a retry is reported (`genericProblems`).
let unretriedSuccess = "the operation succeeded"

/// The kinds of calls whose failure an operation may never absorb without a retry: a success after a failed fsync
/// is a durability it does not have. For the others the sign of a retry (more calls of the kind than a clean round)
/// is not reliable — the helper's background work makes the counts vary with timing, and three fresh-clone CI runs
/// flagged a read or a write that the same round run again did not — so a success is judged by what the checkers
/// read back (nothing lost, nothing torn), not by counts.
let durabilityCalls: Set<String> = ["fsync", "fdatasync"]

/// The checks every operation's rounds share.
func genericProblems(_ round: IOFaultRound, container: URL, tolerated: Set<String>, clean: [String: Int])
  -> [String]
{
  var problems: [String] = []
  guard round.status == 0 else {
    return ["the helper exited with \(round.status.map(String.init) ?? "a hang"): \(round.output) \(round.errors)"]
  }
  if round.injected > 0 {
    if round.errno == EINTR {
      if round.acknowledged == nil { problems.append("an EINTR was not retried: \(round.error ?? "")") }
    } else if let error = round.error {
      let meaning = String(cString: strerror(round.errno))
      if !error.contains(meaning) { problems.append("the error does not say what failed (\(meaning)): \(error)") }
    } else if durabilityCalls.contains(round.call) && !tolerated.contains(round.call)
      && round.calls[round.call, default: 0] <= clean[round.call, default: 0]
    {
      // Success after a failure is right only when something was done again (a retry, a fallback: more calls of
      // the kind than a round without failure makes) or the step is best-effort (`tolerated`).
      problems.append("\(unretriedSuccess) although a \(round.call) failed, and nothing was retried")
    }
  } else if round.acknowledged == nil {
    problems.append("failed with nothing injected: \(round.error ?? "")")
  }
  if round.next == nil { problems.append("the next operation failed: \(round.nextError ?? "")") }
  if round.output.contains("\nidentity lost") {
    problems.append("the process's identity (pid and start time, in lock words and temp names) lost its start time")
  }
  let temporaries = temporaryFiles(in: container)
  if !temporaries.isEmpty { problems.append("temp files left: \(temporaries)") }
  return problems
}

/// Temp files of atomic replaces (`AtomicReplace.temporaryPrefix`) anywhere under `directory`.
public func temporaryFiles(in directory: URL) -> [String] {
  guard let walker = FileManager.default.enumerator(atPath: directory.path) else { return [] }
  var found: [String] = []
  while let path = walker.nextObject() as? String {
    if (path as NSString).lastPathComponent.hasPrefix(AtomicReplace.temporaryPrefix) { found.append(path) }
  }
  return found
}

/// Runs one round in a fresh gc-test-helper and parses its report.
public func runIOFaultRound(
  _ operation: HelperCommand.IOFaultOperation, call: String?, nth: Int, errno code: Int32, round: Int,
  root: TestRoot, group: String
) async throws -> IOFaultRound {
  let (status, output, errors) = try await runHelperToEnd(
    .ioFault(operation: operation, call: call, nth: nth, errno: code, round: round), root: root.path, group: group,
    timeout: 120)
  var report = IOFaultRound(
    call: call ?? "-", nth: nth, errno: code, seen: "", injected: 0, calls: [:], status: status, output: output,
    errors: errors)
  for line in output.split(separator: "\n").map(String.init) {
    let (word, rest) =
      line.firstIndex(of: " ").map { (String(line[..<$0]), String(line[line.index(after: $0)...])) }
      ?? (line, "")
    switch word {
    case "seen": report.seen = rest
    case "result":
      if rest.hasPrefix("ok ") {
        report.acknowledged = String(rest.dropFirst(3))
      } else {
        report.error = String(rest.dropFirst(6))
      }
    case "injected": report.injected = Int(rest) ?? -1
    case "where": report.stack = rest
    case "calls": report.calls = IOFaultRound.pairs(rest).compactMapValues { Int($0) }
    case "next":
      if rest.hasPrefix("ok ") {
        report.next = String(rest.dropFirst(3))
      } else {
        report.nextError = String(rest.dropFirst(6))
      }
    default: break
    }
  }
  return report
}
