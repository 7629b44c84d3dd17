import Foundation

/// The one door from bytes another process wrote to `JSONDecoder`: a record, a message or a stored value is refused
/// with an error before Foundation sees a number it would stop the process on.
///
/// Foundation's `JSONDecoder` (swift-foundation 6.x, `_slowpath_unwrapFixedWidthInteger`) reads an integer written
/// with a fraction or an exponent as a `Double`; when that double is whole and at least 2^53 it reads the text again as
/// a `Decimal`, whose parser traps (SIGILL) once its exponent leaves `Int8` — after about 128 digits that do not fit
/// its 38-digit mantissa, as in `9007199254740993` followed by 200 zeros and `e-200`, or `0.` and 113 zeros before
/// `9007199254740993e129`. Any `Int` field of a `Codable` type read from the container would let a member of the
/// group stop every process that reads it. Such a number has an exponent and more than 38 digits before it; no
/// encoder writes one (`JSONEncoder` writes at most 17 digits with an exponent, and a `Decimal` without one), so
/// those are refused, and nothing else is.
package enum UntrustedJSON {
  /// Digits a `Decimal` mantissa holds.
  static let decimalDigits = 38

  /// The rule: a number written with `digits` digits before its exponent (if `hasExponent`) is refused. Hand-written
  /// readers that stand in for JSONDecoder give up on the same numbers, so both routes refuse them alike.
  package static func refuses(digits: Int, hasExponent: Bool) -> Bool { hasExponent && digits > decimalDigits }

  /// `JSONDecoder().decode(type, from: bytes)`, or an error naming the number it would stop the process on.
  package static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) throws -> T {
    let data = Data(bytes)
    if let number = data.withUnsafeBytes({ numberFoundationStopsOn(in: $0.bindMemory(to: UInt8.self)) }) {
      throw DecodingError.dataCorrupted(
        .init(
          codingPath: [],
          debugDescription: "refused before JSONDecoder: the number \(number.prefix(60))… has an "
            + "exponent and more than \(decimalDigits) digits (Foundation stops the process on some of these)"))
    }
    return try JSONDecoder().decode(type, from: data)
  }

  /// The first number outside strings written with an exponent and more than 38 digits before it, nil when there is
  /// none. Conservative: it reads number-like bytes anywhere outside strings, valid JSON or not.
  package static func numberFoundationStopsOn(in bytes: UnsafeBufferPointer<UInt8>) -> String? {
    var i = 0
    var inString = false
    while i < bytes.count {
      let byte = bytes[i]
      if inString {
        if byte == UInt8(ascii: "\\") {
          i += 2
          continue
        }
        if byte == UInt8(ascii: "\"") { inString = false }
        i += 1
        continue
      }
      if byte == UInt8(ascii: "\"") {
        inString = true
        i += 1
        continue
      }
      guard byte == UInt8(ascii: "-") || byte &- UInt8(ascii: "0") < 10 else {
        i += 1
        continue
      }
      let start = i
      var digits = 0
      var exponent = false
      while i < bytes.count {
        let c = bytes[i]
        if c &- UInt8(ascii: "0") < 10 {
          if !exponent { digits += 1 }
        } else if c | 0x20 == UInt8(ascii: "e") {
          exponent = true
        } else if c != UInt8(ascii: ".") && c != UInt8(ascii: "-") && c != UInt8(ascii: "+") {
          break
        }
        i += 1
      }
      if refuses(digits: digits, hasExponent: exponent) {
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
      }
    }
    return nil
  }
}
