import Foundation
import TestSupport
import Testing

/// Rule 1, the commit point, watched from other processes: writers append self-checking values (sizes varied so
/// records straddle pages; a compaction every megabyte or so, so the journal's bytes are reused) while readers in
/// other processes check every value they get or observe, and that no key goes back.
///
/// Mutant this suite catches: `append` publishing the committed length before copying the record's bytes (with a
/// 50 µs gap between the two): the readers' lock-free catch-up found committed bytes that were not records yet
/// ("torn" > 0). Readers never applied them — the checksum refused them and the read was redone — which is why
/// 0.1.0's suite missed this break: the count of such reads (`committedButUnreadable`) is what shows it.
@Suite(.runSlot(.minutes(5))) struct DefaultsInvariantTests {
  @Test func readersInOtherProcessesNeverSeeARecordBeforeItIsThere() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let id = container.identifier
    let readers = try (0..<2).map { _ in try Child(.seqReader(suite: "order", writers: 3), root: root.path, group: id) }
    for reader in readers { #expect(await reader.line { $0 == "ready" } != nil) }
    let writers = try (0..<3).map { w in
      try Child(.seqWriter(suite: "order", writer: w, count: 2500, size: 3000), root: root.path, group: id)
    }
    for writer in writers { #expect(await writer.exit() == 0, "\(writer.errors.text)") }
    #expect(FileManager.default.createFile(atPath: root.path + "/stop", contents: nil))
    for reader in readers {
      #expect(await reader.exit() == 0)
      let line = reader.output.last ?? ""
      #expect(line.hasPrefix("checked ") && line.contains(" bad 0 torn 0 "), "\(line)")
      #expect(Int(line.split(separator: " ")[1]) ?? 0 > 1000, "the reader checked too little: \(line)")
    }
    let files = try FileManager.default.contentsOfDirectory(atPath: container.preferencesURL.path)
    #expect(!files.contains { $0.contains("corrupt") }, "\(files)")
    withExtendedLifetime(root) {}
  }
}
