import FileCoordination
import Foundation
import PropertyList
@testable import SharedDefaults

/// `defaults-script <root> <group> <suite> <dir> <step>…`: runs the steps in order on one suite, so a test can
/// keep a process alive with a known state and make it act later. Steps:
/// - `set:<key>=<integer>` (says "ack <key>" once the set returned), `remove:<key>`;
/// - `fill:<prefix>:<count>:<bytes>` sets `<prefix><i>` to `bytes` bytes of data (`bytes` 0: the integer i);
///   `fillacked:…` the same, saying "ack <key>" after each set;
///   `fillsame:<prefix>:<count>:<bytes>` sets them all to one value of `bytes` bytes;
/// - `bgset:<key>=<integer>` sets it on a thread of its own (which may wait for the suite's lock) and goes on;
/// - `sync` (`synchronize()`, says "synced"), `rewind` (a synchronize whose compaction also empties the journal:
///   a new generation; says "rewound"), `say:<text>`;
/// - `wait:<name>` waits until the file `<dir>/<name>` exists (at most 60 s, then exits with status 4);
/// - `settle`: waits for what this process does in the background (a compaction, an edit of a replaced export);
///   says "settled";
/// - `loads`: "loads <n>", the snapshots this process has read and parsed; `compactions`: "compactions <n>", the
///   background compactions it installed; `held`: "held <n>", the changes it holds over its image;
/// - `dump`: one line per key, "<key> <integer value or data length>", then "end"; `count:<prefix>`: "count <n>",
///   the number of keys with that prefix.
func runDefaultsScript(_ args: [String], _ container: GroupContainer) throws -> Never {
  let defaults = try SharedDefaults(suiteName: args[4], container: container)
  let directory = args[5]
  func line(_ text: String) { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }
  for step in args.dropFirst(6) {
    let (verb, rest) = step.firstIndex(of: ":").map { (String(step[..<$0]), String(step[step.index(after: $0)...])) }
      ?? (step, "")
    switch verb {
    case "set":
      let parts = rest.split(separator: "=", maxSplits: 1).map(String.init)
      try defaults.set(Int(parts[1])!, forKey: parts[0])
      line("ack \(parts[0])")
    case "bgset":
      let parts = rest.split(separator: "=", maxSplits: 1).map(String.init)
      Thread.detachNewThread { try? defaults.set(Int(parts[1])!, forKey: parts[0]) }
      usleep(100_000)  // long enough for the thread to be waiting for the lock
    case "remove":
      try defaults.removeObject(forKey: rest)
    case "fill", "fillacked":
      let parts = rest.split(separator: ":").map(String.init)
      let (prefix, count, bytes) = (parts[0], Int(parts[1])!, Int(parts[2])!)
      for i in 0..<count {
        let value: PropertyListValue =
          bytes == 0 ? .integer(PropertyListInteger(i)) : .data([UInt8](repeating: UInt8(i % 251), count: bytes))
        try defaults.set(value: value, forKey: "\(prefix)\(i)")
        if verb == "fillacked" { line("ack \(prefix)\(i)") }
      }
      line("filled \(prefix) \(count)")
    case "fillsame":
      let parts = rest.split(separator: ":").map(String.init)
      let (prefix, count, shared) = (parts[0], Int(parts[1])!, PropertyListValue.data(.init(repeating: 0x5A, count: Int(parts[2])!)))
      for i in 0..<count { try defaults.set(value: shared, forKey: "\(prefix)\(i)") }
      line("filled \(prefix) \(count)")
    case "sync":
      try defaults.synchronize()
      line("synced")
    case "rewind":
      try defaults.store.synchronize(emptyingJournal: true)
      line("rewound")
    case "say":
      line(rest)
    case "settle":
      defaults.waitForBackgroundWork()
      line("settled")
    case "loads":
      line("loads \(DefaultsStore.snapshotLoads.load(ordering: .relaxed))")
    case "held":
      line("held \(defaults.store.heldChanges())")
    case "compactions":
      line("compactions \(DefaultsStore.compactionsInstalled.load(ordering: .relaxed))")
    case "wait":
      var waited = 0
      while access(directory + "/" + rest, F_OK) != 0 {
        usleep(10_000)
        waited += 1
        if waited > 6000 { exit(4) }
      }
    case "dump":
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
    case "count":
      line("count \(defaults.propertyListRepresentation().keys.filter { $0.hasPrefix(rest) }.count)")
    default:
      FileHandle.standardError.write(Data("unknown step \(step)\n".utf8))
      exit(2)
    }
  }
  exit(0)
}
