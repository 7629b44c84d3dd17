import BackgroundDownloads
import Foundation
import GroupContainerCore
import PropertyList
import SystemLayer
import TestSupport
import Testing

/// Batch event files (event format 3, EventFormatHandshake; issue #37 item 1): the events of the downloads one group
/// commit finished go in one file per session, which the session removes once it handled every event in it.
///
/// Mutants these tests catch (each made once by hand, seen failing, restored):
/// - a batch file removed at the first event handled from it (`HandedOutEventFiles.take` returning every file):
///   `aBatchFileStaysUntilEveryEventInItIsHandled` — the second process gets none of the other downloads' events;
/// - the agent ignoring the reader's format (`eventFormat(for:)` answering 3 whatever was announced):
///   `theFormAFollowsTheAnnouncedFormat` — a batch file for a reader of format 2, which would remove it as damaged.
@Suite(.runSlot(.minutes(3)))
struct EventBatchTests {
  /// `count` finished downloads of session `s`, their requests written (a session finds its tasks by them).
  static func finals(_ store: DownloadStore, count: Int) throws -> [CommitRecord.Final] {
    try store.makeSessionDirectories("s")
    let now = Int64(Date().timeIntervalSince1970 * 1e9)
    return try (0..<count).map { i in
      let id = DownloadRecordFormat.newTaskID()
      try store.create(
        TaskRequest(
          id: id, session: "s", taskIdentifier: i + 1, url: "http://127.0.0.1:9/\(i)", destination: "Downloads/\(i)",
          created: now))
      let finished = now + Int64(i)
      let status = TaskStatus(
        phase: .completed, resume: ResumeState(receivedBytes: 10, expectedBytes: 10), attempts: 1, httpStatus: 200,
        eventsQueued: true, updated: finished, finished: finished)
      let base = UInt64(finished) * 2
      return CommitRecord.Final(
        id: id, session: "s", status: status,
        events: [
          EventRecord(sequence: base, taskID: id, kind: .finished, location: "Downloads/\(i)", httpStatus: 200),
          EventRecord(sequence: base + 1, taskID: id, kind: .completed, httpStatus: 200),
        ])
    }
  }

  /// Holds session `s`'s attach lock, announcing event format `version`, while `body` runs (as an attached process
  /// would: the agent decides the form from it).
  static func attached(_ store: DownloadStore, version: Int, _ body: () throws -> Void) throws {
    let lock = try store.openLock(DownloadStore.attachLockPath("s"))
    let got = try lock.lock(.exclusive, nonBlocking: true)
    #expect(got)
    try lock.truncate(to: 0)
    try lock.writeAll(EventFormatHandshake.announcement(pid: CurrentProcess.id, readVersion: version))
    var failure: (any Error)?
    do { try body() } catch { failure = error }
    try? lock.truncate(to: 0)  // a clean detach withdraws the announcement
    lock.unlock()
    lock.close()
    if let failure { throw failure }
  }

  static func eventFiles(_ store: DownloadStore) -> [String] {
    store.names(in: DownloadStore.sessionPath("s") + "/events").filter { $0.hasSuffix(".event") }.sorted()
  }

