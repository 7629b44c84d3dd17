// libFuzzer harness for the parsers of the container's own files: the defaults journal, presenter records and
// coordination messages. The first input byte picks the parser. Build and run with `Fuzz/run.sh
// ContainerFilesFuzz`; a plain `swift build` compiles the stub at the bottom.
#if FUZZING
  import CFuzzShim
  import Glibc
  @testable import FileCoordination
  @testable import SharedDefaults

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 3 {
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
