import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import PropertyList
import SystemLayer

@testable import SharedDefaults

/// `HelperCommand.defaultsScript`: runs the steps in order on one suite (`DefaultsStep` says what each does and
/// prints); `wait` steps look for their files in `directory` (the root). Exits 0 after the last step.
func runDefaultsScript(suite: String, directory: String, steps: [DefaultsStep], _ container: GroupContainer) throws
  -> Never
{
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  func line(_ text: String) { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }
  for step in steps {
    switch step {
    case .set(let key, let value):
      try defaults.set(value, forKey: key)
      line("ack \(key)")
    case .backgroundSet(let key, let value):
      // Goes on once a thread of this process sleeps on the suite's lock (that thread, or an idle compaction
      // queued before it that it waits behind): a pause would often end first on a busy machine.
      let waits = SharedMemoryLock.sleepingWaits.value
      Thread.detachNewThread { try? defaults.set(value, forKey: key) }
      while SharedMemoryLock.sleepingWaits.value == waits { usleep(1_000) }
    case .remove(let key):
      try defaults.removeObject(forKey: key)
    case .fill(let prefix, let count, let bytes), .fillAcked(let prefix, let count, let bytes):
      for i in 0..<count {
        let value: PropertyListValue =
          bytes == 0 ? .integer(PropertyListInteger(i)) : .data([UInt8](repeating: UInt8(i % 251), count: bytes))
        try defaults.set(value: value, forKey: "\(prefix)\(i)")
        if case .fillAcked = step { line("ack \(prefix)\(i)") }
      }
      line("filled \(prefix) \(count)")
    case .fillInBatches(let prefix, let count, let bytes, let batch):
      for start in stride(from: 0, to: count, by: batch) {
        var values: [String: PropertyListValue] = [:]
        for i in start..<min(count, start + batch) {
          values["\(prefix)\(i)"] =
            bytes == 0 ? .integer(PropertyListInteger(i)) : .data([UInt8](repeating: UInt8(i % 251), count: bytes))
        }
        try defaults.set(values: values)
      }
      line("filled \(prefix) \(count)")
    case .fillSame(let prefix, let count, let bytes):
      let shared = PropertyListValue.data(.init(repeating: 0x5A, count: bytes))
      for i in 0..<count { try defaults.set(value: shared, forKey: "\(prefix)\(i)") }
      line("filled \(prefix) \(count)")
    case .sync:
      try defaults.synchronize()
      line("synced")
    case .rewind:
      try defaults.store.synchronize(emptyingJournal: true)
      line("rewound")
    case .say(let text):
      line(text)
    case .settle:
      defaults.waitForBackgroundWork()
      line("settled")
    case .loads:
      line("loads \(DefaultsStore.snapshotLoads.value)")
    case .held:
      line("held \(defaults.store.heldChanges())")
    case .compactions:
      line("compactions \(DefaultsStore.compactionsInstalled.value)")
    case .unreadable:
      line("unreadable \(DefaultsStore.committedButUnreadable.value)")
    case .wait(let name):
      // No limit of its own: the test's wait for this process's next line or exit is the hang limit (it kills
      // it), and a process whose test is gone exits (main.swift). 60 s of its own ran out on a busy machine.
      while access(directory + "/" + name, F_OK) != 0 { usleep(10_000) }
    case .dump:
      for (key, value) in defaults.propertyListRepresentation().sorted(by: { $0.key < $1.key }) {
        let shown: String
        switch value {
        case .data(let bytes): shown = "\(bytes.count)"
        case .integer: shown = "\(value.intValue ?? -1)"
        default: shown = "?"
        }
        line("\(key) \(shown)")
      }
      line("end")
    case .count(let prefix):
      line("count \(defaults.propertyListRepresentation().keys.filter { $0.hasPrefix(prefix) }.count)")
    case .read(let key):
      line("read \(key) \(defaults.value(forKey: key).map { "\($0.intValue ?? -999)" } ?? "nil")")
    case .tailScans:
      line("scans \(DefaultsStore.tailScans.value)")
    case .handOvers:
      line("handed over \(DefaultsStore.catchUpsHandedOver.value)")
    }
  }
  exit(0)
}
