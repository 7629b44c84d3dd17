// libFuzzer harness for the parsers of the container's own files: the defaults journal (0), presenter records (1),
// coordination messages (2), download records (3: task, control, status, event, relaunch), activity records (4)
// and suite images (5: open, validate, look up, merge). The first input byte picks the parser (`% 6`). Build and
// run with `Fuzz/run.sh ContainerFilesFuzz`; a plain `swift build` compiles the stub at the bottom.
#if FUZZING
  import CFuzzShim
  import Glibc
  @testable import FileCoordination
  @testable import SharedDefaults
  import BackgroundDownloads
  import Foundation
  import LiveActivities
  import PropertyList

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 6 {
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
      if let a = try? DownloadRecordFormat.decodeRelaunch(bytes) {
        precondition(a.executable.hasPrefix("/"), "relative executable accepted")
        precondition(
          (try? DownloadRecordFormat.decodeRelaunch(DownloadRecordFormat.encode(a))) == a, "relaunch round trip")
      }
    case 4:
      // Activity records: what decodes re-encodes, decodes again, and re-encodes to the same bytes (JSON numbers
      // may normalise once, 1.0 to 1); the time rules hold at any time.
      if let r = try? ActivityRecordFormat.decode(bytes) {
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
    default:
      for name in ["1.2.3.prepare", "1.2.3.finish", "1.2.3.ack"] {
        if let message = try? CoordinationMessage.decode(bytes, fileName: name) {
          precondition(message.item.isEmpty || (try? ContainerPath(message.item)) != nil, "unchecked path accepted")
          // A slot outside the board would let a receiver store outside the sender's mapping.
          precondition(message.ackSlot.map { AckBoard.slots.contains($0) } ?? true, "unchecked ack slot accepted")
        }
      }
      // The hand-written reader takes only what JSONDecoder reads, and reads it the same (MessageJSON).
      if let fast = MessageJSON.decode(bytes) {
        let slow = try? JSONDecoder().decode(CoordinationMessage.self, from: Data(bytes))
        precondition(slow != nil, "the hand-written message reader accepted what JSONDecoder refuses")
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        precondition((try? encoder.encode(fast)) == (try? encoder.encode(slow!)), "the two message readers disagree")
      }
    }
    return 0
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
