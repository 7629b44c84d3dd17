/// A hexadecimal digit's value, for every reader of hex in text but PropertyList's: JSON's `\uXXXX` (JSONScanner),
/// percent escapes in URLs (OpenURLRule), the run time's private discriminators (TypeName), and the names this
/// package writes in lower-case hex (task ids, image cache entries). PropertyList keeps its own checks: it depends on
/// no other module (its codec is fuzzed alone).
package enum HexDigits {
  /// The value (0–15) of `byte` read as a hex digit, `0`–`9`, `a`–`f` or `A`–`F`; nil for any other byte.
  @inlinable package static func value(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte &- UInt8(ascii: "A") &+ 10
    default: lowercaseValue(byte)
    }
  }

  /// The value (0–15) of `byte` read as a lower-case hex digit, `0`–`9` or `a`–`f`, the form of the names this
  /// package writes (an upper-case one names another file); nil for any other byte.
  @inlinable package static func lowercaseValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte &- UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte &- UInt8(ascii: "a") &+ 10
    default: nil
    }
  }
}
