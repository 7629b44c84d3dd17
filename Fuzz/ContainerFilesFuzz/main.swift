// libFuzzer harness for the parsers of the container's own files: the defaults journal, presenter records,
// coordination messages, download records (task, control, status, event, relaunch) and activity records. The first input byte picks the parser. Build and run with `Fuzz/run.sh
// ContainerFilesFuzz`; a plain `swift build` compiles the stub at the bottom.
#if FUZZING
  import CFuzzShim
  import Glibc
  @testable import FileCoordination
  @testable import SharedDefaults
  import BackgroundDownloads
  import Foundation
  import LiveActivities

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 5 {
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
        precondition((try? DownloadRecordFormat.decodeControl(DownloadRecordFormat.encode(c))) == c, "control round trip")
      }
      if let st = try? DownloadRecordFormat.decodeStatus(bytes) {
        precondition(st.resume.expectedBytes.map { st.resume.receivedBytes <= $0 } ?? true, "received > expected accepted")
        precondition((try? DownloadRecordFormat.decodeStatus(DownloadRecordFormat.encode(st))) == st, "status round trip")
      }
      if let e = try? DownloadRecordFormat.decodeEvent(bytes) {
        precondition((try? DownloadRecordFormat.decodeEvent(DownloadRecordFormat.encode(e))) == e, "event round trip")
      }
      if let a = try? DownloadRecordFormat.decodeRelaunch(bytes) {
        precondition(a.executable.hasPrefix("/"), "relative executable accepted")
        precondition((try? DownloadRecordFormat.decodeRelaunch(DownloadRecordFormat.encode(a))) == a, "relaunch round trip")
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
    default:
      for name in ["1.2.3.prepare", "1.2.3.finish", "1.2.3.ack"] {
        if let message = try? CoordinationMessage.decode(bytes, fileName: name) {
          precondition(message.item.isEmpty || (try? ContainerPath(message.item)) != nil, "unchecked path accepted")
          // A slot outside the board would let a receiver store outside the sender's mapping.
          precondition(message.ackSlot.map { AckBoard.slots.contains($0) } ?? true, "unchecked ack slot accepted")
        }
      }
    }
    return 0
  }

  let callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32 = { data, size in fuzzOne(data, size) }
  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, callback))
#else
  print("Build with Fuzz/run.sh ContainerFilesFuzz to fuzz (needs -DFUZZING and libFuzzer).")
#endif
