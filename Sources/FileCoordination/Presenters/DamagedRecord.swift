import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// A file in a bucket of `presenters/` that is not a valid record (truncated, edited, not a regular file). Its
/// presenter, if its process lives, is a presenter nobody can ask: its item is unknown, so it concerns every access
/// that reads its bucket (issue #33 item 4).
struct DamagedRecord: Sendable, Hashable {
  /// The file's name.
  var name: String
  /// The owning process, from the name when it has the shape of a record id (`<pid>.<start>.<n>`).
  var process: ProcessName?
  var reason: String

  init(name: String, reason: String) {
    self.name = name
    self.reason = reason
    let parts = name.split(separator: ".", omittingEmptySubsequences: false)
    process = parts.count == 3 && UInt64(parts[2]) != nil ? ProcessName(parts[0] + "." + parts[1]) : nil
  }
}
