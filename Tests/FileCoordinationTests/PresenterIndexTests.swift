import Foundation
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore
@testable import Messaging

/// The registry's index by item path: an access looks up only the presenters of its items, their ancestors and
/// their descendants. It must find exactly what comparing the access with every record finds.
///
/// Mutants this suite catches: the descendant run not scanned (a directory write misses presenters inside it);
/// the container root's presenters skipped.
@Suite(.runSlot(.minutes(10))) struct PresenterIndexTests {
  /// What `CoordinatedAccess` did before the index: compare the item with every record.
  func bruteForce(_ records: [PresenterRecord], _ items: [ContainerPath]) -> [PresenterRecord] {
    records.filter { record in
      items.contains { item in
        record.path == item || item.isDescendant(of: record.path) || record.path.isDescendant(of: item)
      }
    }
  }

  @Test func findsExactlyTheRecordsRelatedToTheAccessedItems() throws {
    var random = SplitMix64(seed: 8)
    let names = ["a", "b", "ab", "a b", "café", "z"]
    func randomPath() -> String {
      (0..<Int.random(in: 0...4, using: &random)).map { _ in names.randomElement(using: &random)! }
        .joined(separator: "/")
    }
    let process = ProcessName(pid: 1, startTime: 2)
    for round in 0..<200 {
      // As the registry gives them: sorted by id.
      let records = (0..<Int.random(in: 0...40, using: &random)).map { n in
        PresenterRecord(id: "1.2.\(n)", process: process, item: randomPath(), isDirectory: Bool.random(using: &random))
      }.sorted { $0.id < $1.id }
      let index = PresenterIndex(records: records)
      for _ in 0..<10 {
        let items = try (0..<Int.random(in: 1...2, using: &random)).map { _ in
          let path = randomPath()
          return path.isEmpty ? ContainerPath.root : try ContainerPath(path)
        }
        let expected = bruteForce(records, items).map(\.id)
        let found = index.related(to: items).map(\.id)
        guard found == expected else {
          Issue.record("round \(round), items \(items): found \(found), expected \(expected)")
          return
        }
      }
    }
  }

  @Test func aRecordParsesItsPathOnceAndRoundTrips() throws {
    let record = PresenterRecord(
      id: "1.2.3", process: ProcessName(pid: 1, startTime: 2), item: "Documents/x/y", isDirectory: true)
    #expect(record.path.components == ["Documents", "x", "y"])
    let decoded = try PresenterRecord.decode(record.encoded(), fileName: "1.2.3")
    #expect(decoded == record && decoded.path == record.path)
    #expect(!String(decoding: record.encoded(), as: UTF8.self).contains("components"))
  }
}
