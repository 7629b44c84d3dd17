import Foundation
import TestSupport
import Testing

/// Atomic publish: while a writer process replaces a large document in a loop (coordinated `.forReplacing` writes
/// through `GroupContainer.write`), readers in other processes never see a partial or mixed document — neither
/// readers that coordinate nor plain ones (a tool, or a presenter reading after `presentedItemDidChange`), which
/// only the temp file + rename protects. The document (4 MB) checks itself word by word (GCTestHelper/ScaleModes).
///
/// Mutants this suite catches: `AtomicReplace.write` writing in place (open with O_TRUNC + write) instead of
/// temp + rename — the plain readers see short and mixed documents.
@Suite(.runSlot(.minutes(10))) struct AtomicPublishTests {
  let group = "group.com.example.atomic"

  @Test(.runSlot(.minutes(3)))
  func readersInOtherProcessesNeverSeeAPartialDocument() async throws {
    let root = try TestRoot()
    _ = try root.container(group)
    let item = "Documents/large.bin"
    let writer = try Child(.tornWriter(item: item, bytes: 4 << 20), root: root.path, group: group)
    defer { writer.kill() }
    await writer.line { $0 == "wrote 1" }
    let readers = try [false, false, true].map { coordinated in
      try Child(.tornReader(item: item, coordinated: coordinated), root: root.path, group: group)
    }
    defer { for reader in readers { reader.kill() } }
    // Each reader must have seen many generations come and go: its reads really overlapped the replaces.
    for reader in readers { await reader.line() { $0 == "seen 20" } }
    _ = FileManager.default.createFile(atPath: root.path + "/stop", contents: nil)
    for reader in readers {
      let summary = await reader.line() { $0.hasPrefix("reads ") }
      let fields = (summary ?? "").split(separator: " ")
      #expect(fields.count >= 6 && fields[3] == "0", "a reader saw a partial document: \(summary ?? "no summary")")
      #expect(fields.count >= 6 && (Int(fields[5]) ?? 0) >= 20, "\(summary ?? "no summary")")
    }
    #expect(await writer.line() { $0.hasPrefix("done ") } != nil)
  }
}
