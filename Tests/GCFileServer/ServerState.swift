// What the server counts, shared by every connection (two event loops): per request target, the requests, the
// body bytes written to sockets, the Range headers received and the protocol version of each request; and the
// connections accepted.
import Synchronization

struct TargetStats {
  var requests = 0
  var bodyBytes: Int64 = 0
  var ranges: [String] = []
  /// "HTTP/1.1" or "HTTP/2.0" per request, in order: a test proves which protocol a client used.
  var versions: [String] = []
}

final class ServerState: Sendable {
  /// The directory `/files/<name>` serves, nil when none was given.
  let root: String?
  let verbose: Bool
  private let targets = Mutex<[String: TargetStats]>([:])
  /// TCP connections accepted since start or `reset()`: a test proves a client reuses its connections.
  private let accepted = Atomic<Int>(0)

  init(root: String?, verbose: Bool) {
    self.root = root
    self.verbose = verbose
  }

  /// Counts a request to `target` and returns its number for that target (1 for the first since start or reset):
  /// `faults=K` and `etag=rotate` go by it.
  func begin(_ target: String, range: String?, version: String) -> Int {
    targets.withLock { all in
      all[target, default: TargetStats()].requests += 1
      all[target]!.versions.append(version)
      if let range { all[target]!.ranges.append(range) }
      return all[target]!.requests
    }
  }

  /// Adds body bytes written for a request `begin` counted. The count comes when the write completes, which may be
  /// after the client read the reply and reset the stats: such late bytes belong to the counts the reset cleared, so
  /// they never make an entry of their own (one did, and a test's `stats().isEmpty` after a reset failed under load).
  func addBodyBytes(_ count: Int64, to target: String) {
    targets.withLock { all in
      guard all[target] != nil else { return }
      all[target]!.bodyBytes += count
    }
  }

  func reset() {
    targets.withLock { $0.removeAll() }
    accepted.store(0, ordering: .relaxed)
  }

  func connectionAccepted() { accepted.add(1, ordering: .relaxed) }

  var connectionsAccepted: Int { accepted.load(ordering: .relaxed) }

  /// `{"<target>": {"requests": n, "bodyBytes": n, "ranges": ["bytes=0-", …], "versions": ["HTTP/2.0", …]}, …}`,
  /// targets sorted.
  func json() -> String {
    let snapshot = targets.withLock { $0 }
    let entries = snapshot.keys.sorted().map { key in
      let s = snapshot[key]!
      let ranges = s.ranges.map(jsonString).joined(separator: ", ")
      let versions = s.versions.map(jsonString).joined(separator: ", ")
      return "\(jsonString(key)): {\"requests\": \(s.requests), \"bodyBytes\": \(s.bodyBytes), "
        + "\"ranges\": [\(ranges)], \"versions\": [\(versions)]}"
    }
    return "{" + entries.joined(separator: ", ") + "}"
  }
}

func jsonString(_ text: String) -> String {
  var out = "\""
  for scalar in text.unicodeScalars {
    switch scalar {
    case "\"": out += "\\\""
    case "\\": out += "\\\\"
    case "\n": out += "\\n"
    case "\r": out += "\\r"
    case "\t": out += "\\t"
    case let s where s.value < 0x20:
      let hex = String(s.value, radix: 16)
      out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
    default: out.unicodeScalars.append(scalar)
    }
  }
  return out + "\""
}
