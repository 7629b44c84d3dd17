import BackgroundDownloads
import DownloadAgent
import TestSupport
import Testing

/// The pure resume decisions (RFC 9110 ranges and If-Range) without a network.
///
/// Mutants this suite catches (each run once and seen failing): `If-Range` not sent
/// (`resumeSendsRangeAndStrongETag`, `lastModifiedWhenNoETag`); every non-2xx status taken as a whole entity
/// (`errorStatusesAreNotDownloads`); a 206 with other validators appended (`sameEntity` always true:
/// `contradicting206Restarts`); a 206 without the Last-Modified we validated with appended (`sameEntity` true when
/// the head has none: `a206MustEchoTheLastModified`); a Last-Modified kept whatever the Date
/// (`lastModifiedIsAValidatorOnlyASecondBeforeDate`).
@Suite(.runSlot(.minutes(10))) struct ResumePolicyTests {
  let etag = "\"g-100-1\""
  let date = "Sat, 01 Jan 2022 00:00:00 GMT"
  /// A Date long after `date`: `date` is a strong validator in an answer carrying it.
  let later = "Sun, 01 Jan 2023 00:00:00 GMT"

  @Test func freshRequestHasNoRange() {
    let headers = ResumePolicy.requestHeaders(ResumeState())
    #expect(!headers.contains { $0.name == "Range" })
    #expect(ResumePolicy.requestStart(ResumeState()) == 0)
  }

  @Test func resumeSendsRangeAndStrongETag() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100, entityTag: etag, lastModified: date)
    let headers = ResumePolicy.requestHeaders(state)
    #expect(headers.first { $0.name == "Range" }?.value == "bytes=40-")
    #expect(headers.first { $0.name == "If-Range" }?.value == etag)
  }

  @Test func lastModifiedWhenNoETag() {
    let state = ResumeState(receivedBytes: 40, lastModified: date)
    #expect(ResumePolicy.requestHeaders(state).first { $0.name == "If-Range" }?.value == date)
  }

  @Test func noValidatorMeansNoRange() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100)
    #expect(ResumePolicy.requestStart(state) == 0)
    #expect(!ResumePolicy.requestHeaders(state).contains { $0.name == "Range" || $0.name == "If-Range" })
  }

  @Test func weakETagIsNeverAValidator() {
    #expect(ResumePolicy.strongETag("W/\"abc\"") == nil)
    #expect(ResumePolicy.strongETag("abc") == nil)
    #expect(ResumePolicy.strongETag("\"a\"b\"") == nil)
    #expect(ResumePolicy.strongETag("\"abc\"") == "\"abc\"")
    // A 200 with a weak ETag and no Last-Modified leaves nothing to resume with.
    let decision = ResumePolicy.decide(
      .init(status: 200, contentLength: "100", etag: "W/\"abc\""), requestedFrom: 0, state: ResumeState())
    guard case .replace(let next) = decision else {
      Issue.record("expected replace, got \(decision)")
      return
    }
    #expect(next.entityTag == nil && next.ifRangeValidator == nil)
  }

  @Test func matching206Appends() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100, entityTag: etag)
    let decision = ResumePolicy.decide(
      .init(status: 206, contentRange: "bytes 40-99/100", contentLength: "60", etag: etag), requestedFrom: 40,
      state: state)
    #expect(decision == .append(from: 40, state: state))
  }

  @Test func contradicting206Restarts() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100, entityTag: etag)
    for head in [
      ResumePolicy.Head(status: 206, contentRange: "bytes 0-99/100", etag: etag),  // not where we asked
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/120", etag: etag),  // another length
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100", etag: "\"other\""),  // another entity
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100", contentLength: "7", etag: etag),
      ResumePolicy.Head(status: 206, contentRange: nil, etag: etag),
    ] {
      let decision = ResumePolicy.decide(head, requestedFrom: 40, state: state)
      guard case .restart = decision else {
        Issue.record("\(head) should restart, got \(decision)")
        continue
      }
    }
  }

  @Test func fullAnswerToARangeReplaces() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100, entityTag: etag)
    let decision = ResumePolicy.decide(
      .init(status: 200, contentLength: "120", etag: "\"new\"", lastModified: date, date: later), requestedFrom: 40,
      state: state)
    #expect(decision == .replace(state: ResumeState(expectedBytes: 120, entityTag: "\"new\"", lastModified: date)))
  }

  @Test func rangeNotSatisfiable() {
    let state = ResumeState(receivedBytes: 100, expectedBytes: 100, entityTag: etag)
    #expect(
      ResumePolicy.decide(.init(status: 416, contentRange: "bytes */100"), requestedFrom: 100, state: state)
        == .complete)
    guard
      case .restart = ResumePolicy.decide(
        .init(status: 416, contentRange: "bytes */150"), requestedFrom: 100, state: state)
    else {
      Issue.record("a 416 for another length must restart")
      return
    }
    guard case .restart = ResumePolicy.decide(.init(status: 416), requestedFrom: 100, state: state) else {
      Issue.record("a 416 without Content-Range must restart")
      return
    }
  }

  @Test func errorStatusesAreNotDownloads() {
    for status in [301, 304, 404, 500, 503] {
      #expect(ResumePolicy.decide(.init(status: status), requestedFrom: 0, state: ResumeState()) == .httpError(status))
    }
  }

  @Test func contentRangeParsing() {
    #expect(ResumePolicy.parseContentRange("bytes 0-9/10") == .range(first: 0, last: 9, total: 10))
    #expect(ResumePolicy.parseContentRange("bytes 5-9/*") == .range(first: 5, last: 9, total: nil))
    #expect(ResumePolicy.parseContentRange("bytes */10") == .unsatisfied(total: 10))
    for bad in [
      "bytes 9-5/10", "bytes 0-10/10", "bytes */*", "items 0-9/10", "bytes -1-9/10", "bytes 0-9/99999999999999999999",
      "bytes 0 -9/10", "bytes 0-9", "", "bytes +1-9/10",
    ] {
      #expect(ResumePolicy.parseContentRange(bad) == nil, "\(bad)")
    }
  }

  @Test func a206MustEchoTheLastModified() {
    let state = ResumeState(receivedBytes: 40, expectedBytes: 100, lastModified: date)
    let echoed = ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100", lastModified: date)
    #expect(ResumePolicy.decide(echoed, requestedFrom: 40, state: state) == .append(from: 40, state: state))
    for head in [
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100"),  // no validator at all
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100", lastModified: later),  // another version
      ResumePolicy.Head(status: 206, contentRange: "bytes 40-99/100", etag: "\"x\""),  // a tag we never had
    ] {
      guard case .restart = ResumePolicy.decide(head, requestedFrom: 40, state: state) else {
        Issue.record("\(head) should restart")
        continue
      }
    }
  }

  @Test func lastModifiedIsAValidatorOnlyASecondBeforeDate() {
    func kept(_ lastModified: String, _ date: String?) -> String? {
      guard
        case .replace(let next) = ResumePolicy.decide(
          .init(status: 200, contentLength: "100", lastModified: lastModified, date: date), requestedFrom: 0,
          state: ResumeState())
      else { return "not a replace" }
      return next.lastModified
    }
    #expect(kept(date, later) == date)
    #expect(kept("Sat, 01 Jan 2022 00:00:00 GMT", "Sat, 01 Jan 2022 00:00:01 GMT") == date)  // exactly 1 s
    #expect(kept(date, date) == nil)  // the same second: could change again within it
    #expect(kept(later, date) == nil)  // after the Date
    #expect(kept(date, nil) == nil)  // no Date: nothing to judge by
    #expect(kept(date, "yesterday") == nil)
    // A 206 from 0 keeps it by the same rule.
    guard
      case .append(_, let next) = ResumePolicy.decide(
        .init(status: 206, contentRange: "bytes 0-99/100", lastModified: date, date: date), requestedFrom: 0,
        state: ResumeState())
    else {
      Issue.record("expected append")
      return
    }
    #expect(next.lastModified == nil)
  }

  @Test func httpDatesInTheirThreeFormats() {
    let seconds: Int64 = 784_111_777  // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example)
    #expect(HTTPDate.seconds("Sun, 06 Nov 1994 08:49:37 GMT") == seconds)
    #expect(HTTPDate.seconds("Sunday, 06-Nov-94 08:49:37 GMT") == seconds)
    #expect(HTTPDate.seconds("Sun Nov  6 08:49:37 1994") == seconds)
    #expect(HTTPDate.seconds("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
    #expect(HTTPDate.seconds("Tue, 29 Feb 2028 23:59:59 GMT") == 1_835_481_599)
    for bad in [
      "", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
      "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49 GMT", "Sun, +6 Nov 1994 08:49:37 GMT",
      "1994-11-06T08:49:37Z", String(repeating: "a", count: 100),
    ] {
      #expect(HTTPDate.seconds(bad) == nil, "\(bad)")
    }
  }

  @Test func lastModifiedWithControlCharactersIsDropped() {
    #expect(ResumePolicy.httpDate("Sat, 01 Jan 2022\r\nX: y") == nil)
    #expect(ResumePolicy.httpDate(date) == date)
  }
}
