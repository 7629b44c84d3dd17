// What a request asks for: the target split into path and query, the fault switches, the Range header.

/// A request target split at `?`; the query as ordered key/value pairs (percent-decoded).
struct Target {
  var path: String
  var query: [(key: String, value: String)]
  /// What follows `?`, as sent (nil without a `?`).
  var rawQuery: String?

  init(_ uri: String) {
    let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
    path = String(parts[0])
    query = []
    guard parts.count == 2 else { return }
    rawQuery = String(parts[1])
    for pair in parts[1].split(separator: "&") where !pair.isEmpty {
      let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      query.append(
        (percentDecoded(kv[0]) ?? String(kv[0]), kv.count == 2 ? (percentDecoded(kv[1]) ?? String(kv[1])) : ""))
    }
  }

  func value(_ key: String) -> String? { query.last(where: { $0.key == key })?.value }
}

/// `%XX` decoding (and nothing else: `+` stays `+`); nil when an escape is malformed.
func percentDecoded<S: StringProtocol>(_ text: S) -> String? {
  var bytes: [UInt8] = []
  var iterator = Array(text.utf8).makeIterator()
  while let c = iterator.next() {
    guard c == UInt8(ascii: "%") else {
      bytes.append(c)
      continue
    }
    guard let h = iterator.next().flatMap(hexValue), let l = iterator.next().flatMap(hexValue) else { return nil }
    bytes.append(h << 4 | l)
  }
  return String(validating: bytes, as: UTF8.self)
}

private func hexValue(_ c: UInt8) -> UInt8? {
  switch c {
  case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
  case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
  case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
  default: nil
  }
}

/// A query parameter that is not what its switch expects: answered 400 with this text.
struct BadRequest: Error {
  var message: String
}

/// The fault switches of a request (see main.swift). `faults=K` is applied by the caller: when a request is past
/// its first K, it gets `Faults()` (none).
struct Faults {
  var limit: Int?  // faults=K
  var drop: Int64?
  var stall: Int64?
  var rate: Int64?
  var noRange = false
  var rotate = false
  var weak = false
  var noETag = false
  var noLastModified = false
  var ignoreIfRange = false
  var bare206 = false
  var status: Int?
  var delayMilliseconds: Int64?
  var chunked = false
  var claimedLength: Int64?

  init() {}

  /// What a request past the first K of `faults=K` gets: no faults, but the server's own misbehaviour
  /// (`ifrange=ignore`, `bare206=1`) stays — it is how this server answers, not a passing fault.
  var pastLimit: Faults {
    var kept = Faults()
    kept.ignoreIfRange = ignoreIfRange
    kept.bare206 = bare206
    return kept
  }

  init(_ target: Target) throws(BadRequest) {
    func number(_ key: String, _ range: ClosedRange<Int64> = 0...Int64.max) throws(BadRequest) -> Int64? {
      guard let text = target.value(key) else { return nil }
      guard let value = Int64(text), range.contains(value) else {
        throw BadRequest(
          message:
            "bad query parameter \(key)=\(text): expected an integer in \(range.lowerBound)...\(range.upperBound)")
      }
      return value
    }
    func flag(_ key: String) throws(BadRequest) -> Bool {
      guard let text = target.value(key) else { return false }
      switch text {
      case "1", "true", "": return true
      case "0", "false": return false
      default: throw BadRequest(message: "bad query parameter \(key)=\(text): expected 1 or 0")
      }
    }
    limit = try number("faults").map { Int($0) }
    drop = try number("drop")
    stall = try number("stall")
    rate = try number("rate", 1...Int64.max)
    noRange = try flag("norange")
    switch target.value("etag") {
    case nil: break
    case "rotate": rotate = true
    case let other?: throw BadRequest(message: "bad query parameter etag=\(other): the only value is rotate")
    }
    weak = try flag("weak")
    noETag = try flag("noetag")
    noLastModified = try flag("nolm")
    switch target.value("ifrange") {
    case nil: break
    case "ignore": ignoreIfRange = true
    case let other?: throw BadRequest(message: "bad query parameter ifrange=\(other): the only value is ignore")
    }
    bare206 = try flag("bare206")
    status = try number("status", 100...599).map { Int($0) }
    delayMilliseconds = try number("delay")
    chunked = try flag("chunked")
    claimedLength = try number("length")
  }
}

/// The single byte range a `Range` header asks for, resolved against the entity's size.
enum RangeRequest: Equatable {
  /// No usable Range (absent, malformed, several ranges, not bytes): the whole entity, 200.
  case whole
  /// Bytes `lower...upper` (inclusive), 206.
  case partial(lower: Int64, upper: Int64)
  /// Start at or past the end (or a zero-length suffix): 416.
  case unsatisfiable

  init(header: String?, size: Int64) {
    guard let header else {
      self = .whole
      return
    }
    let trimmed = header.trimmingSpaces
    guard trimmed.lowercased().hasPrefix("bytes=") else {
      self = .whole
      return
    }
    let spec = trimmed.dropFirst("bytes=".count).trimmingSpaces
    guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
      self = .whole
      return
    }
    let first = spec[..<dash].trimmingSpaces
    let last = spec[spec.index(after: dash)...].trimmingSpaces
    if first.isEmpty {
      // bytes=-n: the last n bytes.
      guard let n = Int64(last), n >= 0 else {
        self = .whole
        return
      }
      self = n == 0 || size == 0 ? .unsatisfiable : .partial(lower: max(0, size - n), upper: size - 1)
      return
    }
    guard let a = Int64(first), a >= 0 else {
      self = .whole
      return
    }
    var b = size - 1
    if !last.isEmpty {
      guard let value = Int64(last), value >= a else {
        self = .whole
        return
      }
      b = min(value, size - 1)
    }
    self = a >= size ? .unsatisfiable : .partial(lower: a, upper: b)
  }
}

extension StringProtocol {
  var trimmingSpaces: String {
    String(drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())
  }
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for seconds since 1970.
func httpDate(_ seconds: Int64) -> String {
  let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
  let secondOfDay = seconds - days * 86_400
  // Civil date from days since 1970-01-01 (Howard Hinnant's days_from_civil, inverted).
  let z = days + 719_468
  let era = (z >= 0 ? z : z - 146_096) / 146_097
  let doe = z - era * 146_097
  let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
  let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
  let mp = (5 * doy + 2) / 153
  let day = doy - (153 * mp + 2) / 5 + 1
  let month = mp < 10 ? mp + 3 : mp - 9
  let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
  let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1970-01-01 was a Thursday
  let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
  let weekday = weekdays[Int(((days % 7) + 7) % 7)]
  func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
  return
    "\(weekday), \(two(day)) \(months[Int(month - 1)]) \(year) \(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
}
