import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// A process, named so PID reuse cannot fool anyone: `<pid>.<start time in clock ticks>`.
package struct ProcessName: Hashable, Sendable, Codable, CustomStringConvertible {
  package var pid: Int32
  package var startTime: UInt64

  package static let current: ProcessName = ProcessName(
    pid: CurrentProcess.id, startTime: CurrentProcess.startTime() ?? UInt64(MonotonicClock.nanoseconds()))

  package init(pid: Int32, startTime: UInt64) {
    self.pid = pid
    self.startTime = startTime
  }

  /// Strict parse of `<pid>.<start>`: two runs of ASCII digits, one dot between them; the pid a positive `Int32`, the
  /// start a `UInt64`. Byte by byte (every received message names two: this was a tenth of decoding one).
  package init?(_ string: String) {
    var string = string
    guard let (pid, start) = string.withUTF8(Self.parse) else { return nil }
    self.init(pid: pid, startTime: start)
  }

  /// `init(_:)` of a `String`, for a slice. Two concrete overloads, not one over `StringProtocol`: the generic one,
  /// called from other modules unspecialised, looked up `UTF8View: Collection` at run time — a scan of every
  /// conformance record loaded (~90 µs) in a new process's first coordinated access.
  package init?(_ string: Substring) {
    var string = string
    guard let (pid, start) = string.withUTF8(Self.parse) else { return nil }
    self.init(pid: pid, startTime: start)
  }

  /// `init(_:)` of the UTF-8 bytes of a name.
  package init?(utf8 bytes: UnsafeBufferPointer<UInt8>) {
    guard let (pid, start) = Self.parse(bytes) else { return nil }
    self.init(pid: pid, startTime: start)
  }

  private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> (Int32, UInt64)? {
    guard let dot = bytes.firstIndex(of: UInt8(ascii: ".")),
      let pid = DecimalDigits.value(of: UnsafeBufferPointer(rebasing: bytes[..<dot])), pid > 0,
      pid <= UInt64(Int32.max), let start = DecimalDigits.value(of: UnsafeBufferPointer(rebasing: bytes[(dot + 1)...]))
    else { return nil }
    return (Int32(pid), start)
  }

  package var description: String { "\(pid).\(startTime)" }

  package init(from decoder: any Decoder) throws {
    let string = try decoder.singleValueContainer().decode(String.self)
    guard let parsed = ProcessName(string) else {
      throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad process name"))
    }
    self = parsed
  }

  package func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(description)
  }
}
