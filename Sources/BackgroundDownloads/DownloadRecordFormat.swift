import FileCoordination
import Foundation
import GroupContainerCore
import PropertyList
import SystemLayer
import SystemPackage

// The format of every file a download leaves in the container (binary plists, one rule in one file).
//
// Each file has ONE writer, so no file needs a lock for read-modify-write:
// - `<id>.task`    the request, written once by the session that created the task;
// - `<id>.control` what sessions ask of a running task (suspend, resume, cancel, priority), by any session;
// - `<id>.status`  what the agent did (state, bytes, validators, error), only by the agent (a singleton by flock);
// - `<seq>-<id>-<kind>.event`  a queued event, written by the agent, removed by the session that handled it; a
//   finished download's `finished` event holds its `completed` one too (`completion`: one file per download) when
//   the session's attached process reads that form (EventFormatHandshake).
// Every file is written by the package's atomic replace, so a reader sees a whole old or a whole new record.
// Every field read back is checked: a record from another user of a shared container is untrusted input.

/// Where a download stands between attempts: what the partial file holds and which entity it is part of.
package struct ResumeState: Sendable, Equatable {
  /// Bytes in the partial file that belong to the entity (the next request asks for `bytes=<receivedBytes>-`).
  package var receivedBytes: Int64 = 0
  /// The entity's whole length, when the server told it.
  package var expectedBytes: Int64?
  /// The entity's strong ETag (weak ones cannot validate a range, RFC 9110 §13.1.5).
  package var entityTag: String?
  /// The entity's Last-Modified, as the server sent it (an HTTP-date).
  package var lastModified: String?
  /// Bytes known to be on disk (fsynced); after a reboot (`bootID` changed) only these are trusted.
  package var durableBytes: Int64 = 0
  /// The boot whose page cache holds `receivedBytes` (`/proc/sys/kernel/random/boot_id`).
  package var bootID: String?

  package init(
    receivedBytes: Int64 = 0, expectedBytes: Int64? = nil, entityTag: String? = nil, lastModified: String? = nil,
    durableBytes: Int64 = 0, bootID: String? = nil
  ) {
    self.receivedBytes = receivedBytes
    self.expectedBytes = expectedBytes
    self.entityTag = entityTag
    self.lastModified = lastModified
    self.durableBytes = durableBytes
    self.bootID = bootID
  }

  /// The validator for `If-Range`: the strong ETag, else Last-Modified, else none (then a range cannot be trusted
  /// and the download restarts from zero).
  package var ifRangeValidator: String? { entityTag ?? lastModified }
}

/// `<id>.task`: the request, as the creating session wrote it.
package struct TaskRequest: Sendable, Equatable {
  package var id: String
  package var session: String
  /// Apple's `taskIdentifier`: unique within the session.
  package var taskIdentifier: Int
  package var url: String
  /// Container-relative path of the destination file.
  package var destination: String
  /// Nanoseconds since 1970 at creation.
  package var created: Int64
  /// Lower-case hex SHA-256 the file must have, if the caller gave one.
  package var expectedSHA256: String?
  /// The length the file must have, if the caller gave one.
  package var expectedLength: Int64?
  package var priority: Double
  /// The session's `httpMaximumConnectionsPerHost` when the task was made.
  package var connectionsPerHost: Int

  package init(
    id: String, session: String, taskIdentifier: Int, url: String, destination: String, created: Int64,
    expectedSHA256: String? = nil, expectedLength: Int64? = nil, priority: Double = 0.5, connectionsPerHost: Int = 6
  ) {
    self.connectionsPerHost = connectionsPerHost
    self.id = id
    self.session = session
    self.taskIdentifier = taskIdentifier
    self.url = url
    self.destination = destination
    self.created = created
    self.expectedSHA256 = expectedSHA256
    self.expectedLength = expectedLength
    self.priority = priority
  }
}

/// `<id>.control`: what sessions ask; the agent applies a generation once.
package struct TaskControl: Sendable, Equatable {
  package enum Desired: String, Sendable { case run, suspend, cancel }
  package var desired: Desired
  package var priority: Double
  /// Grows with every request; the agent applies each generation once.
  package var generation: UInt64

  package init(desired: Desired, priority: Double, generation: UInt64) {
    self.desired = desired
    self.priority = priority
    self.generation = generation
  }
}

/// Where a task is, as the agent persisted it.
package enum TaskPhase: String, Sendable, CaseIterable {
  /// Queued: no attempt yet, or waiting for a connection slot or a retry.
  case waiting
  case running
  case suspended
  /// Finished and published at the destination.
  case completed
  case failed
  case cancelled

  package var isFinal: Bool { self == .completed || self == .failed || self == .cancelled }
}

