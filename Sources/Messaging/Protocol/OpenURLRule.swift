import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The URL rule: what `open(_:)` accepts (and what a receiver re-checks).
package enum OpenURLRule {
  package static let maxBytes = 2048
  package static let maxSchemeBytes = 64

  /// RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), compared in lower case.
  package static func validate(scheme: String) throws(OpenURLError) -> String {
    let lower = scheme.lowercased()
    guard let first = lower.unicodeScalars.first, ("a"..."z").contains(first), lower.utf8.count <= maxSchemeBytes,
      lower.unicodeScalars.allSatisfy({
        ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0)
      })
    else {
      throw .invalidURL(
        scheme, rule: "a scheme is a letter then letters, digits, '+', '-' or '.' (at most \(maxSchemeBytes))")
    }
    return lower
  }

  /// The whole URL: at most 2,048 bytes, only RFC 3986 characters (unreserved, reserved, and '%' with two hex
  /// digits), and a valid scheme. Returns the scheme.
  package static func validate(_ url: String) throws(OpenURLError) -> String {
    guard url.utf8.count <= maxBytes else {
      throw .invalidURL(String(url.prefix(64)) + "…", rule: "it is longer than \(maxBytes) bytes")
    }
    let bytes = Array(url.utf8)
    var i = 0
    while i < bytes.count {
      let b = bytes[i]
      if b == UInt8(ascii: "%") {
        guard i + 2 < bytes.count, HexDigits.value(bytes[i + 1]) != nil, HexDigits.value(bytes[i + 2]) != nil else {
          throw .invalidURL(url, rule: "'%' must be followed by two hex digits")
        }
        i += 3
        continue
      }
      guard isAllowed(b) else {
        let shown = b < 0x80 ? String(UnicodeScalar(b)).debugDescription : String(format: "byte 0x%02X", b)
        throw .invalidURL(url, rule: "\(shown) is not allowed in a URL (RFC 3986): percent-encode it")
      }
      i += 1
    }
    guard let colon = url.firstIndex(of: ":"), colon != url.startIndex else {
      throw .invalidURL(url, rule: "it has no scheme (e.g. simpletimer://finished)")
    }
    let scheme = try validate(scheme: String(url[..<colon]))
    guard URL(string: url) != nil else { throw .invalidURL(url, rule: "it does not parse as a URL") }
    return scheme
  }

  private static func isAllowed(_ b: UInt8) -> Bool {
    (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b)
      || "-._~:/?#[]@!$&'()*+,;=".utf8.contains(b)
  }
}
