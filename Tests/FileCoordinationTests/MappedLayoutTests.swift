import SystemLayer
import Testing

@testable import BackgroundDownloads
@testable import FileCoordination
@testable import GroupContainerCore
@testable import ImageCache
@testable import Messaging
@testable import SharedDefaults

/// The mapped files' declared layouts (issue #34 item 3): every file of shared words declares its words once, and
/// nothing else checks that two users of a file do not share a word — this does.
///
/// Mutant: `CoordinationCounters.revocationPendingUntil = 80..<144` made `79..<143` (overlapping the last bucket's
/// generation) — `everyLayoutIsDisjointAndFits` fails naming both ranges, and `theWordsAreWhereOlderBuildsLookForThem`
/// fails on the moved range.
@Suite struct MappedLayoutTests {
  static let layouts = [
    CoordinationCounters.layout, AckBoard.layout, SuiteHeader.layout, CacheCounters.layout, DownloadSignals.layout,
  ]

  @Test func everyLayoutIsDisjointAndFits() {
    for layout in Self.layouts {
      #expect(layout.problems == [], "\(layout.file)")
      #expect(layout.wordCount == MappedCounters.capacity, "\(layout.file): the epoch word is not the layout's")
    }
  }

  /// The words are on disk, shared with processes of older builds: a change here is a format change.
  @Test func theWordsAreWhereOlderBuildsLookForThem() {
    func table(_ layout: MappedLayout) -> [String: Range<Int>] {
      Dictionary(uniqueKeysWithValues: layout.fields.map { ($0.name, $0.words) })
    }
    #expect(
      table(CoordinationCounters.layout) == [
        "presenter generation": 0..<1, "lock sweep sequence": 1..<2, "lock files created": 2..<3,
        "lock files created at the last sweep": 3..<4, "revocation wake": 8..<9, "revocation listeners": 9..<10,
        "revocation generations": 16..<80, "revocation pending until": 80..<144,
        "presenter bucket generations": 256..<384,
      ])
    #expect(table(AckBoard.layout) == ["sequence": 0..<1, "listeners": 1..<2, "slots": 2..<511])
    #expect(
      table(CacheCounters.layout) == [
        "shard generations": 0..<256, "bytes": 256..<257, "count": 257..<258, "trims": 258..<259,
      ])
    #expect(
      table(DownloadSignals.layout) == [
        "requests sequence": 0..<1, "requests listeners": 1..<2, "updates sequence": 2..<3, "updates listeners": 3..<4,
      ])
    // The suite header: one word each, 0 to 39 in declaration order.
    #expect(SuiteHeader.layout.fields.map(\.words) == (0...39).map { MappedLayout.word($0) })
    #expect(SuiteHeader.layout.fields.first?.name == "magic" && SuiteHeader.layout.fields.last?.name == "carriedFrom")
    // Two ranges per revocation bucket: as many pending-until words as generations.
    #expect(CoordinationCounters.revocationPendingUntil.count == LockRevocation.buckets)
  }

  @Test func theCheckNamesOverlapsAndWordsOutsideTheFile() {
    let layout = MappedLayout(
      file: "f", wordCount: 8, [("a", 0..<4), ("b", 3..<5), ("c", MappedLayout.word(8)), ("d", 6..<6)])
    #expect(
      layout.problems == [
        "f: 'c' (8..<9) does not fit in words 0..<8", "f: 'd' holds no word", "f: 'a' (0..<4) overlaps 'b' (3..<5)",
      ])
  }
}
