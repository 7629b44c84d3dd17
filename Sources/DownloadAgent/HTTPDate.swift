/// HTTP-dates (RFC 9110 §5.6.7) as seconds since 1970, for judging whether a Last-Modified is a strong validator
/// (`ResumePolicy.strongLastModified`). Recipients must accept the three formats: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime's
/// (`Sun Nov  6 08:49:37 1994`). Pure: no clock, no locale, no Foundation formatter.
package enum HTTPDate {
  private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

  /// Seconds since 1970 for an HTTP-date in any of the three formats; nil for anything else.
  package static func seconds(_ text: String) -> Int64? {
    guard text.utf8.count <= 64 else { return nil }
    let parts = text.split(separator: " ")
    let day: Int
    let month: Int
    let year: Int
    let time: Substring
    if parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT" {  // IMF-fixdate
      guard let d = number(parts[1], 2...2), let m = months.firstIndex(of: String(parts[2])),
        let y = number(parts[3], 4...4)
      else { return nil }
      (day, month, year, time) = (d, m + 1, y, parts[4])
    } else if parts.count == 4, parts[0].hasSuffix(","), parts[3] == "GMT" {  // RFC 850
      let dmy = parts[1].split(separator: "-", omittingEmptySubsequences: false)
      guard dmy.count == 3, let d = number(dmy[0], 2...2), let m = months.firstIndex(of: String(dmy[1])),
        let yy = number(dmy[2], 2...2)
      else { return nil }
      // Two digits: the nearer century (a fixed pivot; such dates are decades old by now).
      (day, month, year, time) = (d, m + 1, yy < 70 ? 2000 + yy : 1900 + yy, parts[2])
    } else if parts.count == 5 {  // asctime
      guard let m = months.firstIndex(of: String(parts[1])), let d = number(parts[2], 1...2),
        let y = number(parts[4], 4...4)
      else { return nil }
      (day, month, year, time) = (d, m + 1, y, parts[3])
    } else {
      return nil
    }
    let hms = time.split(separator: ":", omittingEmptySubsequences: false)
    guard hms.count == 3, let h = number(hms[0], 2...2), let mi = number(hms[1], 2...2),
      let s = number(hms[2], 2...2), h <= 23, mi <= 59, s <= 60, (1...31).contains(day)
    else { return nil }
    return Int64(daysSince1970(year: year, month: month, day: day)) * 86_400 + Int64(h * 3600 + mi * 60 + s)
  }

  /// Decimal digits only, `count` of them.
  private static func number(_ s: Substring, _ count: ClosedRange<Int>) -> Int? {
    guard count.contains(s.utf8.count), s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
    return Int(s)
  }

  /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's days_from_civil).
  private static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
  }
}
