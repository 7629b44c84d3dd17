import Foundation
import TestSupport
import Testing

@testable import PropertyList

/// The old-style (OpenStep) text reader: the grammar, round trips, every error path with its offset, the bounds.
///
/// Mutants this suite catches (each made once, seen failing, restored):
/// - the nesting check removed from `parseValue` (`checkDepth`): `depthIsBounded` fails (a value comes back).
/// - surrogate pairs not combined (each `\U` unit taken alone): `quotedStringEscapes` fails.
/// - the odd-digit check at `>` removed: `everyErrorPathNamesItsOffset` fails for `<abc>`.
/// - the value count check removed: `valueCountIsBounded` fails.
@Suite("OpenStep reader", .runSlot(.minutes(10)))
struct OpenStepReaderTests {
  func read(_ text: String, limits: PropertyListLimits = .default) throws(PropertyListError) -> PropertyListValue {
    try OpenStepPropertyListReader.read(text, limits: limits)
  }

  @Test func dictionariesArraysDataAndUnquotedStrings() throws {
    let value = try read(
      """
      {
        name = "Ada Lovelace";   // a comment to the end of the line
        tags = (math, "first program", );
        raw = <0fbd 77 77>;      /* a comment
                                    over lines */
        nested = { path = /usr/local/bin:$PATH; version = 1.2-beta+3; empty = (); none = {}; };
        "quoted key" = '';
      }
      """)
    #expect(
      value
        == .dictionary([
          "name": .string("Ada Lovelace"),
          "tags": .array([.string("math"), .string("first program")]),
          "raw": .data([0x0F, 0xBD, 0x77, 0x77]),
          "nested": .dictionary([
            "path": .string("/usr/local/bin:$PATH"), "version": .string("1.2-beta+3"), "empty": .array([]),
            "none": .dictionary([:]),
          ]),
          "quoted key": .string(""),
        ]))
  }

  @Test func scalarsAreStringsAsInTheFormat() throws {
    #expect(try read("( 1, 2.5, YES )") == .array([.string("1"), .string("2.5"), .string("YES")]))
    #expect(try read("word") == .string("word"))
    #expect(try read("<>") == .data([]))
  }

  @Test func aRepeatedKeyKeepsTheLastValue() throws {
    #expect(try read("{ a = 1; a = 2; }") == .dictionary(["a": .string("2")]))
  }

  @Test func theStringsFileFormIsADictionary() throws {
    #expect(try read("a = 1;\n\"b c\" = (x);\n") == .dictionary(["a": .string("1"), "b c": .array([.string("x")])]))
  }

  @Test func aByteOrderMarkAndSurroundingSpaceAreSkipped() throws {
    let bytes: [UInt8] = [0xEF, 0xBB, 0xBF] + Array(" \n( a ) // end".utf8)
    #expect(try OpenStepPropertyListReader.read(bytes) == .array([.string("a")]))
  }

  @Test func quotedStringEscapes() throws {
    let value = try read(#""tab\tnl\ncr\rbell\abs\bff\fvt\v quote\" apostrophe\' backslash\\ other\q""#)
    #expect(value == .string("tab\tnl\ncr\rbell\u{07}bs\u{08}ff\u{0C}vt\u{0B} quote\" apostrophe' backslash\\ otherq"))
    #expect(try read(#""\U00e9\U4E2D\UD83D\UDE00""#) == .string("é中😀"))
    #expect(try read(#""\101\0\7""#) == .string("A\u{0}\u{7}"))
    #expect(try read(#""\351""#) == .string("é"))  // \ooo is the Latin-1 scalar
    #expect(try read(#"'single "double" inside'"#) == .string(#"single "double" inside"#))
    #expect(try read(#""UTF-8 as is: ünïcödé""#) == .string("UTF-8 as is: ünïcödé"))
  }

  /// Values rendered as old-style text (quoted, escaped) read back equal.
  @Test(arguments: [
    PropertyListValue.dictionary([:]),
    .array([.string("a b"), .dictionary(["k;=": .string("\"\\\n\t")]), .data([0, 255]), .array([])]),
    .dictionary(["emoji": .string("😀 ∑"), "nested": .dictionary(["deeper": .array([.string("")])])]),
    .string("/* not a comment */ // nor this"),
  ])
  func roundTrips(value: PropertyListValue) throws {
    #expect(try read(Self.render(value)) == value)
  }

  /// Every failure: its kind, an offset where the problem is, and a message that names it.
  static let errors: [(text: String, offset: Int, fragment: String)] = [
    ("", 0, "empty property list"),
    ("   // only a comment", 20, "empty property list"),
    ("\"open", 0, "no closing quote"),
    ("\"ends in escape\\", 15, "after '\\'"),
    ("{ a = 1; ", 9, "not closed with '}'"),
    ("{ a 1; }", 4, "expected '=' after the key 'a'"),
    ("{ a = 1 }", 8, "expected ';' after the value of 'a'"),
    ("{ a = }", 6, "expected a value"),
    ("{ (x) = 1; }", 2, "key must be a string"),
    ("( a b )", 4, "expected ',' or ')'"),
    ("( a, ", 0, "not closed with ')'"),
    ("<abc>", 4, "odd number of hex digits"),
    ("<0g>", 2, "expected hex digits"),
    ("<00", 0, "end of input in <data>"),
    (#""\UD83D""#, 1, "high surrogate without"),
    (#""\UD83D\U0041""#, 1, "not a low surrogate"),
    (#""\UDE00""#, 1, "lone low surrogate"),
    (#""\U12""#, 1, "four hex digits"),
    ("/* open", 0, "has no '*/'"),
    ("( a ) b", 6, "after the property list's value"),
    ("a = 1; b", 8, "expected '='"),
    (";", 0, "expected a value"),
    ("a = 1", 5, "expected ';'"),
    // Found by the fuzzer (Fuzz/run.sh PropertyListFuzz): an octal escape past one byte trapped.
    (#""x\404""#, 2, "above \\377"),
  ]

  @Test(arguments: errors)
  func everyErrorPathNamesItsOffset(text: String, offset: Int, fragment: String) {
    do throws(PropertyListError) {
      let value = try read(text)
      Issue.record("expected an error, got \(value)")
    } catch {
      #expect(error.kind == .invalidOpenStep, "\(error)")
      #expect(error.offset == offset, "\(error)")
      #expect(error.description.contains(fragment) && error.description.contains("byte offset"), "\(error)")
    }
  }

  @Test func invalidUTF8InAStringIsRefused() {
    #expect(throws: PropertyListError.self) { try OpenStepPropertyListReader.read(Array("\"a".utf8) + [0xFF, 0x22]) }
    do throws(PropertyListError) {
      _ = try OpenStepPropertyListReader.read(Array("( x, \"".utf8) + [0xC3, 0x22, 0x29])
    } catch {
      #expect(error.kind == .invalidOpenStep && error.offset == 5 && error.message.contains("not valid UTF-8"))
    }
  }

  @Test func aNonASCIIByteOutsideQuotesIsNamed() {
    do throws(PropertyListError) {
      _ = try OpenStepPropertyListReader.read([0x28, 0xC3, 0xA9, 0x29])
      Issue.record("expected an error")
    } catch {
      #expect(error.offset == 1 && error.message.contains("byte 0xC3"), "\(error)")
    }
  }

  @Test func depthIsBounded() throws {
    let limits = PropertyListLimits(maxDepth: 8)
    _ = try read(String(repeating: "(", count: 8) + String(repeating: ")", count: 8), limits: limits)
    do throws(PropertyListError) {
      _ = try read(String(repeating: "(", count: 9) + String(repeating: ")", count: 9), limits: limits)
      Issue.record("nesting deeper than the limit was read")
    } catch {
      #expect(error.kind == .limitExceeded && error.offset == 8, "\(error)")
    }
    // Hostile depth with the default limit: an error, not a stack overflow.
    do throws(PropertyListError) {
      _ = try read(String(repeating: "{a=", count: 100_000))
      Issue.record("expected an error")
    } catch {
      #expect(error.kind == .limitExceeded, "\(error)")
    }
  }

  @Test func valueCountIsBounded() {
    do throws(PropertyListError) {
      _ = try read("(a, b, c)", limits: PropertyListLimits(maxObjects: 3))
      Issue.record("expected an error")
    } catch {
      #expect(error.kind == .limitExceeded && error.offset == 7, "\(error)")
    }
  }

  @Test func inputSizeIsBounded() {
    do throws(PropertyListError) {
      _ = try read("(aaaa)", limits: PropertyListLimits(maxBytes: 5))
      Issue.record("expected an error")
    } catch {
      #expect(error.kind == .limitExceeded && error.offset == 0, "\(error)")
    }
  }

  // MARK: Rendering for the round trips

  static func render(_ value: PropertyListValue) -> String {
    switch value {
    case .string(let s): return quote(s)
    case .data(let bytes): return "<" + bytes.map { String(format: "%02x", $0) }.joined() + ">"
    case .array(let items): return "(" + items.map(render).joined(separator: ", ") + ")"
    case .dictionary(let entries):
      return "{" + entries.keys.sorted().map { quote($0) + " = " + render(entries[$0]!) + "; " }.joined() + "}"
    default: return quote("\(value)")
    }
  }

  static func quote(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\t": out += "\\t"
      case _ where scalar.value > 0xFFFF:
        for unit in String(scalar).utf16 { out += "\\U" + String(format: "%04X", unit) }
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out + "\""
  }
}
