/// A type's unqualified name — what `String(describing: type)` gives — for names other processes must match
/// (`ActivityAttributes.activityTypeName`, `AppIntent.intentIdentifier`).
///
/// Not `String(describing:)` itself: it casts the metatype to `TextOutputStreamable`, `CustomStringConvertible`,
/// `CustomReflectable`…, and the first such question about a type in a process has the Swift runtime walk every
/// conformance record loaded — about a dozen walks (0.1–0.2 ms each here) the first time a widget named its activity
/// type (the idle widget benchmark's program: 12 of its 31 at start).
/// `_typeName` reads the name from the metadata; a private type's name carries a discriminator there,
/// `(Name in _0979D566…)`, which `String(describing:)` leaves out, and so does this (TypeNameTests compares the two).
package enum TypeName {
  package static func unqualified(_ type: Any.Type) -> String {
    withoutDiscriminators(_typeName(type, qualified: false))
  }

  /// `name` with each `(Name in _HEX)` as `Name`. (An optimized build's `_typeName` writes them; a debug build's
  /// does not, so the tests check this on the strings themselves too.)
  package static func withoutDiscriminators(_ name: String) -> String {
    guard name.contains(" in _") else { return name }
    var bytes = Array(name.utf8)[...]
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    while let byte = bytes.first {
      if byte == UInt8(ascii: "("), let (kept, rest) = privateName(bytes.dropFirst()) {
        out += kept
        bytes = rest
      } else {
        out.append(byte)
        bytes = bytes.dropFirst()
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// `Name in _HEX)` at the start of `bytes`: the name, and what follows the parenthesis.
  private static func privateName(_ bytes: ArraySlice<UInt8>) -> (ArraySlice<UInt8>, ArraySlice<UInt8>)? {
    let marker = Array(" in _".utf8)
    guard let space = bytes.firstIndex(of: UInt8(ascii: " ")), space > bytes.startIndex,
      bytes[space...].starts(with: marker)
    else { return nil }
    let name = bytes[..<space]
    guard !name.contains(where: { [UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "<")].contains($0) }) else {
      return nil
    }
    var index = space + marker.count
    let hexStart = index
    while index < bytes.endIndex, HexDigits.value(bytes[index]) != nil { index += 1 }
    guard index > hexStart, index < bytes.endIndex, bytes[index] == UInt8(ascii: ")") else { return nil }
    return (name, bytes[(index + 1)...])
  }
}
