import Foundation
import SystemLayer

/// The history `stress storm` keeps: one log per worker process, one line per operation, appended after the call
/// returned (StressLog: one `O_APPEND` write), so a SIGKILL never leaves an unacknowledged operation logged. Lines:
///
///     set <key> <token> <start> <end>          defaults: set(token, forKey: key) returned
///     update <value> <start> <end>             defaults: update("storm-counter") returned value
///     mono <key> <value> <start> <end>         defaults: set(value, forKey: key), values rising per writer
///     rollback <what>                          defaults: a read after update() returned less than it returned
///     try <key> <token> <start>                cache: about to store token's image (logged before the call)
///     store <key> <token> <start> <end>        cache: store returned
///     read <key> <token|miss|torn> <start> <end>   cache: image(forKey:) returned (torn: bytes not any image stored)
///     start <task> <file> <ok|fail> <start> <end>  downloads: download() returned; file: the served file's name
///     done <task> <succeeded|failed> <start> <end> downloads: the task was seen completed
///     ack <count> <start> <end>                coordinated writes (`stress files-writer --timed`)
///     activity <count> <start> <end>           Live Activities: update(using:) returned count
///     handed <copy> <token> <start> <end>      Inbox: send(file:toScheme:) returned the copy's name, answered
///     opened <copy> <token|torn>               Inbox: the receiver's handler read the copy it was given
///
/// Times are CLOCK_MONOTONIC nanoseconds, comparable across processes. Tokens name their writer
/// (`<slot>.<generation>.<number>`): a restarted writer is a new generation, so every token is unique in the run.
struct StormLine {
  let verb: Substring
  let fields: [Substring]
  /// The call's start and end; 0 when the line has none.
  let start: UInt64
  let end: UInt64

  init?(_ line: Substring) {
    let parts = line.split(separator: " ")
    guard let verb = parts.first else { return nil }
    self.verb = verb
    let timed: Int
    switch verb {
    case "try": timed = 1
    case "set", "update", "mono", "store", "read", "start", "done", "ack", "activity", "handed": timed = 2
    default: timed = 0
    }
    guard parts.count > timed else { return nil }
    let times = parts.suffix(timed).compactMap { UInt64($0) }
    guard times.count == timed else { return nil }
    fields = Array(parts.dropFirst().dropLast(timed))
    start = times.first ?? 0
    end = timed == 2 ? times[1] : 0
  }

  /// Every complete line of every `*.log` in `directory`, by file name.
  static func read(_ directory: URL) -> [String: [StormLine]] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
    var logs: [String: [StormLine]] = [:]
    for name in names where name.hasSuffix(".log") {
      logs[name] = StressLog(path: directory.appendingPathComponent(name).path).lines().compactMap(StormLine.init)
    }
    return logs
  }
}

/// The cache's images in a storm: a PNG whose headers the cache checks (signature, IHDR 8×1, one IDAT, IEND;
/// CRCs are not checked) and whose IDAT holds the token, a newline and bytes derived from key and token. A reader
/// recomputes the whole image from the token it finds: anything else — a part of an entry, two stores mixed — is
/// torn.
enum StormImage {
  static func bytes(key: String, token: String) -> Data {
    var random = SplitMix64(seed: UInt64(truncatingIfNeeded: StableHash.fnv1a128(Array((key + " " + token).utf8))))
    var payload = Array((token + "\n").utf8)
    // 1 to 48 KB: large enough that a write is several pages, small enough that a trim keeps up.
    for _ in 0..<Int.random(in: 1_000...48_000, using: &random) {
      payload.append(UInt8.random(in: 0...255, using: &random))
    }
    var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    func chunk(_ type: String, _ body: [UInt8]) {
      let length = UInt32(body.count)
      png += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: length >> $0) }
      png += Array(type.utf8) + body + [0, 0, 0, 0]
    }
    chunk("IHDR", [0, 0, 0, 8, 0, 0, 0, 1, 8, 0, 0, 0, 0])
    chunk("IDAT", payload)
    chunk("IEND", [])
    return Data(png)
  }

  /// The token of an image `bytes` made for `key`; nil when the bytes are not exactly such an image (torn).
  static func token(in data: Data, key: String) -> String? {
    let bytes = Array(data)
    let start = 8 + 25 + 8  // signature, IHDR chunk, IDAT's length and type
    guard bytes.count > start, let newline = bytes[start...].firstIndex(of: 0x0A) else { return nil }
    let token = String(decoding: bytes[start..<newline], as: UTF8.self)
    return Self.bytes(key: key, token: token) == data ? token : nil
  }
}

/// The files a storm hands over to the Inbox: the token's line, repeated to 8 KiB or more (several pages: a torn
/// copy shows).
enum StormInboxFile {
  static func bytes(token: String) -> [UInt8] {
    let line = Array((token + "\n").utf8)
    return Array(repeating: line, count: 8192 / line.count + 1).flatMap { $0 }
  }

  /// The token of a file `bytes` made; nil when the bytes are not exactly such a file (torn).
  static func token(in bytes: [UInt8]) -> String? {
    guard let newline = bytes.firstIndex(of: 0x0A) else { return nil }
    let token = String(decoding: bytes[..<newline], as: UTF8.self)
    return Self.bytes(token: token) == bytes ? token : nil
  }
}

/// What `stress storm` calls a hang: a call that took longer than its documented bound plus `slack`, not counting
/// the time any process of the storm was stopped (SIGSTOP) while it ran — a stopped lock holder may hold others
/// up for as long as it is stopped (lock waits are unbounded, as on Apple platforms).
struct StormBounds {
  /// Stopped intervals (monotonic ns), in order, not overlapping (the storm stops one process at a time).
  var stops: [(UInt64, UInt64)]
  var slack: UInt64

  /// The documented bound of an operation: a coordinated write may wait `presenterTimeout` (5 s) for a stopped
  /// presenter; a cache store on a full disk waits up to 5 s for a trim; an Inbox send, its timeout; the others have
  /// none.
  static func documented(_ verb: Substring) -> UInt64 {
    switch verb {
    case "ack", "store": return 5_000_000_000
    case "handed": return 2_000_000_000  // the storm's senders wait 2 s for an answer
    default: return 0
    }
  }

  func isHung(_ line: StormLine) -> Bool {
    guard line.end > line.start else { return false }
    var stopped: UInt64 = 0
    for (from, to) in stops where from < line.end && to > line.start {
      stopped += min(to, line.end) - max(from, line.start)
    }
    return line.end - line.start - stopped > Self.documented(line.verb) + slack
  }
}