  @Test("a batch file stays until every event in it is handled: a process gone halfway leaves the rest to the next")
  func aBatchFileStaysUntilEveryEventInItIsHandled() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let store = try DownloadStore(container: container)
    let finals = try Self.finals(store, count: 3)
    let ids = finals.map(\.id)
    try Self.attached(store, version: 3) { try store.materialize(finals) }
    let files = Self.eventFiles(store)
    #expect(files == [finals[0].events[0].batchFileName], "\(files)")
    #expect(store.tasksWithQueuedEvents("s") == Set(ids))
    // A process handles the first download's two events and goes.
    let first = try Child(.dlAttach(session: "s", count: 2), root: root.path, group: container.identifier)
    #expect(await first.exit(timeout: BackgroundSessionTests.childLimit) == 0)
    #expect(
      first.output.filter { $0.hasPrefix("event ") }.map { $0.split(separator: " ").prefix(3).joined(separator: " ") }
        == ["event finished \(ids[0])", "event completed \(ids[0])"])
    // The file holds the others' events still: it stays, and retention keeps all three tasks (it cannot tell them
    // apart without the session's memory).
    #expect(Self.eventFiles(store) == files)
    #expect(store.tasksWithQueuedEvents("s") == Set(ids))
    // The next process gets them all (the first download's again: at least once, same ids), then the file is gone.
    let next = try Child(.dlAttach(session: "s", count: 0), root: root.path, group: container.identifier)
    #expect(await next.exit(timeout: BackgroundSessionTests.childLimit) == 0)
    let events = next.output.filter { $0.hasPrefix("event ") }
    for id in ids {
      #expect(events.contains { $0.hasPrefix("event finished \(id) \(id).finished ") }, "\(events)")
      #expect(events.contains("event completed \(id) \(id).completed -"), "\(events)")
    }
    #expect(next.output.contains { $0.hasPrefix("event didFinishEvents") }, "\(next.output)")
    #expect(Self.eventFiles(store).isEmpty)
    #expect(store.tasksWithQueuedEvents("s").isEmpty)
  }

  @Test("the agent writes the form the attached reader announced: format 3 a batch, 2 a file per download, 1 per event")
  func theFormAFollowsTheAnnouncedFormat() throws {
    let root = try TestRoot()
    let container = try root.container()
    let store = try DownloadStore(container: container)
    for (version, expected) in [(3, 1), (2, 3), (1, 6)] {
      let finals = try Self.finals(store, count: 3)
      try Self.attached(store, version: version) { try store.materialize(finals) }
      let files = Self.eventFiles(store)
      #expect(files.count == expected, "format \(version): \(files)")
      #expect(files.contains { EventRecord.isBatchFileName($0) } == (version >= 3), "format \(version): \(files)")
      // Every event is there, in order, whatever the form.
      let read = store.queuedEvents("s")
      #expect(read.map(\.id) == finals.flatMap { $0.events.map(\.id) })
      for file in files { try container.directory().removeFile(DownloadStore.sessionPath("s") + "/events/" + file) }
    }
    // Nobody attached: a file per event (the app may come back at any version); a replay never batches.
    let finals = try Self.finals(store, count: 2)
    try store.materialize(finals)
    #expect(Self.eventFiles(store).count == 4)
    for file in Self.eventFiles(store) {
      try container.directory().removeFile(DownloadStore.sessionPath("s") + "/events/" + file)
    }
    try Self.attached(store, version: 3) { try store.materialize(finals, batching: false) }
    #expect(Self.eventFiles(store).count == 2)
  }

  @Test("a batch file's records: in sequence order, split within a record's limits, checked when read")
  func batchRecords() throws {
    let id = { DownloadRecordFormat.newTaskID() }
    func download(_ sequence: UInt64, location: String = "Downloads/x") -> [EventRecord] {
      let task = id()
      return [
        EventRecord(sequence: sequence, taskID: task, kind: .finished, location: location, httpStatus: 200),
        EventRecord(sequence: sequence + 1, taskID: task, kind: .completed, httpStatus: 200),
      ]
    }
    let failed = [EventRecord(sequence: 30, taskID: id(), kind: .completed, error: .httpStatus(404), httpStatus: 404)]
    // Reached the commit out of order: stored in sequence order.
    let perTask = [download(20), download(10), failed]
    let files = DownloadRecordFormat.eventFiles(batch: perTask, format: 3)
    #expect(files.count == 1)
    #expect(files[0].name == perTask[1][0].batchFileName)
    let read = try DownloadRecordFormat.decodeEvents(files[0].bytes)
    #expect(read.map(\.sequence) == [10, 11, 20, 21, 30])
    #expect(read.allSatisfy { $0.file == files[0].name })
    #expect(read[4].error == .httpStatus(404))
    // A reader of format 2 sees the first download alone (why the handshake keeps batches from it).
    #expect(try DownloadRecordFormat.decodeEvents(files[0].bytes, batches: false).map(\.sequence) == [10, 11])
    // One download alone keeps its own file's name and form.
    let single = DownloadRecordFormat.eventFiles(batch: [download(40)], format: 3)
    #expect(single.count == 1 && !EventRecord.isBatchFileName(single[0].name))
    // Many downloads with long destinations: several files, each a valid record.
    let long = "Downloads/" + String(repeating: "d", count: 1000)
    let many = (0..<128).map { download(UInt64(100 + 2 * $0), location: long) }
    let split = DownloadRecordFormat.eventFiles(batch: many, format: 3)
    #expect(split.count > 1)
    var all: [EventRecord] = []
    for file in split {
      #expect(file.bytes.count <= DownloadRecordFormat.maxRecordBytes)
      let events = try DownloadRecordFormat.decodeEvents(file.bytes)
      #expect(events[0].file == file.name)
      all += events
    }
    #expect(all.count == 256 && zip(all, all.dropFirst()).allSatisfy { $0.sequence < $1.sequence })
    // Damage is refused: events out of order, an empty or foreign `more`.
    var dictionary = try #require(try PropertyListValue(bytes: files[0].bytes).dictionaryValue)
    let more = try #require(dictionary["more"]?.arrayValue)
    for bad: PropertyListValue in [.array(more.reversed()), .array([]), .string("x"), .array([.integer(1)])] {
      dictionary["more"] = bad
      let bytes = try BinaryPropertyListWriter.write(.dictionary(dictionary))
      #expect(throws: DownloadRecordFormat.Invalid.self) { _ = try DownloadRecordFormat.decodeEvents(bytes) }
    }
  }
}
