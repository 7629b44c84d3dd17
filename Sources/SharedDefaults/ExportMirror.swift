import Foundation
import PropertyList
import SystemLayer

/// The rule for another tool's edit of the export (`<suite>.plist`): when it is applied, and when it is kept aside.
///
/// A tool reads whatever the export's name showed at some moment — an export, or another tool's file — and writes
/// its version back at any time later (in place, by copy or by rename). Nothing the tool can keep says which
/// version it read. So the store remembers every key/value pair the name ever showed and later stopped showing
/// (`ExportHistory`: the pairs a stale copy can carry), and the last export exactly (its image). A tool's file is
/// compared with that export, key by key: a key where the two differ was changed by the tool **for certain** when
/// the file's value for it was never shown before — whatever version the tool read, it did not hold that value.
/// If every differing key is certain, the differences are committed (the tool's change; values committed since,
/// which the tool never saw, stay). If one is not — its value is one the name showed earlier: the tool may have
/// read it there, and writing it back would roll a committed value back — nothing of the file is applied: it is
/// kept aside (`<suite>.plist.unapplied-<time>-<inode>-<size>`) and reported. The history forgets nothing (a lossy set:
/// a false match only keeps an edit aside), so this holds however many exports came between the tool's read and
/// its write.
enum ExportMirror {
  /// What to do with a tool's file.
  enum Judgement: Equatable {
    /// Commit these changes (key → new value, nil: removed).
    case apply([String: PropertyListValue?])
    /// Keep it aside: these keys hold values the export showed before (the tool may have read them there).
    case keepAside([String])
  }

  /// Judges `edited` (a tool's file) against `base` (the last export the name showed before it). Returns the
  /// judgement and the pairs the history must learn: the base's values the file replaced, and — when it is applied
  /// — the file's own (committed now; another tool may read the file before the next export replaces it). A file
  /// kept aside teaches nothing of its own: its values were never the suite's, so a copy that carries them rolls
  /// back nothing, and the tool's own retry (its user told of the kept-aside edit, editing again) must apply —
  /// learned, every retry of that value was kept aside in turn (seen under load: one edit kept aside five times).
  static func judge(
    _ edited: [String: PropertyListValue], base: [String: PropertyListValue], history: ExportHistory
  ) -> (Judgement, learned: [UInt128]) {
    let changes = changes(edited, base: base)
    var ambiguous: [String] = []
    var replaced: [UInt128] = []
    var own: [UInt128] = []
    for key in changes.keys.sorted() {
      let pair = ExportHistory.pair(key, edited[key])
      if history.contains(pair) { ambiguous.append(key) }
      own.append(pair)
      replaced.append(ExportHistory.pair(key, base[key]))
    }
    return ambiguous.isEmpty ? (.apply(changes), replaced + own) : (.keepAside(ambiguous), replaced)
  }

  /// What `edited` changes of `base`: key → new value (nil: removed).
  static func changes(_ edited: [String: PropertyListValue], base: [String: PropertyListValue])
    -> [String: PropertyListValue?]
  {
    var changes: [String: PropertyListValue?] = [:]
    for key in Set(base.keys).union(edited.keys) where base[key] != edited[key] { changes[key] = .some(edited[key]) }
    return changes
  }

  /// The pairs an export of `new` stops showing of the export of `old`: each key's old value where it differs,
  /// and "absent" for each key `new` adds. Compares the images' encoded values; only those that differ are decoded.
  /// Nil when `old` does not read (the caller logs it: the history then misses that export's values).
  static func superseded(from old: SuiteImage, to new: SuiteImage) -> [UInt128]? {
    var pairs: [UInt128] = []
    do {
      let oldCorruption = try old.forEachRawEntry { (entry, key) throws(SuiteImage.Corruption) in
        let oldValue = try old.raw(entry).value
        if let match = try new.find(key) {
          // memcmp: a generic byte-by-byte compare of a 32 MB value took seconds in a debug build.
          let newValue = try new.raw(match).value
          if newValue.count == oldValue.count,
            RawMemory.equal(newValue.baseAddress, oldValue.baseAddress, count: oldValue.count)
          {
            return
          }
        }
        let name = String(decoding: key, as: UTF8.self)
        pairs.append(ExportHistory.pair(name, try old.value(of: entry)))
      }
      let newCorruption = try new.forEachRawEntry { (entry, key) throws(SuiteImage.Corruption) in
        if try old.find(key) == nil { pairs.append(ExportHistory.pair(String(decoding: key, as: UTF8.self), nil)) }
      }
      guard oldCorruption == nil, newCorruption == nil else { return nil }
    } catch {
      return nil
    }
    return pairs
  }

