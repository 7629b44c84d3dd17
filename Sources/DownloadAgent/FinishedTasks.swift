import BackgroundDownloads

/// What the agent remembers of each finished task for the 24 h they stay (`DownloadAgent.State.settled`), and of each
/// task's commits, in tables of plain values: no allocation per task.
///
/// Rule: a table that grows with the finished tasks holds no `String`, array or other reference per entry. A
/// 32-character id as a `String` is an allocation of its own, and so is an array of commits: with 10,000 finished
/// tasks the agent kept 1.9 kB of heap per task, and those small blocks, made one by one among a burst's transient
/// ones, kept most of its pages resident after the burst (48 MB at 10,000 tasks; issue #37).
/// *What if you don't*: the agent's memory grows with every task it keeps, and `AgentMemoryTests` fails.
struct TaskKey: Hashable, Sendable {
  let high: UInt64
  let low: UInt64

  /// The key of a task id (32 lower-case hex digits, `DownloadRecordFormat.isTaskID`); nil for anything else.
  init?(_ id: some StringProtocol) {
    var high: UInt64 = 0
    var low: UInt64 = 0
    var count = 0
    for d in id.utf8 {
      let nibble: UInt64
      switch d {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = UInt64(d - UInt8(ascii: "0"))
      case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = UInt64(d - UInt8(ascii: "a") + 10)
      default: return nil
      }
      if count < 16 { high = high << 4 | nibble } else { low = low << 4 | nibble }
      count += 1
      if count > 32 { return nil }
    }
    guard count == 32 else { return nil }
    self.high = high
    self.low = low
  }

  /// The task id again.
  var id: String { Self.hex(high) + Self.hex(low) }

  private static func hex(_ value: UInt64) -> String {
    let s = String(value, radix: 16)
    return String(repeating: "0", count: 16 - s.count) + s
  }
}

/// A finished task reduced to what its retention needs: its finish time and its session (an index into
/// `SessionNames`), in 8 bytes. The finish time is kept in whole seconds, rounded up: retention (24 h) is checked
/// every few seconds anyway, and a task is never forgotten early. With an `Int64` of nanoseconds the value took 16
/// bytes (its stride), and 10,000 tasks' table 131 kB more.
struct Settled: Sendable {
  private let finishedSeconds: UInt32
  let session: UInt32

  /// `finished`: ns since 1970.
  init(finished: Int64, session: UInt32) {
    let seconds = finished > 0 ? (finished - 1) / 1_000_000_000 + 1 : 0
    finishedSeconds = UInt32(clamping: seconds)
    self.session = session
  }

  /// The finish time, ns since 1970 (rounded up to a second).
  var finished: Int64 { Int64(finishedSeconds) * 1_000_000_000 }
}

/// The session identifiers settled tasks name, each stored once.
struct SessionNames: Sendable {
  private var names: [String] = []
  private var indexes: [String: UInt32] = [:]

  mutating func index(_ name: String) -> UInt32 {
    if let known = indexes[name] { return known }
    let index = UInt32(names.count)
    names.append(name)
    indexes[name] = index
    return index
  }

  subscript(_ index: UInt32) -> String { names[Int(index)] }
}

/// The commits that name each task (most tasks have two: its request's and its outcome's): two inline per task, as
/// 32-bit sequences (8 bytes: 10,000 tasks' entries took 786 kB with two 64-bit sequences, a count and an array
/// inline, 393 kB so), more in a side table (a task committed again after a failed write, or a sequence past 32 bits:
/// rare, so an allocation then is fine).
struct TaskCommitTable: Sendable {
  /// Sequences start at 1: 0 is an empty place.
  private struct Inline: Sendable {
    var first: UInt32 = 0
    var second: UInt32 = 0
  }
  private var inline: [TaskKey: Inline] = [:]
  private var more: [TaskKey: [UInt64]] = [:]

  mutating func append(_ sequence: UInt64, for key: TaskKey) {
    if sequence != 0, let small = UInt32(exactly: sequence) {
      var entry = inline[key] ?? Inline()
      if entry.first == 0 {
        entry.first = small
        inline[key] = entry
        return
      }
      if entry.second == 0 {
        entry.second = small
        inline[key] = entry
        return
      }
    }
    more[key, default: []].append(sequence)
  }

  /// Forgets `key`'s commits; returns them.
  mutating func remove(_ key: TaskKey) -> [UInt64] {
    let entry = inline.removeValue(forKey: key)
    return [entry?.first ?? 0, entry?.second ?? 0].filter { $0 != 0 }.map(UInt64.init)
      + (more.removeValue(forKey: key) ?? [])
  }
}
