import Foundation
import TestSupport
import Testing

/// A suite of a few large values costs its writer and its readers at most three times its bytes (#32 item 4: six
/// 60 MB values made the writer peak at 2.85 GB and a reader of the whole suite at 882 MB). The writer's
/// compaction writes the image where it will be read (no copy in memory), its export is written value by value,
/// and the pages of the image a large value was read from are given back — across real processes (`groupctl
/// stress defaults-writer` / `defaults-reader`, each printing its own peak, `VmHWM`), the values checked after.
///
/// Mutants this suite catches (each made once by hand):
/// - the export encoded whole in memory (`PropertyListValue.dictionary(…).encoded(as: .binary)`, as before):
///   the writer's peak goes over its bound;
/// - `SuiteJournal.write` keeping the pages of a large record it wrote: the writer peaked at 298 MB on an idle
///   machine and 397 MB on a busy one (its background compaction then overlaps its sets), against 200 MB — caught
///   only on a busy machine now: the writer's bound is the goal, 3×, since a run at a load of 15 peaked at 306 MB
///   (2.3×) without it;
/// - `SuiteValues.dictionary()` keeping the image's pages of the values it decoded: the reader's peak goes over 3×.
@Suite(.runSlot(.minutes(6))) struct BigValueMemoryTests {
  @Test func aWriterAndAReaderOfLargeValuesPeakUnderThreeTimesTheirBytes() async throws {
    let root = try TestRoot()
    let id = try root.container().identifier
    let (count, size) = (4, 32 << 20)
    let common = ["--suite", "big", "--root", root.path, "--print-peak-memory"]
    let writer = try await groupctl(
      [
        "stress", "defaults-writer", id, "--index", "0", "--keys", "\(count)", "--increments", "0", "--value-bytes",
        "\(size)", "--synchronize",
      ] + common)
    #expect(writer.status == 0, "\(writer.err)")
    let reader = try await groupctl(
      ["stress", "defaults-reader", id, "--once", "--reads", "1", "--whole", "--keys", "\(count)"] + common)
    #expect(reader.status == 0, "\(reader.err)")
    let bytes = count * size
    // The writer holds its values once, plus one record being copied: about 1.5× on an idle machine, 2.3× seen at
    // a load of 15 (its background compaction overlapping its sets). The reader decodes the whole suite beside the
    // mapped image: about 2.4×. The bound is the goal: 3×.
    for (who, run, bound) in [("writer", writer, 3 * bytes), ("reader", reader, 3 * bytes)] {
      let peak = Self.field(run.out, "peak_rss_kb").map { $0 * 1024 }
      #expect(peak != nil && peak! <= bound, "\(who): peak \(peak ?? -1) bytes for \(bytes) bytes of values")
    }
    #expect(Self.field(reader.out, "found") == 2, "\(reader.out)")  // the one read, and the whole suite
    // Every value is the writer's: the export, read by the plist codec of another process, holds them all.
    let check = try await groupctl(["defaults", "read", id, "--suite", "big", "--root", root.path, "--json"])
    #expect(check.status == 0)
    let values = try JSONSerialization.jsonObject(with: Data(check.out.utf8)) as? [String: String] ?? [:]
    #expect(values.count == count)
    for i in 0..<count {
      let data = Data(base64Encoded: values["w0-k\(i)"] ?? "") ?? Data()
      #expect(data.count == size && data.prefix(8) == withUnsafeBytes(of: UInt64(i).littleEndian) { Data($0) })
    }
  }

  /// The integer after `name=` in the output.
  static func field(_ text: String, _ name: String) -> Int? {
    guard let range = text.range(of: name + "=") else { return nil }
    return Int(text[range.upperBound...].prefix { $0.isNumber })
  }
}
