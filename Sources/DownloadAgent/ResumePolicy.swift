import BackgroundDownloads

/// The pure decisions of a resumable download (RFC 9110 §14 ranges, §13.1.5 If-Range): which headers a request
/// sends from a `ResumeState`, and what a response head means for the partial file. No I/O, so the fuzz harness
/// (`Fuzz/DownloadHeadersFuzz`) and the unit tests reach every branch.
package enum ResumePolicy {
  /// Longest header value looked at; anything longer is refused, not parsed.
  static let maxHeaderBytes = 1024

  // MARK: Requests

  /// The byte the next request starts at: `receivedBytes` when there is a validator for `If-Range`, else 0 (a
  /// range without a validator could splice two versions of the entity).
  package static func requestStart(_ state: ResumeState) -> Int64 {
    state.receivedBytes > 0 && state.ifRangeValidator != nil ? state.receivedBytes : 0
  }

  /// The headers of the next request: none from 0; `Range: bytes=<received>-` with `If-Range: <strong ETag, else
  /// Last-Modified>` to resume. `Accept-Encoding: identity` always (byte offsets are offsets of the stored bytes).
  package static func requestHeaders(_ state: ResumeState) -> [(name: String, value: String)] {
    var headers: [(name: String, value: String)] = [("Accept-Encoding", "identity")]
    let start = requestStart(state)
    if start > 0, let validator = state.ifRangeValidator {
      headers.append(("Range", "bytes=\(start)-"))
      headers.append(("If-Range", validator))
    }
    return headers
  }

  // MARK: Responses

  /// The response head fields the decision reads (already extracted: first value of each).
  package struct Head: Sendable, Equatable {
    package var status: Int
    package var contentRange: String?
    package var contentLength: String?
    package var etag: String?
    package var lastModified: String?
    /// The `Date` header: only with it can a Last-Modified be a strong validator.
    package var date: String?
    package init(
      status: Int, contentRange: String? = nil, contentLength: String? = nil, etag: String? = nil,
      lastModified: String? = nil, date: String? = nil
    ) {
      self.status = status
      self.contentRange = contentRange
      self.contentLength = contentLength
      self.etag = etag
      self.lastModified = lastModified
      self.date = date
    }
  }

  /// What a response head means for the partial file.
  package enum Decision: Sendable, Equatable {
    /// 206 continuing exactly where the partial ends: append the body at `from`. `state` carries the entity's
    /// length and validators.
    case append(from: Int64, state: ResumeState)
    /// A whole entity (200, or any 2xx but 206): truncate the partial and write the body from 0. `state` is fresh
    /// (received 0) with the new entity's length and validators.
    case replace(state: ResumeState)
    /// 416 saying the entity has exactly the bytes the partial holds: nothing to fetch, go to verification.
    case complete
    /// The answer cannot continue this partial (416 for another length, changed validators, a Content-Range that
    /// contradicts the request): start again from 0 with a new request — once; a second time is a protocol
    /// violation (`reason` says what happened).
    case restart(reason: String)
    /// Not 2xx: the task fails with this status; the body is discarded.
    case httpError(Int)
  }

  /// Decides what the head `head` means for a request that started at `requestedFrom` (0: no Range sent) from
  /// `state`.
  package static func decide(_ head: Head, requestedFrom: Int64, state: ResumeState) -> Decision {
    switch head.status {
    case 206:
      guard let range = head.contentRange.flatMap(parseContentRange),
        case .range(let first, let last, let total) = range
      else {
        return .restart(reason: "a 206 answer without a valid single Content-Range ('\(head.contentRange ?? "")')")
      }
      guard first == requestedFrom else {
        return .restart(reason: "asked for bytes from \(requestedFrom), the server sent \(first)-\(last)")
      }
      if let known = state.expectedBytes, requestedFrom > 0, total.map({ $0 != known }) ?? (last >= known) {
        return .restart(reason: "the entity's length changed from \(known) bytes (Content-Range \(first)-\(last))")
      }
      if requestedFrom > 0 && !sameEntity(head, state) {
        return .restart(reason: "a 206 answer for another version of the entity (validators changed)")
      }
      if let length = head.contentLength.flatMap(parseLength), length != last - first + 1 {
        return .restart(reason: "Content-Length \(length) contradicts Content-Range \(first)-\(last)")
      }
      var next = requestedFrom > 0 ? state : ResumeState(bootID: state.bootID)
      next.receivedBytes = requestedFrom
      next.durableBytes = min(state.durableBytes, requestedFrom)
      next.expectedBytes = total ?? (requestedFrom > 0 ? state.expectedBytes : nil)
      if requestedFrom == 0 {
        next.entityTag = strongETag(head.etag)
        next.lastModified = strongLastModified(head)
      }
      return .append(from: requestedFrom, state: next)
    case 416:
      // The partial may already hold the whole entity (killed after the last byte, before publishing).
      if requestedFrom > 0, let range = head.contentRange.flatMap(parseContentRange),
        case .unsatisfied(let total) = range, total == requestedFrom,
        state.expectedBytes.map({ $0 == total }) ?? true
      {
        return .complete
      }
      return .restart(reason: "the server refused the range from byte \(requestedFrom) (416)")
    case 200..<300:
      var next = ResumeState(bootID: state.bootID)
      next.expectedBytes = head.contentLength.flatMap(parseLength)
      next.entityTag = strongETag(head.etag)
      next.lastModified = strongLastModified(head)
      return .replace(state: next)
    default:
      return .httpError(head.status)
    }
  }

  /// Whether a 206 answer proves it is for the entity the partial holds: it echoes our strong ETag when that was
  /// our validator, else our (strong) Last-Modified. A 206 that proves nothing is not trusted: a server that
  /// ignores a failed `If-Range` (breaking RFC 9110) would otherwise splice two versions into one file.
  static func sameEntity(_ head: Head, _ state: ResumeState) -> Bool {
    if let ours = state.entityTag {
      return strongETag(head.etag) == ours
    }
    if let ours = state.lastModified {
      return httpDate(head.lastModified) == ours
    }
    return false
  }

  /// The head's Last-Modified when it is a strong validator (RFC 9110 §8.8.2.2): at least one second before the
  /// head's `Date`. Else nil: an entity changed twice within its Last-Modified second keeps the same date, so a
  /// range validated by it could splice two versions (and §13.1.5 forbids sending it in `If-Range`).
  package static func strongLastModified(_ head: Head) -> String? {
    guard let value = httpDate(head.lastModified), let modified = HTTPDate.seconds(value),
      let date = head.date.flatMap({ HTTPDate.seconds($0) }), modified <= date - 1
    else { return nil }
    return value
  }

  // MARK: Header parsing

  /// A parsed `Content-Range` (RFC 9110 §14.4): `bytes first-last/total` (total `*` = unknown) or
  /// `bytes */total` (the 416 form).
  package enum ContentRange: Sendable, Equatable {
    case range(first: Int64, last: Int64, total: Int64?)
    case unsatisfied(total: Int64)
  }

  /// Parses `Content-Range`; nil for anything malformed: other units, `last < first`, `last ≥ total`, numbers
  /// that overflow, signs, spaces inside numbers, values over `maxHeaderBytes`.
  package static func parseContentRange(_ value: String) -> ContentRange? {
    guard value.utf8.count <= maxHeaderBytes else { return nil }
    var s = Substring(value).trimmingSpaces()
    guard s.lowercased().hasPrefix("bytes ") else { return nil }
    s = s.dropFirst(6).trimmingSpaces()
    guard let slash = s.firstIndex(of: "/") else { return nil }
    let rangePart = s[..<slash]
    let totalPart = s[s.index(after: slash)...]
    let total: Int64?
    if totalPart == "*" {
      total = nil
    } else {
      guard let t = parseDigits(totalPart) else { return nil }
      total = t
    }
    if rangePart == "*" {
      guard let total else { return nil }
      return .unsatisfied(total: total)
    }
    guard let dash = rangePart.firstIndex(of: "-"),
      let first = parseDigits(rangePart[..<dash]),
      let last = parseDigits(rangePart[rangePart.index(after: dash)...]),
      first <= last
    else { return nil }
    if let total, last >= total { return nil }
    return .range(first: first, last: last, total: total)
  }

  /// `Content-Length`: digits only, no sign, fits Int64.
  package static func parseLength(_ value: String) -> Int64? {
    guard value.utf8.count <= 32 else { return nil }
    return parseDigits(Substring(value).trimmingSpaces())
  }

  /// The entity tag if it is a strong one (`"…"`, RFC 9110 §8.8.3: no `W/`, quoted, only etagc characters),
  /// else nil: a weak tag can never validate a range.
  package static func strongETag(_ value: String?) -> String? {
    guard let value, value.utf8.count <= maxHeaderBytes else { return nil }
    let s = Substring(value).trimmingSpaces()
    let bytes = Array(s.utf8)
    guard bytes.count >= 2, bytes.first == 0x22, bytes.last == 0x22 else { return nil }
    // etagc = %x21 / %x23-7E / obs-text (%x80-FF); no DQUOTE inside.
    for b in bytes[1..<(bytes.count - 1)] where !(b == 0x21 || (b >= 0x23 && b <= 0x7E) || b >= 0x80) {
      return nil
    }
    return String(s)
  }

  /// A Last-Modified value usable as an `If-Range` validator: sent back exactly as received, so only checked to
  /// be a plausible HTTP-date (printable ASCII, 1 to 64 bytes) — a header with a CR/LF must never reach a request.
  package static func httpDate(_ value: String?) -> String? {
    guard let value else { return nil }
    let s = Substring(value).trimmingSpaces()
    guard !s.isEmpty, s.utf8.count <= 64, s.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
    return String(s)
  }

  /// Decimal digits only (1 to 18 of them: fits Int64 without overflow checks).
  static func parseDigits(_ s: Substring) -> Int64? {
    guard !s.isEmpty, s.utf8.count <= 18 else { return nil }
    var value: Int64 = 0
    for b in s.utf8 {
      guard b >= 0x30 && b <= 0x39 else { return nil }
      value = value * 10 + Int64(b - 0x30)
    }
    return value
  }
}

extension Substring {
  fileprivate func trimmingSpaces() -> Substring {
    var s = self
    while s.first == " " || s.first == "\t" { s = s.dropFirst() }
    while s.last == " " || s.last == "\t" { s = s.dropLast() }
    return s
  }
}
