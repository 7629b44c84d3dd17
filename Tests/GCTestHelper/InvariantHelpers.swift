import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import PropertyList
import Synchronization

@testable import SharedDefaults

/// A value that proves itself: 8 bytes of sequence number, then bytes derived from it and from the key.
func selfCheckingValue(key: String, sequence: UInt64, size: Int) -> [UInt8] {
  var bytes = withUnsafeBytes(of: sequence.littleEndian) { Array($0) }
  let seed = UInt64(truncatingIfNeeded: key.utf8.reduce(0) { $0 &* 31 &+ Int($1) })
  for j in 8..<max(size, 8) {
    bytes.append(UInt8(truncatingIfNeeded: (sequence &+ seed &+ UInt64(j)) &* 2_654_435_761 >> 7))
  }
  return bytes
}

/// The sequence number in `bytes`, or nil when they are not a value `selfCheckingValue` made for `key`.
func checkedSequence(_ bytes: [UInt8], key: String) -> UInt64? {
  guard bytes.count >= 8 else { return nil }
  let sequence = bytes.prefix(8).enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
  return selfCheckingValue(key: key, sequence: sequence, size: bytes.count) == bytes ? sequence : nil
}

/// Runs `.seqWriter` and `.seqReader` (HelperCommand.swift says what they do and print).
func runInvariantMode(_ command: HelperCommand, root: String, _ container: GroupContainer) throws -> Never {
  switch command {
  case .seqWriter(let suite, let writer, let count, let size):
    let defaults = try SharedDefaults(suiteName: suite, container: container)
    try sequenceWriter(defaults, writer: writer, count: count, size: size)
  case .seqReader(let suite, let writers):
    let defaults = try SharedDefaults(suiteName: suite, container: container)
    try sequenceReader(defaults, directory: root, writers: writers)
  default:
    FileHandle.standardError.write(Data("not an invariant command: \(command)\n".utf8))
    exit(2)
  }
}

func sequenceWriter(_ defaults: SharedDefaults, writer: Int, count: Int, size: Int) throws -> Never {
  for i in 0..<count {
    let key = "w\(writer)-k\(i % 8)"
    let value = selfCheckingValue(key: key, sequence: UInt64(i), size: size + (i * 97) % size)
    try defaults.set(value: .data(value), forKey: key)
  }
  FileHandle.standardOutput.write(Data("done\n".utf8))
  exit(0)
}

func sequenceReader(_ defaults: SharedDefaults, directory: String, writers: Int) throws -> Never {
  let stop = directory + "/stop"
  let keys = (0..<writers).flatMap { w in (0..<8).map { "w\(w)-k\($0)" } }
  let getter = SequenceChecker(source: "get")
  let observer = SequenceChecker(source: "observer")
  let observation = defaults.observe { change in observer.check(change.key, change.newValue) }
  FileHandle.standardOutput.write(Data("ready\n".utf8))
  while access(stop, F_OK) != 0 {
    for key in keys { getter.check(key, defaults.value(forKey: key)) }
  }
  Thread.sleep(forTimeInterval: 0.2)  // the last changes reach the observer
  observation.cancel()
  let (checked, bad) = (getter.result.checked + observer.result.checked, getter.result.bad + observer.result.bad)
  let torn = DefaultsStore.committedButUnreadable.value
  FileHandle.standardOutput.write(Data("checked \(checked) bad \(bad.count) torn \(torn) \(bad.prefix(3))\n".utf8))
  exit(0)
}

/// Checks each value it is given and that no key's sequence number goes back.
final class SequenceChecker: Sendable {
  let source: String
  private let state = Mutex<(last: [String: UInt64], checked: Int, bad: [String])>(([:], 0, []))
  init(source: String) { self.source = source }

  var result: (checked: Int, bad: [String]) { state.withLock { ($0.checked, $0.bad) } }

  func check(_ key: String, _ value: PropertyListValue?) {
    guard let value else { return }
    state.withLock { s in
      s.checked += 1
      guard case .data(let bytes) = value, let sequence = checkedSequence(bytes, key: key) else {
        s.bad.append("\(source) \(key): malformed value")
        return
      }
      if let previous = s.last[key], sequence < previous {
        s.bad.append("\(source) \(key): \(sequence) after \(previous)")
      }
      s.last[key] = max(s.last[key] ?? 0, sequence)
    }
  }
}
