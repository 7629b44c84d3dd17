import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// XML tokenizer features and malformed XML.
@Suite("XML reader", .runSlot(.minutes(10)))
struct XMLReaderTests {
  func parse(_ text: String, limits: PropertyListLimits = .default) throws -> PropertyListValue {
    try PropertyListValue(bytes: Array(text.utf8), limits: limits)
  }

  func plist(_ body: String) -> String {
    """
    <?xml version="1.0" encoding="UTF-8"?>
    <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
    <plist version="1.0">
    \(body)
    </plist>
    """
  }

  @Test("an Apple-style document with every element")
  func appleDocument() throws {
    let value = try parse(
      plist(
        """
        <dict>
        \t<key>string</key><string>a &lt;b&gt; &amp; &quot;c&quot; &apos;d&apos; &#65;&#x42;&#x1F600;</string>
        \t<key>integer</key><integer> -42 </integer>
        \t<key>hex</key><integer>0x1F</integer>
        \t<key>huge</key><integer>18446744073709551615</integer>
        \t<key>real</key><real>1.5e3</real>
        \t<key>inf</key><real>+infinity</real>
        \t<key>pyinf</key><real>-inf</real>
        \t<key>nan</key><real>nan</real>
        \t<key>yes</key><true/>
        \t<key>no</key><false></false>
        \t<key>date</key><date>2024-01-02T03:04:05Z</date>
        \t<key>data</key><data>
        \tAAEC
        \tAw==
        \t</data>
        \t<key>empty</key><string/>
        \t<key>emptyArray</key><array/>
        \t<key>emptyDict</key><dict/>
        \t<key>array</key><array><integer>1</integer><!-- comment --><string>x</string></array>
        </dict>
        """))
    #expect(value["string"]?.stringValue == "a <b> & \"c\" 'd' AB😀")
    #expect(value["integer"]?.intValue == -42)
    #expect(value["hex"]?.intValue == 31)
    #expect(value["huge"]?.uint64Value == UInt64.max)
    #expect(value["real"]?.realValue == 1500)
    #expect(value["inf"]?.realValue == .infinity)
    #expect(value["pyinf"]?.realValue == -.infinity)
    #expect(value["nan"]?.realValue?.isNaN == true)
    #expect(value["yes"]?.boolValue == true)
    #expect(value["no"]?.boolValue == false)
    #expect(value["date"]?.dateValue?.secondsSinceReferenceDate == 725_857_445)
    #expect(value["data"]?.dataValue == [0, 1, 2, 3])
    #expect(value["empty"]?.stringValue == "")
    #expect(value["emptyArray"] == [])
    #expect(value["emptyDict"] == [:])
    #expect(value["array"] == [1, "x"])
  }

