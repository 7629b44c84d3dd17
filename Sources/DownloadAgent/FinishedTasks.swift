import BackgroundDownloads
import GroupContainerCore

/// What the agent remembers of each finished task for the 24 h they stay (`DownloadAgent.State.tasks`), and of each
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
      guard let digit = HexDigits.lowercaseValue(d) else { return nil }
      let nibble = UInt64(digit)
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
  let finishedSeconds: UInt32
  let session: UInt32

  /// `finished`: ns since 1970.
  init(finished: Int64, session: UInt32) {
    let seconds = finished > 0 ? (finished - 1) / 1_000_000_000 + 1 : 0
    finishedSeconds = UInt32(clamping: seconds)
    self.session = session
  }

  init(finishedSeconds: UInt32, session: UInt32) {
    self.finishedSeconds = finishedSeconds
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

/// Each task's commits (most tasks have two: its request's and its outcome's) and, once it settled, its `Settled`
/// value, in one table: 32 bytes a bucket. Two tables (a `Settled` per settled task, the commits per task) took
/// 16,384 buckets of 24 bytes each at 10,000 tasks, 786 kB resident; one takes 524 kB. Commits are kept two inline
/// per task, as 32-bit sequences, more in a side table (a task committed again after a failed write, or a sequence
/// past 32 bits: rare, so an allocation then is fine).
struct TaskTable: Sendable {
  /// Sequences start at 1: 0 is an empty place. `session` 0: not settled; else the session's index + 1.
  private struct Entry: Sendable {
    var first: UInt32 = 0
    var second: UInt32 = 0
    var finishedSeconds: UInt32 = 0
    var session: UInt32 = 0

    var isEmpty: Bool { first == 0 && second == 0 && session == 0 }
  }
  private var entries: [TaskKey: Entry] = [:]
  private var more: [TaskKey: [UInt64]] = [:]
  /// The settled tasks among `entries`.
  private(set) var settledCount = 0

  mutating func append(_ sequence: UInt64, for key: TaskKey) {
    if sequence != 0, let small = UInt32(exactly: sequence) {
      var entry = entries[key] ?? Entry()
      if entry.first == 0 {
        entry.first = small
        entries[key] = entry
        return
      }
      if entry.second == 0 {
        entry.second = small
        entries[key] = entry
        return
      }
    }
    more[key, default: []].append(sequence)
  }

  /// Forgets `key`: its commits (returned) and its settled value.
  mutating func remove(_ key: TaskKey) -> [UInt64] {
    let entry = entries.removeValue(forKey: key)
    if let entry, entry.session != 0 { settledCount -= 1 }
    return [entry?.first ?? 0, entry?.second ?? 0].filter { $0 != 0 }.map(UInt64.init)
      + (more.removeValue(forKey: key) ?? [])
  }

  /// `key`'s settled value; nil while it is not settled.
  subscript(settled key: TaskKey) -> Settled? {
    get {
      guard let entry = entries[key], entry.session != 0 else { return nil }
      return Settled(finishedSeconds: entry.finishedSeconds, session: entry.session - 1)
    }
    set {
      var entry = entries[key] ?? Entry()
      let was = entry.session != 0
      if let newValue {
        entry.finishedSeconds = newValue.finishedSeconds
        entry.session = newValue.session + 1
      } else {
        entry.finishedSeconds = 0
        entry.session = 0
      }
      settledCount += (newValue != nil ? 1 : 0) - (was ? 1 : 0)
      entries[key] = entry.isEmpty ? nil : entry
    }
  }

  /// The settled tasks whose value `include` accepts.
  func settled(where include: (Settled) -> Bool) -> [(key: TaskKey, value: Settled)] {
    var found: [(key: TaskKey, value: Settled)] = []
    for (key, entry) in entries where entry.session != 0 {
      let value = Settled(finishedSeconds: entry.finishedSeconds, session: entry.session - 1)
      if include(value) { found.append((key, value)) }
    }
    return found
  }

  /// Forgets the settled value of every task `remove` accepts (their commits stay).
  mutating func unsettle(where remove: (TaskKey) -> Bool) {
    for key in entries.keys where entries[key]?.session != 0 && remove(key) { self[settled: key] = nil }
  }
}