/// `<id>.status`: what the agent did. Absent until the agent first picks the task up.
package struct TaskStatus: Sendable, Equatable {
  package var phase: TaskPhase
  package var resume: ResumeState
  /// Attempts made (a resumed one counts).
  package var attempts: Int
  /// The last HTTP status received.
  package var httpStatus: Int?
  /// Why the task failed (phase `.failed` or `.cancelled`).
  package var error: DownloadError?
  /// The control generation last applied.
  package var appliedControl: UInt64
  /// Whether this task's final events were written to its session's queue.
  package var eventsQueued: Bool
  /// Nanoseconds since 1970: last write of this status, and the end of the task.
  package var updated: Int64
  package var finished: Int64?

  package init(
    phase: TaskPhase, resume: ResumeState = ResumeState(), attempts: Int = 0, httpStatus: Int? = nil,
    error: DownloadError? = nil, appliedControl: UInt64 = 0, eventsQueued: Bool = false, updated: Int64 = 0,
    finished: Int64? = nil
  ) {
    self.phase = phase
    self.resume = resume
    self.attempts = attempts
    self.httpStatus = httpStatus
    self.error = error
    self.appliedControl = appliedControl
    self.eventsQueued = eventsQueued
    self.updated = updated
    self.finished = finished
  }
}

/// A queued event: what the agent tells a session about one of its tasks.
package struct EventRecord: Sendable, Equatable {
  package enum Kind: String, Sendable, CaseIterable {
    /// Apple's `urlSession(_:downloadTask:didFinishDownloadingTo:)`.
    case finished
    /// Apple's `urlSession(_:task:didCompleteWithError:)`.
    case completed
  }
  /// The sequence number: events of a session are delivered in this order.
  package var sequence: UInt64
  package var taskID: String
  package var kind: Kind
  /// `.finished`: where the file is (container-relative).
  package var location: String?
  /// `.completed`: nil on success.
  package var error: DownloadError?
  package var httpStatus: Int?
  /// Read back only: the file the event was read from when that is not `fileName` — a `completed` event from its
  /// download's `finished` event file, any event from a batch file (`DownloadRecordFormat.eventFiles(batch:format:)`).
  package var storedIn: String?

  package init(
    sequence: UInt64, taskID: String, kind: Kind, location: String? = nil, error: DownloadError? = nil,
    httpStatus: Int? = nil
  ) {
    self.sequence = sequence
    self.taskID = taskID
    self.kind = kind
    self.location = location
    self.error = error
    self.httpStatus = httpStatus
  }

  /// The file the event is queued in.
  package var file: String { storedIn ?? fileName }

  /// The event's file name: sorting names sorts events (`<20-digit sequence>-<task id>-<kind>.event`).
  package var fileName: String {
    DownloadRecordFormat.sequenceName(sequence) + "-\(taskID)-\(kind.rawValue).event"
  }

  /// The name of a batch file whose first event this is (`<20-digit sequence>-<task id>-batch.event`).
  package var batchFileName: String { DownloadRecordFormat.sequenceName(sequence) + "-\(taskID)-batch.event" }

  /// Whether an event file's name is a batch file's.
  package static func isBatchFileName(_ name: String) -> Bool { name.hasSuffix("-batch.event") }

  /// A stable id: delivering the same event twice gives the same id.
  package var id: String { "\(taskID).\(kind.rawValue)" }
}

/// The registration of the app to start when a session has events and no process attached (iOS relaunching the app).
package struct RelaunchRecord: Sendable, Equatable {
  package var executable: String
  package var arguments: [String]

  package init(executable: String, arguments: [String]) {
    self.executable = executable
    self.arguments = arguments
  }
}

