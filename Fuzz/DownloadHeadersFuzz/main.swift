// libFuzzer harness for the download agent's resume decisions (ResumePolicy: Content-Range, Content-Length, ETag
// and Last-Modified parsing, and what a response head means for a partial). Build and run with
// `Fuzz/run.sh DownloadHeadersFuzz`; seeds are in Fuzz/download-seeds/. A plain `swift build` compiles the stub.
// ResumePolicy.swift beside it is a symlink to the agent's file: the harness links no NIO or BoringSSL.
//
// Input: lines `status`, `requestedFrom`, `state.expectedBytes`, `state.entityTag`, then the response's
// `Content-Range`, `Content-Length`, `ETag`, `Last-Modified` (missing lines are absent headers).
import BackgroundDownloads

#if FUZZING
  import CFuzzShim
  import Glibc

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let raw = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    let lines = raw.split(separator: 0x0A, omittingEmptySubsequences: false).map {
      String(decoding: $0, as: UTF8.self)
    }
    func line(_ i: Int) -> String? { i < lines.count && !lines[i].isEmpty ? lines[i] : nil }

    // Every header parser on every line: accepted values keep their invariants.
    for text in lines {
      if let range = ResumePolicy.parseContentRange(text) {
        switch range {
        case .range(let first, let last, let total):
          precondition(first >= 0 && first <= last, "bad range \(range) from '\(text)'")
          if let total { precondition(last < total, "last beyond total \(range) from '\(text)'") }
          let again = "bytes \(first)-\(last)/\(total.map(String.init) ?? "*")"
          precondition(ResumePolicy.parseContentRange(again) == range, "no round trip for \(range)")
        case .unsatisfied(let total):
          precondition(total >= 0)
          precondition(ResumePolicy.parseContentRange("bytes */\(total)") == range)
        }
      }
      if let length = ResumePolicy.parseLength(text) { precondition(length >= 0) }
      if let tag = ResumePolicy.strongETag(text) {
        precondition(tag.utf8.first == 0x22 && tag.utf8.last == 0x22 && tag.utf8.count >= 2, "weak or bare: \(tag)")
        precondition(!tag.utf8.contains(0x0D) && !tag.utf8.contains(0x0A))
      }
      if let date = ResumePolicy.httpDate(text) {
        precondition(date.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F })
      }
    }

    let status = line(0).flatMap { Int($0.prefix(4)) } ?? 200
    let requestedFrom = max(0, line(1).flatMap { Int64($0.prefix(18)) } ?? 0)
    var state = ResumeState(
      receivedBytes: requestedFrom,
      expectedBytes: line(2).flatMap { Int64($0.prefix(18)) }.map { max(requestedFrom, $0) },
      entityTag: ResumePolicy.strongETag(line(3)))
    if state.entityTag == nil && requestedFrom > 0 { state.lastModified = "Sat, 01 Jan 2022 00:00:00 GMT" }
    let head = ResumePolicy.Head(
      status: status, contentRange: line(4), contentLength: line(5), etag: line(6), lastModified: line(7))
    let decision = ResumePolicy.decide(head, requestedFrom: requestedFrom, state: state)
    switch decision {
    case .append(let from, let next):
      precondition(status == 206, "append for status \(status)")
      precondition(from == requestedFrom && next.receivedBytes == from, "append elsewhere than asked: \(decision)")
      if let total = next.expectedBytes { precondition(from < total, "append at or past the end: \(decision)") }
      if requestedFrom > 0, let ours = state.entityTag {
        precondition(ResumePolicy.strongETag(head.etag) == ours, "append across entities: \(decision)")
      }
      checkHeaders(next)
    case .replace(let next):
      precondition((200..<300).contains(status) && status != 206, "replace for status \(status)")
      precondition(next.receivedBytes == 0 && next.durableBytes == 0)
      checkHeaders(next)
    case .complete:
      precondition(status == 416 && requestedFrom > 0, "complete without a 416 for a range")
    case .restart:
      precondition(status == 206 || status == 416, "restart for status \(status)")
    case .httpError(let code):
      precondition(code == status && !(200..<300).contains(code) && code != 416)
    }
    return 0
  }

  /// What the next request would send from a state built from server headers: never a CR or LF (header
  /// injection), a Range only with an If-Range.
  func checkHeaders(_ state: ResumeState) {
    var resumed = state
    resumed.receivedBytes = 12345
    let headers = ResumePolicy.requestHeaders(resumed)
    for (name, value) in headers {
      precondition(!value.utf8.contains(0x0D) && !value.utf8.contains(0x0A), "CR/LF in \(name): \(value)")
    }
    let hasRange = headers.contains { $0.name == "Range" }
    let hasIfRange = headers.contains { $0.name == "If-Range" }
    precondition(hasRange == hasIfRange, "Range without If-Range: \(headers)")
  }

  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, { fuzzOne($0, $1) }))
#else
  print("DownloadHeadersFuzz was built without libFuzzer; build and run it with Fuzz/run.sh.")
#endif
