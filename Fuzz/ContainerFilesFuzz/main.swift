// libFuzzer harness for the parsers of the container's own files: the defaults journal (0), presenter records and
// their buckets' indexes (1), coordination messages (2), download records (3: task, control, status, event, relaunch,
// commit, the event format announced in a session's attach.lock), activity records (4), suite images (5: open,
// validate, look up, merge), the URL rule (6: URLs and schemes a receiver re-checks, scheme registrations, handed-over
// file URLs, handler marker names), intent requests and replies (7) and the group's memory-level file (8). The first
// input byte picks the parser (`% 9`: the seeds' selectors 0-5 kept their meaning when 6-8 came). Build and run with
// `Fuzz/run.sh ContainerFilesFuzz`; a plain `swift build` compiles the stub at the bottom.
#if FUZZING
  import CFuzzShim
  import Glibc
  @testable import AppIntents
  @testable import AppLaunching
  @testable import FileCoordination
  @testable import GroupContainerCore
  @testable import MemoryWarnings
  @testable import Messaging
  @testable import SharedDefaults
  import BackgroundDownloads
  import Foundation
  import LiveActivities
  import PropertyList

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 9 {
    case 0:
      var records: [JournalFormat.Record] = []
      do { try JournalFormat.decode(bytes, base: 0, into: &records) } catch {}
      // Whatever decoded must encode and decode back to the same records.
      guard let reencoded = try? records.flatMap({ try JournalFormat.encode($0) }) else { return 0 }
      var again: [JournalFormat.Record] = []
      do { try JournalFormat.decode(reencoded, base: 0, into: &again) } catch {
        preconditionFailure("cannot read back our own journal: \(error)")
      }
      precondition(again.count == records.count, "journal round trip lost records")
    case 1:
      if let record = try? PresenterRecord.decode(bytes, fileName: "1.2.3") {
        precondition(record.item.isEmpty || (try? ContainerPath(record.item)) != nil, "unchecked path accepted")
      }
      // The same bytes as a bucket's index (PresenterBucketIndex): what decodes encodes back to the same bytes.
      if let index = PresenterBucketIndex.decode(bytes, listing: "0000000000000001", generation: 7) {
        let again = PresenterBucketIndex.encode(
          listing: "0000000000000001", generation: 7, hasBelow: index.hasBelow,
          records: index.records.map { ($0.name, Array($0.bytes)) })
        precondition(again == bytes, "index round trip")
      }
    case 3:
      // Every download record decoder: what decodes re-encodes to the same record (no field is lost or invented).
      if let r = try? DownloadRecordFormat.decodeRequest(bytes) {
        precondition((try? DownloadRecordFormat.decodeRequest(DownloadRecordFormat.encode(r))) == r, "task round trip")
        precondition(DownloadRecordFormat.isTaskID(r.id), "unchecked task id accepted")
        precondition((try? ContainerPath(r.destination)) != nil, "unchecked destination accepted")
      }
      if let c = try? DownloadRecordFormat.decodeControl(bytes) {
        precondition(
          (try? DownloadRecordFormat.decodeControl(DownloadRecordFormat.encode(c))) == c, "control round trip")
      }
      if let st = try? DownloadRecordFormat.decodeStatus(bytes) {
        precondition(
          st.resume.expectedBytes.map { st.resume.receivedBytes <= $0 } ?? true, "received > expected accepted")
        precondition(
          (try? DownloadRecordFormat.decodeStatus(DownloadRecordFormat.encode(st))) == st, "status round trip")
      }
      if let e = try? DownloadRecordFormat.decodeEvent(bytes) {
        precondition((try? DownloadRecordFormat.decodeEvent(DownloadRecordFormat.encode(e))) == e, "event round trip")
      }
      // An event file (one event, a finished download's two, or a batch of downloads'): written back, one file
      // holding the same events, named as the reader checks.
      if let events = try? DownloadRecordFormat.decodeEvents(bytes) {
        var perTask: [[EventRecord]] = []
        for event in events {
          var e = event
          e.storedIn = nil
          if e.kind == .completed, let last = perTask.last, last.count == 1, last[0].taskID == e.taskID,
            last[0].kind == .finished, event.storedIn == last[0].fileName
          {
            perTask[perTask.count - 1].append(e)
          } else {
            perTask.append([e])
          }
        }
        let files = DownloadRecordFormat.eventFiles(batch: perTask, format: 3)
        precondition(
          files.count == 1 && (try? DownloadRecordFormat.decodeEvents(files[0].bytes)) == events
            && files[0].name == events[0].file, "event file round trip")
      }
      // The event format a session announced in its attach.lock: at least 1, and what it says is written back.
      let announced = EventFormatHandshake.announcedVersion(bytes)
      precondition(announced >= 1, "an event format below 1 read")
      precondition(
        EventFormatHandshake.announcedVersion(EventFormatHandshake.announcement(pid: 1, readVersion: announced))
          == announced, "announcement round trip")
      if let a = try? DownloadRecordFormat.decodeRelaunch(bytes) {
        precondition(a.executable.hasPrefix("/"), "relative executable accepted")
        precondition(
          (try? DownloadRecordFormat.decodeRelaunch(DownloadRecordFormat.encode(a))) == a, "relaunch round trip")
      }
      // A commit holds records of the other kinds, each checked by its own rules.
      if let c = try? DownloadRecordFormat.decodeCommit(bytes) {
        precondition(c.requests.count <= CommitRecord.maxEntries && c.finals.count <= CommitRecord.maxEntries)
        for f in c.finals {
          precondition(DownloadRecordFormat.isTaskID(f.id) && f.status.phase.isFinal, "unchecked final accepted")
          precondition(f.events.allSatisfy { $0.taskID == f.id }, "an event of another task accepted")
        }
        precondition(
          (try? DownloadRecordFormat.decodeCommit(DownloadRecordFormat.encode(c))) == c, "commit round trip")
      }
    case 4:
      // Activity records: what decodes re-encodes, decodes again, and re-encodes to the same bytes (JSON numbers
      // may normalise once, 1.0 to 1); the time rules hold at any time.
      // The hand-written reader and writer agree with JSONDecoder and JSONEncoder: what the hand route reads,
      // JSONDecoder reads to the same record (and JSON value), and the hand writer writes JSONEncoder's bytes.
      if let hand = ActivityRecordFormat.decodeByHand(bytes) {
        precondition((try? ActivityRecordFormat.decodeWithFoundation(bytes)) == hand, "hand and JSONDecoder disagree")
      }
      if let hand = ActivityJSON.decode(bytes) {
        precondition(
          (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))) == hand, "hand JSON and JSONDecoder disagree")
        precondition(
          ActivityJSON.encode(hand).map { Data($0) } == (try? ActivityRecordFormat.encoder.encode(hand)),
          "hand JSON writer and JSONEncoder disagree")
      }
      if let r = try? ActivityRecordFormat.decode(bytes) {
        precondition(
          (try? ActivityRecordFormat.encode(r)) == (try? ActivityRecordFormat.encodeWithFoundation(r)),
          "hand record writer and JSONEncoder disagree")
        guard let once = try? ActivityRecordFormat.encode(r) else { preconditionFailure("cannot encode a read record") }
        guard let again = try? ActivityRecordFormat.decode(once) else {
          preconditionFailure("cannot read back our record")
        }
        precondition((try? ActivityRecordFormat.encode(again)) == once, "activity record round trip")
        precondition(ActivityRecordFormat.isActivityID(r.id), "unchecked activity id accepted")
        for now in [r.startDate - 1, r.startDate, r.startDate + 3600 * 9, r.startDate + 3600 * 13, 0, 4e9] {
          let effective = ActivityRules.effective(r, now: now)
          if let next = ActivityRules.nextChange(r, now: now) { precondition(next > now, "a deadline in the past") }
          if r.lifecycle == .dismissed { precondition(effective.state == .dismissed, "a dismissed record revived") }
        }
      }
    case 5:
      fuzzSuiteImage(bytes)
    case 6:
      fuzzURLRule(bytes)
    case 7:
      fuzzIntentWire(bytes)
    case 8:
      // The group's memory level (`v1 <sequence> <level>`): what parses is what `send(_:to:)` writes back.
      if let (sequence, level) = MemoryPressure.parseGroupFile(bytes) {
        let written = MemoryPressure.parseGroupFile(Array("v1 \(sequence) \(level) 1\n".utf8))
        precondition(written?.sequence == sequence && written?.level == level, "group level round trip")
      }
    default:
      for name in ["1.2.3.prepare", "1.2.3.finish", "1.2.3.ack"] {
        if let message = try? CoordinationMessage.decode(bytes, fileName: name) {
          precondition(message.item.isEmpty || (try? ContainerPath(message.item)) != nil, "unchecked path accepted")
          // A slot outside the board would let a receiver store outside the sender's mapping.
          precondition(message.ackSlot.map { AckBoard.slots.contains($0) } ?? true, "unchecked ack slot accepted")
          // What a receiver accepted, written again by the hand-written writer (or JSONEncoder), reads back the
          // same: a byte the writer does not escape would let a path or a name add fields to a message.
          guard let again = try? CoordinationMessage.decode(message.encoded(), fileName: name) else {
            preconditionFailure("cannot read back our own message")
          }
          precondition(sortedJSON(again) == sortedJSON(message), "message round trip")
        }
      }
      // The hand-written reader takes only what JSONDecoder reads, and reads it the same (MessageJSON).
      if let fast = MessageJSON.decode(bytes) {
        let slow = try? JSONDecoder().decode(CoordinationMessage.self, from: Data(bytes))
        precondition(slow != nil, "the hand-written message reader accepted what JSONDecoder refuses")
        precondition(sortedJSON(fast) == sortedJSON(slow!), "the two message readers disagree")
        // The hand-written writer's bytes: JSONDecoder reads them as the hand-written reader does.
        if let written = MessageJSON.encode(fast) {
          let slowAgain = try? JSONDecoder().decode(CoordinationMessage.self, from: Data(written))
          precondition(slowAgain.map(sortedJSON) == sortedJSON(fast), "JSONDecoder reads our message differently")
        }
      }
    }
    return 0
  }

  /// A message as JSONEncoder writes it with sorted keys: one form to compare two messages by.
  func sortedJSON(_ message: CoordinationMessage) -> Data? {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    return try? encoder.encode(message)
  }

  /// The URL rule as a receiver applies it to what a message or a file in the container says.
  func fuzzURLRule(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    // A URL that passes is short, RFC 3986 characters only, with a scheme that passes on its own.
    if let scheme = try? OpenURLRule.validate(text) {
      precondition(text.utf8.count <= OpenURLRule.maxBytes, "an over-long URL accepted")
      precondition(text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }, "a URL with a byte outside RFC 3986 accepted")
      precondition((try? OpenURLRule.validate(scheme: scheme)) == scheme, "the URL's scheme does not pass alone")
      precondition(text.lowercased().hasPrefix(scheme + ":"), "a scheme that is not the URL's")
      precondition(URL(string: text) != nil, "a URL Foundation cannot read accepted")
    }
    if let scheme = try? OpenURLRule.validate(scheme: text) {
      precondition(scheme == text.lowercased() && scheme.utf8.count <= OpenURLRule.maxSchemeBytes)
      // It names a file (`schemes/<scheme>`): it must not be able to name a path.
      precondition(!scheme.contains("/") && scheme.first?.isLetter == true, "a scheme that can name a path accepted")
    }
    // A scheme registration (the file names the program an opener starts): only this version's, for its scheme,
    // with an absolute program, and it survives a rewrite.
    for scheme in ["simpletimer", "x"] {
      if let record = SchemeRegistration.decode(bytes, scheme: scheme) {
        precondition(record.scheme == scheme && record.executable.hasPrefix("/") && record.version == 1)
        let again = (try? JSONEncoder().encode(record)).flatMap { SchemeRegistration.decode(Array($0), scheme: scheme) }
        precondition(again == record, "scheme registration round trip")
      }
    }
    // A handed-over file's URL: the item it names is in the container's Inbox, under a real name.
    let base = "/tmp/group-containers/group.fuzz"
    for url in [URL(string: text), URL(string: "file://" + base + "/" + text)] {
      guard let url, let item = URLHandlers.inboxItem(url, container: base) else { continue }
      precondition(item.isDescendant(of: InboxRule.inbox), "an item outside the Inbox taken")
      precondition((try? ContainerPath(item.components.joined(separator: "/"))) == item, "an unchecked item taken")
    }
    // A handler marker's process name: digits, one dot, digits; what parses prints back as it parses.
    if let process = ProcessName(text) {
      precondition(process.pid > 0 && ProcessName(process.description) == process, "process name round trip")
    }
  }

  /// Intent requests and replies: what a receiver or sender accepts holds what the other side checks, and
  /// re-encodes to the same request or reply.
  func fuzzIntentWire(_ bytes: [UInt8]) {
    if case .success(let request) = IntentWire.decodeRequest(bytes) {
      precondition(request.version == IntentWire.version && !request.type.isEmpty && request.type.utf8.count <= 256)
      if let again = try? IntentWire.encode(type: request.type, parameters: request.parameters) {
        guard case .success(let decoded) = IntentWire.decodeRequest(again) else {
          preconditionFailure("cannot read back our own request")
        }
        precondition(decoded.type == request.type && decoded.parameters == request.parameters, "request round trip")
      }
    }
    if let reply = try? IntentWire.decodeReply(bytes, type: "fuzz") {
      precondition(reply.version == IntentWire.version)
      // Re-encoding may grow (escaped slashes): one over the limit is sent as a `failed` reply instead.
      guard ((try? JSONEncoder().encode(reply))?.count ?? Int.max) <= IntentWire.maxBytes else { return }
      guard let again = try? IntentWire.decodeReply(IntentWire.encode(reply), type: "fuzz") else {
        preconditionFailure("cannot read back our own reply")
      }
      precondition(
        again.status == reply.status && again.value == reply.value && again.dialog == reply.dialog
          && again.message == reply.message, "reply round trip")
    }
  }

  /// Whatever opens survives `validate()` and lookups (Corruption, never a trap); an image that validates merges
  /// into one that validates and holds the same keys with the same value bytes.
  func fuzzSuiteImage(_ bytes: [UInt8]) {
    guard let image = try? SuiteImage(bytes: bytes) else { return }
    let valid = (try? image.validate()) != nil
    var keys: [String] = []
    try? image.forEachEntry { entry, key in
      keys.append(key)
      _ = try? image.value(of: entry)
    }
    for key in keys + ["", "a", "absent", "key.0", "\u{E9}"] { _ = try? image.value(forKey: key) }
    guard valid else { return }
    precondition(keys.count == image.count, "validated image enumerates \(keys.count) of \(image.count) keys")
    for key in keys { precondition((try? image.find(key)) != nil, "validated key '\(key)' not found") }
    func sameEntries(_ copy: SuiteImage, without changed: Set<[UInt8]>) {
      for key in keys where !changed.contains(Array(key.utf8)) {
        guard let a = try? image.find(key), let b = try? copy.find(key), let rawA = try? image.raw(a),
          let rawB = try? copy.raw(b)
        else { preconditionFailure("key '\(key)' lost by a merge") }
        precondition(rawA.value.elementsEqual(rawB.value), "value of '\(key)' changed by a merge")
      }
    }
    do {
      let copy = try SuiteImage(
        bytes: SuiteImage.merged(base: image, changes: [:], generation: image.generation, position: image.position))
      try copy.validate()
      precondition(copy.count == image.count, "a merge without changes changed the count")
      precondition(copy.objects == image.objects && copy.payloadBytes == image.payloadBytes, "counts changed")
      sameEntries(copy, without: [])
      // With changes: the first key removed, one added.
      let removed = keys.first
      var changes: [String: PropertyListValue?] = ["fuzz.added": .bool(true)]
      if let removed, removed != "fuzz.added" { changes[removed] = .some(nil) }
      let changed = try SuiteImage(bytes: SuiteImage.merged(base: image, changes: changes, generation: 1, position: 2))
      try changed.validate()
      let added = try changed.value(forKey: "fuzz.added")
      precondition(added == .bool(true), "added key missing")
      if let removed, removed != "fuzz.added" {
        let gone = try changed.find(removed)
        precondition(gone == nil, "removed key still there")
      }
      sameEntries(changed, without: Set([removed, "fuzz.added"].compactMap { $0.map { Array($0.utf8) } }))
    } catch {
      preconditionFailure("a validated image does not merge into a valid one: \(error)")
    }
  }

  let callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32 = { data, size in fuzzOne(data, size) }
  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, callback))
#else
  print("Build with Fuzz/run.sh ContainerFilesFuzz to fuzz (needs -DFUZZING and libFuzzer).")
#endif