/// Encoding and checked decoding of the records above.
package enum DownloadRecordFormat {
  /// Records are small; anything larger is damage or an attack.
  package static let maxRecordBytes = 64 << 10
  static let limits = PropertyListLimits(maxBytes: maxRecordBytes, maxDepth: 8, maxObjects: 4096)
  /// URLs are limited as `open(_:)` limits them.
  package static let maxURLBytes = 2048

  /// A sequence as it starts a file name (events, commits): 20 digits, zero-padded, so sorting names sorts sequences.
  package static func sequenceName(_ sequence: UInt64) -> String {
    let digits = String(sequence)
    return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
  }

  /// A rule a record broke.
  package struct Invalid: Error, CustomStringConvertible, Sendable {
    package var reason: String
    package var description: String { reason }
    init(_ reason: String) { self.reason = reason }
  }

  // MARK: Task ids and session identifiers

  /// Whether `s` is exactly `count` lower-case hex digits (task ids: 32; SHA-256 digests: 64).
  package static func isLowerHex(_ s: some StringProtocol, count: Int) -> Bool {
    s.utf8.count == count && s.utf8.allSatisfy { HexDigits.lowercaseValue($0) != nil }
  }

  /// Task ids are 32 lower-case hex digits.
  package static func isTaskID(_ s: some StringProtocol) -> Bool { isLowerHex(s, count: 32) }

  package static func newTaskID() -> String {
    var generator = SystemRandomNumberGenerator()
    let a = generator.next() as UInt64
    let b = generator.next() as UInt64
    return hex64(a) + hex64(b)
  }

  private static func hex64(_ v: UInt64) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: 16 - s.count) + s
  }

  /// Session identifiers name directories: letters, digits, '.', '_' and '-', 1 to 128 bytes, not starting with '.'.
  package static func validate(sessionIdentifier id: String) throws(DownloadError) {
    guard !id.isEmpty, id.utf8.count <= 128 else {
      throw .invalidSessionIdentifier(id, rule: "it must have 1 to 128 bytes")
    }
    guard id.utf8.first != UInt8(ascii: "."),
      id.utf8.allSatisfy({ b in
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F
          || b == 0x2D
      })
    else {
      throw .invalidSessionIdentifier(
        id, rule: "use letters, digits, '.', '_' and '-' only, not starting with '.' (e.g. com.example.app.downloads)")
    }
  }

  // MARK: Encoding

  package static func encode(_ r: TaskRequest) -> [UInt8] {
    var d: [String: PropertyListValue] = [
      "v": 1, "id": .string(r.id), "session": .string(r.session), "taskIdentifier": int(Int64(r.taskIdentifier)),
      "url": .string(r.url), "destination": .string(r.destination), "created": int(r.created),
      "priority": .real(r.priority), "connectionsPerHost": int(Int64(r.connectionsPerHost)),
    ]
    if let s = r.expectedSHA256 { d["sha256"] = .string(s) }
    if let l = r.expectedLength { d["expectedLength"] = int(l) }
    return bytes(d)
  }

  package static func encode(_ c: TaskControl) -> [UInt8] {
    bytes([
      "v": 1, "desired": .string(c.desired.rawValue), "priority": .real(c.priority),
      "generation": .integer(PropertyListInteger(c.generation)),
    ])
  }

  package static func encode(_ s: TaskStatus) -> [UInt8] {
    var d: [String: PropertyListValue] = [
      "v": 1, "phase": .string(s.phase.rawValue), "resume": encode(s.resume), "attempts": int(Int64(s.attempts)),
      "appliedControl": .integer(PropertyListInteger(s.appliedControl)), "eventsQueued": .bool(s.eventsQueued),
      "updated": int(s.updated),
    ]
    if let h = s.httpStatus { d["httpStatus"] = int(Int64(h)) }
    if let e = s.error { d["error"] = encode(e) }
    if let f = s.finished { d["finished"] = int(f) }
    return bytes(d)
  }

  package static func encode(_ e: EventRecord) -> [UInt8] { bytes(fields(e)) }

  private static func fields(_ e: EventRecord) -> [String: PropertyListValue] {
    var d: [String: PropertyListValue] = [
      "v": 1, "sequence": .integer(PropertyListInteger(e.sequence)), "task": .string(e.taskID),
      "kind": .string(e.kind.rawValue),
    ]
    if let l = e.location { d["location"] = .string(l) }
    if let err = e.error { d["error"] = encode(err) }
    if let h = e.httpStatus { d["httpStatus"] = int(Int64(h)) }
    return d
  }

  /// The files that queue `events` (one task's, in order): a finished download's `finished` and `completed` events
  /// in one file, the `finished` one's, with the completion's sequence as `completion` (it has no error and the same
  /// HTTP status): one file created and removed per download instead of two (issue #37 item 1: creating files is
  /// most of the agent's time in a batch of small downloads). Other events get a file each.
  ///
  /// `combining`: whether the session's reader reads that form (EventFormatHandshake: an older session process
  /// reads such a file as the `finished` event alone and never delivers the task's `didCompleteWithError(nil)`).
  package static func eventFiles(
    _ events: [EventRecord], combining: Bool
  ) -> [(name: String, bytes: [UInt8])] {
    units(events, combining: combining).map { (name: $0[0].fileName, bytes: bytes(unitFields($0))) }
  }

  /// The files that queue the events of several tasks of one session (`perTask`: each task's, in order; the tasks
  /// in order), for a reader of event format `format` (EventFormatHandshake). Format 3: the events of many tasks in
  /// one *batch file* (`<first event's sequence>-<its task>-batch.event`): its first unit's fields, the others in
  /// `more` — one file created and removed per group commit and session instead of one per download. A batch file
  /// stays under `batchBudget` bytes and `batchUnits` units; a group of one unit gets that unit's own file. Below 3,
  /// `eventFiles(_:combining:)` for each task (format 2 combines).
  package static func eventFiles(
    batch perTask: [[EventRecord]], format: Int
  ) -> [(name: String, bytes: [UInt8])] {
    guard format >= 3 else { return perTask.flatMap { eventFiles($0, combining: format >= 2) } }
    var files: [(name: String, bytes: [UInt8])] = []
    var group: [[EventRecord]] = []
    var size = 0
    func flush() {
      guard let first = group.first else { return }
      if group.count == 1 {
        files.append((first[0].fileName, bytes(unitFields(first))))
      } else {
        var d = unitFields(first)
        d["more"] = .array(group.dropFirst().map { .dictionary(unitFields($0)) })
        files.append((first[0].batchFileName, bytes(d)))
      }
      group = []
      size = 0
    }
    // In sequence order, as the files' names order them: tasks finishing at once reach a commit in any order.
    for unit in perTask.flatMap({ units($0, combining: true) }).sorted(by: { $0[0].sequence < $1[0].sequence }) {
      // The unit's size alone, a bound on what it adds: the batch shares its keys' strings.
      let cost = bytes(unitFields(unit)).count
      if !group.isEmpty && (size + cost > batchBudget || group.count == batchUnits) { flush() }
      group.append(unit)
      size += cost
    }
    flush()
    return files
  }

  /// Most bytes (counted unit by unit) and units in one batch file: well within a record's `maxRecordBytes` and
  /// object limit, whatever the destinations' lengths.
  static let batchBudget = 32 << 10
  static let batchUnits = 64

  /// A task's events as stored: a finished download's two events as one unit (`combining`), others one each.
  private static func units(_ events: [EventRecord], combining: Bool) -> [[EventRecord]] {
    if combining, events.count == 2, events[0].kind == .finished, events[1].kind == .completed,
      events[0].taskID == events[1].taskID, events[1].error == nil, events[1].httpStatus == events[0].httpStatus,
      events[1].sequence > events[0].sequence
    {
      return [events]
    }
    return events.map { [$0] }
  }

  /// One unit's fields: its event's, with the completion's sequence as `completion` when it holds two.
  private static func unitFields(_ unit: [EventRecord]) -> [String: PropertyListValue] {
    var d = fields(unit[0])
    if unit.count == 2 { d["completion"] = .integer(PropertyListInteger(unit[1].sequence)) }
    return d
  }

  package static func encode(_ r: RelaunchRecord) -> [UInt8] {
    bytes(["v": 1, "executable": .string(r.executable), "arguments": .array(r.arguments.map { .string($0) })])
  }

  private static func encode(_ r: ResumeState) -> PropertyListValue {
    var d: [String: PropertyListValue] = ["received": int(r.receivedBytes), "durable": int(r.durableBytes)]
    if let v = r.expectedBytes { d["expected"] = int(v) }
    if let v = r.entityTag { d["etag"] = .string(v) }
    if let v = r.lastModified { d["lastModified"] = .string(v) }
    if let v = r.bootID { d["boot"] = .string(v) }
    return .dictionary(d)
  }

  /// Errors are stored as a code and their fields; unknown codes read back as `.corruptRecord`.
  private static func encode(_ e: DownloadError) -> PropertyListValue {
    func d(_ code: String, _ fields: [String: PropertyListValue] = [:]) -> PropertyListValue {
      var all = fields
      all["code"] = .string(code)
      all["text"] = .string(e.description)
      return .dictionary(all)
    }
    switch e.detail {
    case .unsupportedURL(let u): return d("unsupportedURL", ["a": .string(u)])
    case .invalidDestination(let p, let rule): return d("invalidDestination", ["a": .string(p), "b": .string(rule)])
    case .invalidSessionIdentifier(let i, let rule):
      return d("invalidSessionIdentifier", ["a": .string(i), "b": .string(rule)])
    case .sessionInUse(let i, let pid): return d("sessionInUse", ["a": .string(i), "n": int(Int64(pid))])
    case .unknownTask(let i): return d("unknownTask", ["a": .string(i)])
    case .httpStatus(let s): return d("httpStatus", ["n": int(Int64(s))])
    case .network(let r): return d("network", ["a": .string(r)])
    case .stalled(let s): return d("stalled", ["n": int(Int64(s))])
    case .lengthMismatch(let x, let y): return d("lengthMismatch", ["n": int(x), "m": int(y)])
    case .checksumMismatch(let x, let y): return d("checksumMismatch", ["a": .string(x), "b": .string(y)])
    case .diskFull(let p): return d("diskFull", ["a": .string(p)])
    case .protocolViolation(let r): return d("protocolViolation", ["a": .string(r)])
    case .cancelled: return d("cancelled")
    case .agentUnavailable(let r): return d("agentUnavailable", ["a": .string(r)])
    case .corruptRecord(let p, let r): return d("corruptRecord", ["a": .string(p), "b": .string(r)])
    case .system(let e):
      return d("system", ["a": .string(e.operation), "b": .string(e.path), "n": int(Int64(e.errno.rawValue))])
    case .container, .other: return d("other")
    }
  }

  private static func int(_ v: Int64) -> PropertyListValue { .integer(PropertyListInteger(v)) }

  private static func bytes(_ d: [String: PropertyListValue]) -> [UInt8] {
    // Our own records are far below every limit; a failure here is a bug, not input.
    (try? PropertyListValue.dictionary(d).encoded(as: .binary, limits: limits)) ?? []
  }

  // MARK: Checked decoding

  private struct Fields {
    let d: [String: PropertyListValue]
    init(_ bytes: [UInt8]) throws(Invalid) {
      guard bytes.count <= DownloadRecordFormat.maxRecordBytes else {
        throw Invalid("\(bytes.count) bytes, more than a record's \(DownloadRecordFormat.maxRecordBytes)")
      }
      let value: PropertyListValue
      do { value = try PropertyListValue(bytes: bytes, limits: DownloadRecordFormat.limits) } catch {
        throw Invalid("not a property list: \(error)")
      }
      guard let d = value.dictionaryValue else { throw Invalid("not a dictionary") }
      self.d = d
      guard d["v"]?.intValue == 1 else { throw Invalid("unknown version \(d["v"].map { "\($0)" } ?? "none")") }
    }
    init(dictionary: [String: PropertyListValue]) { d = dictionary }

    func string(_ k: String, max: Int = 4096) throws(Invalid) -> String {
      guard let s = d[k]?.stringValue else { throw Invalid("'\(k)' missing or not a string") }
      guard s.utf8.count <= max else { throw Invalid("'\(k)' longer than \(max) bytes") }
      return s
    }
    func optionalString(_ k: String, max: Int = 4096) throws(Invalid) -> String? {
      guard d[k] != nil else { return nil }
      return try string(k, max: max)
    }
    func int64(_ k: String, min: Int64 = 0) throws(Invalid) -> Int64 {
      guard let v = d[k]?.int64Value, v >= min else { throw Invalid("'\(k)' missing, not an integer or below \(min)") }
      return v
    }
    func optionalInt64(_ k: String, min: Int64 = 0) throws(Invalid) -> Int64? {
      guard d[k] != nil else { return nil }
      return try int64(k, min: min)
    }
    func uint64(_ k: String) throws(Invalid) -> UInt64 {
      guard let v = d[k]?.uint64Value else { throw Invalid("'\(k)' missing or not an unsigned integer") }
      return v
    }
    func real(_ k: String) throws(Invalid) -> Double {
      guard let v = d[k]?.realValue, v.isFinite else { throw Invalid("'\(k)' missing or not a finite number") }
      return v
    }
    func bool(_ k: String) throws(Invalid) -> Bool {
      guard let v = d[k]?.boolValue else { throw Invalid("'\(k)' missing or not a Boolean") }
      return v
    }
  }

  package static func decodeRequest(_ bytes: [UInt8]) throws(Invalid) -> TaskRequest {
    let f = try Fields(bytes)
    let id = try f.string("id", max: 32)
    guard isTaskID(id) else { throw Invalid("'id' is not 32 hex digits") }
    let session = try f.string("session", max: 128)
    do { try validate(sessionIdentifier: session) } catch { throw Invalid("\(error)") }
    let url = try f.string("url", max: maxURLBytes)
    let destination = try f.string("destination", max: ContainerPath.maxPathBytes)
    guard let path = try? ContainerPath(destination), !path.isRoot else {
      throw Invalid("'destination' is not a file path inside the container")
    }
    let taskIdentifier = try f.int64("taskIdentifier")
    guard taskIdentifier <= Int64(Int32.max) else { throw Invalid("'taskIdentifier' out of range") }
    let sha = try f.optionalString("sha256", max: 64)
    if let sha, !isLowerHex(sha, count: 64) {
      throw Invalid("'sha256' is not 64 lower-case hex digits")
    }
    let priority = try f.real("priority")
    guard (0...1).contains(priority) else { throw Invalid("'priority' outside 0...1") }
    let perHost = try f.int64("connectionsPerHost")
    guard (1...1024).contains(perHost) else { throw Invalid("'connectionsPerHost' outside 1...1024") }
    return TaskRequest(
      id: id, session: session, taskIdentifier: Int(taskIdentifier), url: url, destination: destination,
      created: try f.int64("created"), expectedSHA256: sha, expectedLength: try f.optionalInt64("expectedLength"),
      priority: priority, connectionsPerHost: Int(perHost))
  }

  package static func decodeControl(_ bytes: [UInt8]) throws(Invalid) -> TaskControl {
    let f = try Fields(bytes)
    guard let desired = TaskControl.Desired(rawValue: try f.string("desired", max: 16)) else {
      throw Invalid("'desired' is not run, suspend or cancel")
    }
    let priority = try f.real("priority")
    guard (0...1).contains(priority) else { throw Invalid("'priority' outside 0...1") }
    return TaskControl(desired: desired, priority: priority, generation: try f.uint64("generation"))
  }

  package static func decodeStatus(_ bytes: [UInt8]) throws(Invalid) -> TaskStatus {
    let f = try Fields(bytes)
    guard let phase = TaskPhase(rawValue: try f.string("phase", max: 16)) else { throw Invalid("unknown 'phase'") }
    guard let r = f.d["resume"]?.dictionaryValue else { throw Invalid("'resume' missing") }
    let resume = try decodeResume(Fields(dictionary: r))
    let attempts = try f.int64("attempts")
    let http = try f.optionalInt64("httpStatus")
    guard http.map({ (100...999).contains($0) }) ?? true else { throw Invalid("'httpStatus' outside 100...999") }
    return TaskStatus(
      phase: phase, resume: resume, attempts: Int(clamping: attempts), httpStatus: http.map { Int($0) },
      error: try f.d["error"].map { v throws(Invalid) in try decodeError(v) },
      appliedControl: try f.uint64("appliedControl"),
      eventsQueued: try f.bool("eventsQueued"), updated: try f.int64("updated"),
      finished: try f.optionalInt64("finished"))
  }

  package static func decodeEvent(_ bytes: [UInt8]) throws(Invalid) -> EventRecord {
    try decodeEvent(Fields(bytes))
  }

  /// The events of one event file: one, a finished download's `finished` and `completed`, or a batch file's
  /// (`eventFiles`), in order. `batches`: false reads a batch file's first unit alone, as a reader of format 2 did.
  package static func decodeEvents(_ bytes: [UInt8], batches: Bool = true) throws(Invalid) -> [EventRecord] {
    let f = try Fields(bytes)
    var events = try decodeUnit(f)
    guard batches, let value = f.d["more"] else { return events }
    guard let more = value.arrayValue, !more.isEmpty, more.count < batchUnits else {
      throw Invalid("'more' not an array of 1 to \(batchUnits - 1) events")
    }
    for element in more {
      guard let d = element.dictionaryValue else { throw Invalid("an event in 'more' is not a dictionary") }
      let unit = try decodeUnit(Fields(dictionary: d))
      guard unit[0].sequence > events[events.count - 1].sequence else {
        throw Invalid("the events of a batch are not in increasing sequence")
      }
      events += unit
    }
    let name = events[0].batchFileName
    for i in events.indices { events[i].storedIn = name }
    return events
  }

  /// One unit: an event, or a `finished` event and the completion its `completion` names.
  private static func decodeUnit(_ f: Fields) throws(Invalid) -> [EventRecord] {
    let event = try decodeEvent(f)
    guard let value = f.d["completion"] else { return [event] }
    guard event.kind == .finished else { throw Invalid("'completion' in an event other than 'finished'") }
    guard let sequence = value.uint64Value, sequence > event.sequence else {
      throw Invalid("'completion' not an unsigned integer above 'sequence'")
    }
    var completion = EventRecord(
      sequence: sequence, taskID: event.taskID, kind: .completed, httpStatus: event.httpStatus)
    completion.storedIn = event.fileName
    return [event, completion]
  }

  private static func decodeEvent(_ f: Fields) throws(Invalid) -> EventRecord {
    let task = try f.string("task", max: 32)
    guard isTaskID(task) else { throw Invalid("'task' is not 32 hex digits") }
    guard let kind = EventRecord.Kind(rawValue: try f.string("kind", max: 16)) else { throw Invalid("unknown 'kind'") }
    let http = try f.optionalInt64("httpStatus")
    guard http.map({ (100...999).contains($0) }) ?? true else { throw Invalid("'httpStatus' outside 100...999") }
    return EventRecord(
      sequence: try f.uint64("sequence"), taskID: task, kind: kind,
      location: try f.optionalString("location", max: ContainerPath.maxPathBytes),
      error: try f.d["error"].map { v throws(Invalid) in try decodeError(v) }, httpStatus: http.map { Int($0) })
  }

  package static func decodeRelaunch(_ bytes: [UInt8]) throws(Invalid) -> RelaunchRecord {
    let f = try Fields(bytes)
    let executable = try f.string("executable", max: 4096)
    guard executable.hasPrefix("/") else { throw Invalid("'executable' is not an absolute path") }
    guard let args = f.d["arguments"]?.arrayValue, args.count <= 64 else {
      throw Invalid("'arguments' missing or more than 64")
    }
    var arguments: [String] = []
    for a in args {
      guard let s = a.stringValue, s.utf8.count <= 4096 else { throw Invalid("an argument is not a string") }
      arguments.append(s)
    }
    return RelaunchRecord(executable: executable, arguments: arguments)
  }

  private static func decodeResume(_ f: Fields) throws(Invalid) -> ResumeState {
    let received = try f.int64("received")
    let expected = try f.optionalInt64("expected")
    if let expected, received > expected { throw Invalid("more bytes received than the entity has") }
    return ResumeState(
      receivedBytes: received, expectedBytes: expected, entityTag: try f.optionalString("etag", max: 1024),
      lastModified: try f.optionalString("lastModified", max: 128), durableBytes: try f.int64("durable"),
      bootID: try f.optionalString("boot", max: 64))
  }

  private static func decodeError(_ v: PropertyListValue) throws(Invalid) -> DownloadError {
    guard let d = v.dictionaryValue else { throw Invalid("'error' is not a dictionary") }
    let f = Fields(dictionary: d)
    let code = try f.string("code", max: 64)
    switch code {
    case "unsupportedURL": return .unsupportedURL(try f.string("a"))
    case "invalidDestination": return .invalidDestination(try f.string("a"), rule: try f.string("b"))
    case "invalidSessionIdentifier": return .invalidSessionIdentifier(try f.string("a"), rule: try f.string("b"))
    case "sessionInUse": return .sessionInUse(try f.string("a"), pid: Int32(clamping: try f.int64("n")))
    case "unknownTask": return .unknownTask(try f.string("a"))
    case "httpStatus": return .httpStatus(Int(clamping: try f.int64("n")))
    case "network": return .network(try f.string("a"))
    case "stalled": return .stalled(seconds: Int(clamping: try f.int64("n")))
    case "lengthMismatch": return .lengthMismatch(expected: try f.int64("n"), actual: try f.int64("m"))
    case "checksumMismatch": return .checksumMismatch(expected: try f.string("a"), actual: try f.string("b"))
    case "diskFull": return .diskFull(path: try f.string("a"))
    case "protocolViolation": return .protocolViolation(try f.string("a"))
    case "cancelled": return .cancelled
    case "agentUnavailable": return .agentUnavailable(reason: try f.string("a"))
    case "corruptRecord": return .corruptRecord(path: try f.string("a"), reason: try f.string("b"))
    case "system":
      return .system(
        FileSystemError(try f.string("a"), try f.string("b"), Errno(rawValue: Int32(clamping: try f.int64("n")))))
    default:
      // Container errors, and codes of a later version, are kept as their text.
      return .other(try f.string("text"))
    }
  }
}

