/// A point in time as property lists store it: seconds since 2001-01-01T00:00:00Z.
///
/// Kept Foundation-free on purpose; convert with `secondsSince1970` or `Date(timeIntervalSinceReferenceDate:)`.
public struct PropertyListDate: Sendable, Hashable, Comparable {
  /// Seconds between 1970-01-01T00:00:00Z and the reference date 2001-01-01T00:00:00Z.
  public static let referenceDateSince1970: Double = 978_307_200

  /// Seconds since 2001-01-01T00:00:00Z (negative before it), exactly as stored in `bplist00`.
  public var secondsSinceReferenceDate: Double

  /// Creates a date from seconds since 2001-01-01T00:00:00Z.
  public init(secondsSinceReferenceDate: Double) {
    self.secondsSinceReferenceDate = secondsSinceReferenceDate
  }

  /// Creates a date from Unix time (seconds since 1970-01-01T00:00:00Z).
  public init(secondsSince1970: Double) {
    self.secondsSinceReferenceDate = secondsSince1970 - Self.referenceDateSince1970
  }

  /// Unix time (seconds since 1970-01-01T00:00:00Z).
  public var secondsSince1970: Double {
    secondsSinceReferenceDate + Self.referenceDateSince1970
  }

  /// Creates a date from UTC calendar fields (proleptic Gregorian, years 1...9999);
  /// `nil` when a field is out of range, e.g. February 30.
  public init?(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0) {
    guard (1...9999).contains(year), (1...12).contains(month),
      (1...CivilCalendar.daysInMonth(year: year, month: month)).contains(day),
      (0...23).contains(hour), (0...59).contains(minute), (0...59).contains(second)
    else { return nil }
    let days = CivilCalendar.daysSince1970(year: year, month: month, day: day)
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
    self.init(secondsSince1970: Double(seconds))
  }

  /// UTC calendar fields of this date, with the fractional second dropped (rounded toward the
  /// past); `nil` when the date is not finite or falls outside years 1...9999.
  public var components: (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int)? {
    // Work from the stored value: going through Unix time first would round tiny offsets away.
    let seconds = secondsSinceReferenceDate
    // Check the range while still a Double so the Int conversion below cannot trap.
    guard seconds.isFinite, seconds >= CivilCalendar.minimumSeconds - Self.referenceDateSince1970,
      seconds < CivilCalendar.endSeconds - Self.referenceDateSince1970
    else { return nil }
    // Round toward the past by hand (truncation, then one step down for negatives) rather
    // than with `rounded(.down)`, which would make the module depend on libm.
    var whole = Int(seconds)
    if Double(whole) > seconds { whole -= 1 }
    let total = whole + Int(Self.referenceDateSince1970)
    var days = total / 86_400
    var rest = total % 86_400
    if rest < 0 {
      rest += 86_400
      days -= 1
    }
    let (year, month, day) = CivilCalendar.civil(daysSince1970: days)
    return (year, month, day, rest / 3_600, rest % 3_600 / 60, rest % 60)
  }

  /// `YYYY-MM-DDTHH:MM:SSZ` (UTC, fractional seconds dropped, as Apple's and Python's XML plists and
  /// `ISO8601DateFormatter` write it); nil when not finite or outside years 1...9999.
  public var iso8601: String? {
    guard let parts = components else { return nil }
    // Twenty ASCII bytes, written in place (a string per field was most of `groupctl activities watch`'s line).
    var text: [UInt8] = []
    text.reserveCapacity(20)
    func put(_ value: Int, _ width: Int, _ separator: UInt8) {
      var divisor = 1
      for _ in 1..<width { divisor *= 10 }
      var rest = value  // in range: years 1...9999, the other fields fewer than 100
      while divisor > 0 {
        text.append(UInt8(ascii: "0") + UInt8(rest / divisor))
        rest %= divisor
        divisor /= 10
      }
      text.append(separator)
    }
    put(parts.year, 4, UInt8(ascii: "-"))
    put(parts.month, 2, UInt8(ascii: "-"))
    put(parts.day, 2, UInt8(ascii: "T"))
    put(parts.hour, 2, UInt8(ascii: ":"))
    put(parts.minute, 2, UInt8(ascii: ":"))
    put(parts.second, 2, UInt8(ascii: "Z"))
    return String(decoding: text, as: UTF8.self)
  }

  /// Orders chronologically.
  public static func < (lhs: PropertyListDate, rhs: PropertyListDate) -> Bool {
    lhs.secondsSinceReferenceDate < rhs.secondsSinceReferenceDate
  }
}

/// Proleptic Gregorian day arithmetic (the well-known "days from civil" algorithm).
enum CivilCalendar {
  /// Unix time of 0001-01-01T00:00:00Z.
  static let minimumSeconds = Double(daysSince1970(year: 1, month: 1, day: 1) * 86_400)
  /// Unix time of 10000-01-01T00:00:00Z (first instant past the supported range).
  static let endSeconds = Double(daysSince1970(year: 10_000, month: 1, day: 1) * 86_400)

  static func isLeap(_ year: Int) -> Bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
  }

  static func daysInMonth(year: Int, month: Int) -> Int {
    switch month {
    case 2: return isLeap(year) ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
  }

  /// Days from 1970-01-01 to the given date (callers keep the year within a few thousand).
  static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  /// Inverse of `daysSince1970(year:month:day:)`.
  static func civil(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let mp = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    return (year, month, day)
  }
}
