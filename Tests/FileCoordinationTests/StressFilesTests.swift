import Foundation
import TestSupport
import Testing

/// `groupctl stress files`, run as a real binary: many writer processes doing coordinated read-modify-write
/// increments of one JSON document while presenter processes watch it.
///
/// Mutants this suite catches: a coordinated replace written in place (open O_TRUNC + write) instead of
/// temp + rename (torn reads by writers and presenters); the write lock not taken (`LockTable` granting every
/// exclusive request at once: lost increments); finishes not sent (`CoordinatedAccess.finish` returning at once:
/// the first test's callback count falls short).
@Suite(.runSlot(.minutes(10))) struct StressFilesTests {
  let group = "group.com.example.stress"

  /// Runs groupctl; returns its status and stdout lines (stderr is kept for failure messages). A run that does not
  /// end within `Wait.exit` (a hang: 800 coordinated writes took over 50 s on a loaded machine) is killed and
  /// recorded as an issue (its workers exit when they see it gone).
  func groupctl(_ arguments: [String], timeout: Double = Wait.exit) async throws -> (
    status: Int32, lines: [String], err: String
  ) {
    let run = try await runToEnd(productsDirectory.appendingPathComponent("groupctl").path, arguments, timeout: timeout)
    return (run.status ?? -1, run.output.split(separator: "\n").map(String.init), run.errors)
  }

  /// The fields of the summary line, e.g. ["ops": (800, 800), "lost": (0, nil), …].
  func summary(_ line: String?) -> [String: (Int, Int?)] {
    var fields: [String: (Int, Int?)] = [:]
    for field in (line ?? "").split(separator: " ") {
      let kv = field.split(separator: "=", maxSplits: 1)
      guard kv.count == 2 else { continue }
      let parts = kv[1].split(separator: "/")
      guard let value = Int(parts[0]) else { continue }
      fields[String(kv[0])] = (value, parts.count > 1 ? Int(parts[1]) : nil)
    }
    return fields
  }

  @Test
  func writersLoseNothingAndPresentersHearEveryWrite() async throws {
    let root = try TestRoot()
    let result = try await groupctl([
      "stress", "files", group, "--root", root.path, "--writers", "4", "--ops", "200", "--presenters", "2",
    ])
    let fields = summary(result.lines.last)
    #expect(result.status == 0, "\(result.lines) \(result.err)")
    #expect(result.lines.last?.hasPrefix("ops=") == true, "\(result.lines)")
    #expect(fields["ops"]?.0 == 800 && fields["ops"]?.1 == 800, "\(result.lines)")
    #expect(fields["lost"]?.0 == 0 && fields["torn"]?.0 == 0, "\(result.lines)")
    // Without kills every write's finish reaches both presenters: one relinquish + didChange pair each.
    #expect(fields["callbacks"]?.0 == 1600 && fields["callbacks"]?.1 == 1600, "\(result.lines)")
    #expect(fields["writes_per_s"] != nil, "\(result.lines)")
  }

  @Test
  func randomKillsOfWritersLoseNothingAcknowledged() async throws {
    let root = try TestRoot()
    let result = try await groupctl([
      "stress", "files", group, "--root", root.path, "--writers", "4", "--ops", "200", "--presenters", "1",
      "--kill-random", "--kills", "8", "--seed", "42",
    ])
    let fields = summary(result.lines.last)
    #expect(result.status == 0, "\(result.lines) \(result.err)")
    #expect(result.lines.contains { $0.hasPrefix("killed ") && $0 != "killed 0 writer(s)" }, "\(result.lines)")
    // Restarted writers resume from their own count: every op is done exactly once or the run says so.
    #expect(fields["ops"]?.0 == 800 && fields["ops"]?.1 == 800, "\(result.lines)")
    #expect(fields["lost"]?.0 == 0 && fields["torn"]?.0 == 0, "\(result.lines)")
    // A killed writer may die between its prepare and its finish, so the pairs are reported, not required.
    #expect(fields["callbacks"]?.1 == 800, "\(result.lines)")
  }
}