// MARK: Group commits

/// `commits/<seq>.commit`: what the agent made durable in one group commit (one file, one fsync, one directory
/// fsync, whatever the number of tasks in it): the requests it accepted and the final outcomes of finished tasks.
/// The task and event files are written from it afterwards without fsync; the agent's start writes them again from
/// the commits when a power cut lost them (`DownloadStore.replayCommits`).
package struct CommitRecord: Sendable, Equatable {
  /// One finished task: its final status (events queued) and its events.
  package struct Final: Sendable, Equatable {
    package var id: String
    package var session: String
    package var status: TaskStatus
    package var events: [EventRecord]

    package init(id: String, session: String, status: TaskStatus, events: [EventRecord]) {
      self.id = id
      self.session = session
      self.status = status
      self.events = events
    }
  }

  /// Orders the commits; names the file.
  package var sequence: UInt64
  /// Requests sessions wrote without fsync, made durable here.
  package var requests: [TaskRequest]
  package var finals: [Final]

  package init(sequence: UInt64, requests: [TaskRequest] = [], finals: [Final] = []) {
    self.sequence = sequence
    self.requests = requests
    self.finals = finals
  }

  /// `<20-digit sequence>.commit`: sorting names sorts commits.
  package var fileName: String { Self.fileName(sequence) }

  package static func fileName(_ sequence: UInt64) -> String {
    DownloadRecordFormat.sequenceName(sequence) + ".commit"
  }

  /// The sequence a commit file name holds; nil for any other name.
  package static func sequence(ofFileName name: String) -> UInt64? {
    guard name.utf8.count == 27, name.hasSuffix(".commit") else { return nil }
    return UInt64(name.prefix(20))
  }

  /// Most entries of either kind in one commit (keeps a commit file far below `maxCommitBytes`).
  package static let maxEntries = 128
}