  @Test("CDATA, comments, processing instructions, BOM, line endings, bare roots")
  func tokenizerFeatures() throws {
    #expect(
      try parse(plist("<string>a<![CDATA[<not a tag> & ]]>b<!-- skip -->c<?pi x?>d</string>")) == "a<not a tag> & bcd")
    #expect(try PropertyListValue(bytes: [0xEF, 0xBB, 0xBF] + Array(plist("<integer>5</integer>").utf8)) == 5)
    #expect(try parse("<plist><string>line1\r\nline2\rline3&#13;</string></plist>") == "line1\nline2\nline3\r")
    #expect(try parse("<!-- lead --><?pi?>\n<array><true/></array>\n<!-- trail -->\n") == [true])
    #expect(
      try parse(
        "<!DOCTYPE plist [ <!ENTITY x \"y>\"> ]><plist version='1.0' other = \"z\" ><string >q</string ></plist >")
        == "q")
    #expect(try parse(plist("<dict><key>k</key><string>1</string><key>k</key><string>2</string></dict>")) == ["k": "2"])
    #expect(try parse(plist("<date>2024Z</date>")) == .date(PropertyListDate(year: 2024, month: 1, day: 1)!))
    #expect(try parse(plist("<data>QQ</data>")) == .data([0x41]))
    #expect(try parse(plist("<data></data>")) == .data([]))
    #expect(
      try parse(plist("<integer>-170141183460469231731687303715884105728</integer>"))
        == .integer(PropertyListInteger(Int128.min)))
  }

  @Test("truncation at every length throws")
  func truncation() throws {
    let sample: PropertyListValue = [
      "k": [1, "s", .data([1, 2]), 2.5, true, .date(PropertyListDate(secondsSinceReferenceDate: 0))]
    ]
    let document = try sample.encoded(as: .xml)
    // The trailing newline is optional, so stop one short of the end.
    for length in 0..<(document.count - 1) {
      let error = expectFailure(Array(document.prefix(length)))
      #expect(error?.kind == (length == 0 ? .unknownFormat : .invalidXML))
    }
  }

  @Test(
    "malformed documents are rejected with a specific message",
    arguments: [
      ("<plist><string>x</plist>", "mismatched end tag"),
      ("<plist><dict><key>a</key></dict></plist>", "has no value"),
      ("<plist><dict><string>a</string></dict></plist>", "expected <key>"),
      ("<plist><integer>12a</integer></plist>", "not a valid integer"),
      ("<plist><integer></integer></plist>", "no digits"),
      ("<plist><integer>999999999999999999999999999999999999999999</integer></plist>", "out of the 128-bit range"),
      ("<plist><real>1.2.3</real></plist>", "not a valid number"),
      ("<plist><real>0x1p3</real></plist>", "not a valid number"),
      ("<plist><date>2024-13-01T00:00:00Z</date></plist>", "out of range"),
      ("<plist><date>2024-01-01 00:00:00</date></plist>", "not of the form"),
      ("<plist><data>!!!!</data></plist>", "not base64"),
      ("<plist><data>QUJD=A</data></plist>", "after '=' padding"),
      ("<plist><data>Q</data></plist>", "one character left over"),
      ("<plist><widget/></plist>", "unknown element <widget>"),
      ("<plist><key>k</key></plist>", "outside of a <dict>"),
      ("<plist/>", "holds no value"),
      ("<plist></plist>", "holds no value"),
      ("<plist><true/><true/></plist>", "expected </plist>"),
      ("<plist><true/></plist>junk", "after the root element"),
      ("<plist><true>yes</true></plist>", "must be empty"),
      ("<plist><string>&bogus;</string></plist>", "unknown entity"),
      ("<plist><string>&#0;</string></plist>", "XML does not allow"),
      ("<plist><string>&#xD800;</string></plist>", "XML does not allow"),
      ("<plist><string>&#x110000;</string></plist>", "beyond U+10FFFF"),
      ("<plist><string>&#xZZ;</string></plist>", "invalid digit"),
      ("<plist><string>&amp</string></plist>", "unterminated"),
      ("<plist><string>a<b/></string></plist>", "unexpected element"),
      ("<plist><string><![CDATA[x</string></plist>", "unterminated CDATA"),
      ("<plist><!-- never closed <true/></plist>", "unterminated comment"),
      ("<?xml never closed <plist/>", "unterminated processing instruction"),
      ("<!DOCTYPE plist [ <plist/>", "unterminated DOCTYPE"),
      ("<plist version=1.0><true/></plist>", "quoted attribute value"),
      ("<plist version><true/></plist>", "expected '='"),
      ("<plist version=\"1.0<\"><true/></plist>", "not allowed in an attribute"),
      ("<plist><true/ ></plist>", "expected '>' after '/'"),
      ("<plist>text<true/></plist>", "unexpected text"),
      ("</plist>", "unexpected end tag"),
      ("<plist></true></plist>", "holds no value"),
      ("<plist><plist><true/></plist></plist>", "nested <plist>"),
      ("<plist><array><true/></plist>", "mismatched end tag </plist>; expected </array>"),
      ("<plist><![CDATA[x]]></plist>", "CDATA"),
    ])
  func malformed(document: String, fragment: String) {
    expectFailure(Array(document.utf8), kind: .invalidXML, mentioning: fragment, "byte offset")
  }

  @Test("encoding problems are rejected")
  func encodings() {
    expectFailure(
      Array("<plist><string>".utf8) + [0xC3, 0x28] + Array("</string></plist>".utf8), kind: .invalidXML,
      mentioning: "not valid UTF-8")
    expectFailure([0xFF, 0xFE, 0x3C, 0x00], format: .xml, kind: .invalidXML, mentioning: "UTF-16")
    expectFailure([0x3C, 0x00, 0x70, 0x00], kind: .invalidXML, mentioning: "UTF-16")
  }

  @Test("depth and value limits apply")
  func limits() throws {
    func nested(_ levels: Int) -> String {
      String(repeating: "<array>", count: levels) + "<true/>" + String(repeating: "</array>", count: levels)
    }
    _ = try parse(nested(512))
    expectFailure(Array(nested(513).utf8), kind: .limitExceeded, mentioning: "nesting deeper than the limit of 512")
    expectFailure(Array(nested(100_000).utf8), kind: .limitExceeded, mentioning: "nesting")
    expectFailure(
      Array(("<array>" + String(repeating: "<true/>", count: 11) + "</array>").utf8),
      limits: PropertyListLimits(maxObjects: 10), kind: .limitExceeded, mentioning: "more than 10 values")
    let manyKeys = "<dict>" + (0..<20).map { "<key>\($0)</key><dict/>" }.joined() + "</dict>"
    expectFailure(Array(manyKeys.utf8), limits: PropertyListLimits(maxObjects: 5), kind: .limitExceeded)
  }

  @Test("random mutations of a valid document never crash", arguments: 0..<3)
  func mutations(seed: UInt64) throws {
    var rng = SeededGenerator(state: seed)
    let sample: PropertyListValue = [
      "k": [1, "s&<", .data([1, 2, 3, 4]), 2.5, true, .date(PropertyListDate(secondsSinceReferenceDate: 0))]
    ]
    let document = try sample.encoded(as: .xml)
    let alphabet = Array("<>/&;#x![]-?=\"' \nabcdefgkilnprstuy0123456789".utf8)
    for _ in 0..<1_500 {
      var bytes = document
      for _ in 0..<Int.random(in: 1...3, using: &rng) {
        let index = Int.random(in: 0..<bytes.count, using: &rng)
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: bytes[index] = alphabet.randomElement(using: &rng)!
        case 1: bytes.remove(at: index)
        default: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: index)
        }
      }
      parseWithoutCrashing(bytes)
    }
  }
}
