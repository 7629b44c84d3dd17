import GroupContainerCore
import Messaging
import Testing

/// `HexDigits`, the one hex check of JSONScanner, OpenURLRule, TypeName, task ids and the image cache's entry names,
/// against the standard library's reading of every byte as a one-digit hex number. Mutants: one case of letters left
/// out of `value`, a range ending a letter early (`A`–`E`: seen failing), `lowercaseValue` taking upper case, fail.
@Suite struct HexDigitsTests {
  @Test func everyByteReadsAsTheStandardLibraryReadsIt() {
    for byte in UInt8.min...UInt8.max {
      let reference = byte < 0x80 ? UInt8(String(UnicodeScalar(byte)), radix: 16) : nil
      #expect(HexDigits.value(byte) == reference, "byte \(byte)")
      let upper = (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
      #expect(HexDigits.lowercaseValue(byte) == (upper ? nil : reference), "byte \(byte)")
    }
  }

  /// Through its readers: percent escapes and JSON's `\u` escapes take both cases; a task id only lower case.
  @Test func itsReadersTakeTheCasesTheirFormatsWrite() {
    #expect((try? OpenURLRule.validate("scheme://a%2Fb%2fc")) == "scheme")
    #expect((try? OpenURLRule.validate("scheme://a%2Gb")) == nil)
    for (json, expected) in [(#""\u00e9\u00C9""#, "éÉ"), (#""\u004A\u004a""#, "JJ"), (#""\u00G9""#, nil)] {
      let bytes = Array(json.utf8)
      let read = bytes.withUnsafeBufferPointer { buffer -> String? in
        var scanner = JSONScanner(buffer)
        return scanner.string()
      }
      #expect(read == expected, "\(json)")
    }
  }
}