extension DownloadRecordFormat {
  /// A commit holds up to 2 × 128 records of at most a few hundred bytes each.
  package static let maxCommitBytes = 4 << 20
  static let commitLimits = PropertyListLimits(maxBytes: maxCommitBytes, maxDepth: 8, maxObjects: 8192)

  package static func encode(_ c: CommitRecord) -> [UInt8] {
    // Each record keeps its own encoding (as a data blob), so it is decoded and checked by its own rules.
    let finals: [PropertyListValue] = c.finals.map { f in
      .dictionary([
        "id": .string(f.id), "session": .string(f.session), "status": .data(encode(f.status)),
        "events": .array(f.events.map { .data(encode($0)) }),
      ])
    }
    let d: [String: PropertyListValue] = [
      "v": 1, "sequence": .integer(PropertyListInteger(c.sequence)),
      "requests": .array(c.requests.map { .data(encode($0)) }), "finals": .array(finals),
    ]
    return (try? PropertyListValue.dictionary(d).encoded(as: .binary, limits: commitLimits)) ?? []
  }

  package static func decodeCommit(_ bytes: [UInt8]) throws(Invalid) -> CommitRecord {
    guard bytes.count <= maxCommitBytes else { throw Invalid("\(bytes.count) bytes, more than a commit's") }
    let value: PropertyListValue
    do { value = try PropertyListValue(bytes: bytes, limits: commitLimits) } catch {
      throw Invalid("not a property list: \(error)")
    }
    guard let d = value.dictionaryValue, d["v"]?.intValue == 1 else { throw Invalid("not a version 1 commit") }
    guard let sequence = d["sequence"]?.uint64Value else { throw Invalid("'sequence' missing") }
    guard let requests = d["requests"]?.arrayValue, let finals = d["finals"]?.arrayValue,
      requests.count <= CommitRecord.maxEntries, finals.count <= CommitRecord.maxEntries
    else { throw Invalid("'requests' or 'finals' missing or too long") }
    var record = CommitRecord(sequence: sequence)
    for r in requests {
      guard let blob = r.dataValue else { throw Invalid("a request is not data") }
      record.requests.append(try decodeRequest(blob))
    }
    for f in finals {
      guard let e = f.dictionaryValue, let id = e["id"]?.stringValue, isTaskID(id),
        let session = e["session"]?.stringValue, let status = e["status"]?.dataValue,
        let events = e["events"]?.arrayValue, events.count <= 2
      else { throw Invalid("a final entry is incomplete") }
      do { try validate(sessionIdentifier: session) } catch { throw Invalid("\(error)") }
      var decoded: [EventRecord] = []
      for event in events {
        guard let blob = event.dataValue else { throw Invalid("an event is not data") }
        let record = try decodeEvent(blob)
        guard record.taskID == id else { throw Invalid("an event of another task") }
        decoded.append(record)
      }
      let final = try decodeStatus(status)
      guard final.phase.isFinal else { throw Invalid("a final entry whose status is not final") }
      record.finals.append(CommitRecord.Final(id: id, session: session, status: final, events: decoded))
    }
    return record
  }
}