  /// Whether a file that does not parse (`bytes`, open as `fd`, last written at `modified`) may be one a tool is
  /// still writing (plistlib truncates, encodes, then writes): while another process has it open, yes, however
  /// long; when nobody has, no. Where that cannot be told (no leases), a file that is empty or starts like a
  /// binary or XML plist is given `unfinishedGrace` after its last write.
  static func mayBeUnfinished(_ bytes: [UInt8], _ fd: borrowing SystemFD, modified: Int64) -> Bool {
    if let open = fd.isOpenElsewhere() { return open }
    let head = bytes.drop { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
    let looksLikeAPlist =
      head.isEmpty || head.starts(with: Array("bplist".utf8)) || head.starts(with: Array("<?xml".utf8))
      || head.starts(with: Array("<plist".utf8)) || head.starts(with: Array("<!DOCTYPE".utf8))
    // A time set far in the past (any file's may be) cannot overflow the age into a young one.
    let (age, overflow) = RealtimeClock.nanoseconds().subtractingReportingOverflow(modified)
    return looksLikeAPlist && !overflow && age < unfinishedGrace
  }

  /// Where leases are refused: how long after its last write a file that does not parse is still taken for one
  /// being written.
  static let unfinishedGrace: Int64 = 10_000_000_000  // nanoseconds

  /// Where a tool's file that was not applied is kept: `<suite>.plist.unapplied-…`.
  static func unappliedPrefix(_ suite: String) -> String { "\(suite).plist.unapplied-" }

  /// The name a tool's file `st` is kept aside under: `<suite>.plist.unapplied-<its modification, ms>-<inode>-<size>`,
  /// named for the file, so that a judgement carried out again after its process died between the copy and the
  /// decision (`SuiteHeader.Judging.keepingAside`) rewrites the same copy instead of adding a second one.
  static func unappliedName(_ suite: String, of st: FileStatus) -> String {
    unappliedPrefix(suite) + "\(st.modificationNanoseconds / 1_000_000)-\(st.inode)-\(st.size)"
  }

  /// The names of the kept-aside edits of `suite` in `dir` (the suite's directory), sorted.
  static func unapplied(_ suite: String, in dir: borrowing SystemFD) -> [String] {
    let prefix = unappliedPrefix(suite)
    return ((try? dir.entries()) ?? []).map(\.name).filter { $0.hasPrefix(prefix) }.sorted()
  }

  /// The name of the history file.
  static func historyName(_ suite: String) -> String { "\(suite).plist.history" }
}

/// Every key/value pair the export's name showed and then stopped showing, as a Bloom filter (`bits` bits, three
/// probes; 512 KiB, about 1 % false matches at 300,000 pairs): a false match only keeps a tool's edit aside, a pair
/// is never forgotten. A stable hash of the key and a canonical form of the value (or "absent").
struct ExportHistory {
  static let bits = 1 << 22
  static let probes = 3
  private(set) var bytes: [UInt8]
  /// Pairs were added since it was read (it must be written back).
  private(set) var changed = false

  /// From the file's bytes; anything but the right size is an empty history.
  init(bytes: [UInt8]?) {
    if let bytes, bytes.count == Self.bits / 8 {
      self.bytes = bytes
    } else {
      self.bytes = [UInt8](repeating: 0, count: Self.bits / 8)
    }
  }

  func contains(_ pair: UInt128) -> Bool {
    Self.positions(pair).allSatisfy { bytes[$0 >> 3] & (1 << ($0 & 7)) != 0 }
  }

  mutating func insert(_ pairs: some Sequence<UInt128>) {
    for pair in pairs {
      for position in Self.positions(pair) where bytes[position >> 3] & (1 << (position & 7)) == 0 {
        bytes[position >> 3] |= 1 << (position & 7)
        changed = true
      }
    }
  }

  private static func positions(_ pair: UInt128) -> [Int] {
    let first = UInt64(truncatingIfNeeded: pair)
    let step = UInt64(truncatingIfNeeded: pair >> 64) | 1
    return (0..<UInt64(probes)).map { Int((first &+ $0 &* step) % UInt64(bits)) }
  }

  /// The pair's hash: FNV-1a over the key and a canonical encoding of the value (nil: absent).
  static func pair(_ key: String, _ value: PropertyListValue?) -> UInt128 {
    var out: [UInt8] = []
    appendBytes(Array(key.normalizedKey.utf8), to: &out)  // a tool may write the other spelling of a key
    if let value { append(value, to: &out) } else { out.append(0xFF) }
    return StableHash.fnv1a128(out)
  }

  private static func appendBytes(_ bytes: [UInt8], to out: inout [UInt8]) {
    withUnsafeBytes(of: UInt64(bytes.count).littleEndian) { out.append(contentsOf: $0) }
    out.append(contentsOf: bytes)
  }

  private static func append(_ value: PropertyListValue, to out: inout [UInt8]) {
    func word(_ bits: UInt64) { withUnsafeBytes(of: bits.littleEndian) { out.append(contentsOf: $0) } }
    switch value {
    case .string(let string):
      out.append(1)
      appendBytes(Array(string.utf8), to: &out)
    case .integer(let integer):
      out.append(2)
      word(UInt64(truncatingIfNeeded: integer.value))
      word(UInt64(truncatingIfNeeded: integer.value >> 64))
    case .real(let real):
      out.append(3)
      word(real.bitPattern)
    case .bool(let bool):
      out.append(bool ? 5 : 4)
    case .date(let date):
      out.append(6)
      word(date.secondsSinceReferenceDate.bitPattern)
    case .data(let data):
      out.append(7)
      appendBytes(data, to: &out)
    case .array(let elements):
      out.append(8)
      word(UInt64(elements.count))
      for element in elements { append(element, to: &out) }
    case .dictionary(let entries):
      // By key bytes: the same dictionary is one encoding whatever order it was read in.
      out.append(9)
      word(UInt64(entries.count))
      for (key, element) in entries.sorted(by: { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }) {
        appendBytes(Array(key.utf8), to: &out)
        append(element, to: &out)
      }
    case .uid(let uid):
      out.append(10)
      word(uid)
    }
  }
}
