import FileCoordination
import Foundation
import GroupContainerCore
import LiveActivities
import ScoreboardKit
import SharedDefaults
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The update's write path: one commit of the records' suite per update (none for an ignored one), seen by
/// observers once each, in order; the read-modify-write shared by threads of a process; old record files imported.
///
/// Mutants these tests catch (each made once by hand, seen failing, restored):
/// - The record written twice per update (a set, then the read-modify-write): `eachUpdateByAnotherProcessIsOneCommit`
///   sees two changes per like.
/// - An ignored update committing the record as it was (`modify` setting it when `body` returns false): the same
///   test sees a change after the dismissal.
/// - The old record files left unimported: `oldRecordFilesAreImportedOnce` lists no activity.
/// - The record this process wrote last reused by its id alone, after another process wrote it:
///   `anotherProcesssWriteBetweenTwoUpdatesIsRead` loses the like.
@Suite(.runSlot(.minutes(3))) struct ActivityWritePathTests {
  /// Five likes by other processes, one at a time, then a dismissal and an ignored update: the suite's changes of the
  /// record are exactly one per like, in order, and one for the dismissal — none for the ignored update (a marker key
  /// set after it arrives next).
  @Test func eachUpdateByAnotherProcessIsOneCommit() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let store = try ActivityStore(container: f.container)
    let marker = "marker"
    let (changes, sink) = AsyncStream<DefaultsChange>.makeStream()
    let observation = store.suite.observe([activity.id, marker]) { sink.yield($0) }
    defer { observation.cancel() }
    var iterator = changes.makeAsyncIterator()
    var seen: [String] = []
    func describe(_ change: DefaultsChange) -> String {
      if change.key == marker { return marker }
      guard let record = store.decode(change.newValue, id: change.key).record else { return "not a record" }
      guard case .object(let state) = record.contentState.value, case .integer(let likes)? = state["homeLikes"] else {
        return "no likes"
      }
      return "r\(record.revision) likes \(likes) \(record.lifecycle)"
    }
    for _ in 0..<5 {
      let liker = try f.helper(.actLike(id: activity.id, count: 1, side: .home))
      #expect(await liker.exit() == 0)
      // The like's change, before the next process starts.
      if let change = await iterator.next() { seen.append(describe(change)) }
    }
    try await activity.dismiss()
    try await activity.update(score(9, 9))  // ignored: dismissed
    try store.suite.set(1, forKey: marker)  // queued behind any change the ignored update made
    while let change = await iterator.next() {
      seen.append(describe(change))
      if change.key == marker { break }
    }
    #expect(
      seen == [
        "r2 likes 1 active", "r3 likes 2 active", "r4 likes 3 active", "r5 likes 4 active", "r6 likes 5 active",
        "r7 likes 5 dismissed", marker,
      ])
    #expect(activity.content.state.homeLikes == 5)
  }

  /// This process keeps the record it wrote last and skips reading it again while the suite holds those bytes: a
  /// like by another process between two updates of this one must be read, not written over with the kept record.
  @Test func anotherProcesssWriteBetweenTwoUpdatesIsRead() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try await activity.update { $0.state.homeScore = 1 }  // the record this process keeps
    let liker = try f.helper(.actLike(id: activity.id, count: 1, side: .away))
    #expect(await liker.exit() == 0)
    try await activity.update { $0.state.homeScore = 2 }
    let record = try #require(activity.store.read(activity.id).record)
    #expect(record.revision == 4)
    #expect(record.writerPID == CurrentProcess.id)
    #expect(activity.content.state.awayLikes == 1)
    #expect(activity.content.state.homeScore == 2)
  }

  @Test func threadsOfOneProcessLoseNoUpdate() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    let store = activity.store
    // Real threads (not the two cooperative ones), all on this one store and its one lock descriptor.
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
      Thread.detachNewThread {
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
          for _ in 0..<25 {
            _ = try? store.modify(activity.id) { (record, _) throws(ActivityError) in
              guard case .object(var state) = record.contentState.value, case .integer(let likes)? = state["homeLikes"]
              else { return false }
              state["homeLikes"] = .integer(likes + 1)
              record.contentState = JSONText(.object(state))!
              return true
            }
          }
        }
        done.resume()
      }
    }
    #expect(activity.content.state.homeLikes == 100)
  }

  /// A write made outside the framework: another tool (Python's plistlib) edits the record in the suite's plist,
  /// bumping its revisions as a writer does; the suite applies the edit and observers see the new content.
  @Test func anEditOfTheSuitesPlistByAnotherToolIsSeen() async throws {
    let f = try ActivityFixture()
    let activity = try f.request()
    try activity.store.suite.synchronize()  // the plist current
    var contents = activity.contentUpdates.makeAsyncIterator()
    let path = f.container.preferencesURL.path + "/" + activity.store.suite.suiteName + ".plist"
    let script = """
      import json, plistlib, sys
      path, id = sys.argv[1], sys.argv[2]
      d = plistlib.load(open(path, 'rb'))
      r = json.loads(d[id])
      r['contentState']['homeScore'] = 7
      r['revision'] += 1
      r['contentRevision'] = r['revision']
      d[id] = (json.dumps(r, sort_keys=True, separators=(',', ':')) + '\\n').encode()
      plistlib.dump(d, open(path, 'wb'), fmt=plistlib.FMT_XML)
      """
    let run = try await runToEnd("/usr/bin/env", ["python3", "-c", script, path, activity.id])
    #expect(run.status == 0, "\(run.errors)")
    #expect(await contents.next()?.state.homeScore == 7)
    #expect(activity.content.state.homeScore == 7)
  }

  /// A container written by the version that kept one file per activity: its records are imported into the suite
  /// when a process first opens the activities, and their files removed.
  @Test func oldRecordFilesAreImportedOnce() async throws {
    let root = try TestRoot()
    let container = try root.container("group.com.example.old-records")
    let directory = container.path + "/.coordination/activities"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let record = ActivityRecord(
      id: UUID().uuidString, attributesType: "ScoreboardAttributes",
      attributes: JSONText(.object(["homeTeam": .string("Lyon"), "awayTeam": .string("Nantes")]))!,
      contentState: JSONText(
        .object([
          "homeScore": .integer(2), "awayScore": .integer(1), "homeLikes": .integer(0), "awayLikes": .integer(0),
          "isFinal": .bool(false),
        ]))!, staleDate: nil, relevanceScore: 0, startDate: Date().timeIntervalSince1970, pushType: nil, writerPID: 1)
    let file = directory + "/" + record.id + ".activity"
    try Data(ActivityRecordFormat.encode(record)).write(to: URL(fileURLWithPath: file))
    let listed = try Activity<ScoreboardAttributes>.activities(in: container)
    #expect(listed.map(\.id) == [record.id])
    #expect(listed.first?.content.state.homeScore == 2)
    #expect(!FileManager.default.fileExists(atPath: file))
    // In the suite from now on: another process reads it.
    let state = try Child(.actState(id: record.id), root: root.path, group: container.identifier)
    #expect(await state.line { $0 == "state active" } != nil)
  }
}
