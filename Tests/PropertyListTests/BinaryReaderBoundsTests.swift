import TestSupport
import Testing

@testable import PropertyList

/// Every bound of the binary reader's object area, with a crafted file that only that bound refuses: objects and
/// their contents must lie between the header and the offset table — never in the offset table or the trailer,
/// where the bytes happen to form valid objects too.
///
/// Mutants this suite catches (each check in `BinaryParser` relaxed to the file's end, as the break did):
/// - `objectOffset` accepting offsets up to the file size: `anObjectInTheOffsetTableIsRefused` (the table's first
///   byte, 0x08, parsed as `false`) and `anObjectInTheTrailerIsRefused`;
/// - `readUnsigned` reading up to the file size: `contentRunningIntoTheOffsetTableIsRefused`.
@Suite("Binary reader: the object area's bounds", .runSlot(.minutes(10)))
struct BinaryReaderBoundsTests {
  @Test func anObjectInTheOffsetTableIsRefused() {
    // [obj1] with object 1 placed at the offset table, whose first byte (8, object 0's offset) reads as `false`.
    let file = BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]]).build { bytes, _, table in
      bytes[table + 1] = UInt8(table)
    }
    expectFailure(file, kind: .invalidBinary, mentioning: "outside the object area")
  }

  @Test func anObjectInTheTrailerIsRefused() {
    // Object 1 at the trailer's sixth byte: the offset-int size, 1, a marker the reader knows (an integer's).
    let file = BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]]).build { bytes, trailer, table in
      bytes[table + 1] = UInt8(trailer + 6)
    }
    expectFailure(file, kind: .invalidBinary, mentioning: "outside the object area")
  }

  @Test func contentRunningIntoTheOffsetTableIsRefused() {
    // A 4-byte data object whose last bytes would be the offset table's.
    let file = BinaryPlistBuilder(objects: [[0x44, 1, 2]]).build()
    expectFailure(file, kind: .invalidBinary)
    // A 2-byte integer whose second byte is the table's.
    expectFailure(BinaryPlistBuilder(objects: [[0x11, 1]]).build(), kind: .invalidBinary)
    // A count integer that runs into the table.
    expectFailure(BinaryPlistBuilder(objects: [[0x4F, 0x11, 0]]).build(), kind: .invalidBinary)
  }

  @Test func theSameObjectsInsideTheAreaParse() {
    // The control: the files above, made well, are accepted (the tests fail for the bound, not the shape).
    #expect((try? PropertyListValue(bytes: BinaryPlistBuilder(objects: [[0xA1, 1], [0x10, 7]]).build())) == [7])
    #expect(
      (try? PropertyListValue(bytes: BinaryPlistBuilder(objects: [[0x44, 1, 2, 3, 4]]).build())) == .data([1, 2, 3, 4]))
  }
}
