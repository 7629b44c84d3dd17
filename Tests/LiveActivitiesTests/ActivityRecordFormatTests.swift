import Foundation
import LiveActivities
import TestSupport
import Testing

/// The record codec: the fuzz seed reads, round-trips, and the checks refuse what readers must not trust.
@Suite(.runSlot(.minutes(10))) struct ActivityRecordFormatTests {
  static let seedPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../Fuzz/container-seeds/activity-record").standardizedFileURL.path

  @Test func seedRoundTrips() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())  // the parser byte
    let record = try ActivityRecordFormat.decode(bytes)
    #expect(record.attributesType == "ScoreboardAttributes")
    #expect(try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record)) == record)
    #expect(ActivityRules.effective(record, now: record.startDate + 60).state == .ended)
    #expect(ActivityRules.effective(record, now: record.dismissalDate!).state == .dismissed)
  }

  @Test func refusesInconsistentRecords() throws {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: Self.seedPath)).dropFirst())
    var record = try ActivityRecordFormat.decode(bytes)
    record.lifecycle = .active  // an active record with an end
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    record = try ActivityRecordFormat.decode(bytes)
    record.id = "not-a-uuid"
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    record = try ActivityRecordFormat.decode(bytes)
    record.contentRevision = record.revision + 1
    #expect(throws: ActivityRecordFormat.Invalid.self) {
      try ActivityRecordFormat.decode(ActivityRecordFormat.encode(record))
    }
    #expect(throws: ActivityRecordFormat.Invalid.self) { try ActivityRecordFormat.decode([]) }
    #expect(throws: ActivityRecordFormat.Invalid.self) { try ActivityRecordFormat.decode(Array(bytes.prefix(40))) }
  }
}
