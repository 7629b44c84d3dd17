import GroupContainerCore

/// A listing of one presenter bucket kept in one file, so that a process that has not listed the bucket yet (a new
/// process: a widget, a tool) reads one file where it would list a directory and read a file per record (#37 item 5:
/// a new process's write of an item 64 processes present spent a quarter of its CPU opening and reading 64 records).
///
///     .coordination/presenter-index/<bucket>          the listing of presenters/<bucket>
///     .coordination/presenter-index/<bucket>.below    the listing of presenters/<bucket>/below
///
/// **An index holds only at the generation it names.** Whoever lists a bucket (its listing was not cached, and the
/// index did not hold) loads the bucket's slot generation *first*, lists, and writes the index with that generation;
/// a reader loads the slot generation and uses the index only when it names the same one. Sound because a record file
/// is made or removed *before* its slot is bumped (PresenterRegistry's order): whatever changed after the lister
/// loaded the generation bumped the slot after that, so the index no longer matches and the reader lists. Slots are
/// shared by hash, so a registration elsewhere can make an index stale, never wrong. Processes of older builds bump
/// the same slots and never write indexes: they make indexes stale, nothing else. Two listers of different
/// generations may write in either order: the later rename of an older generation is stale, listed and written again.
///
/// The files are outside `presenters/`: an index in a bucket directory would keep the directory from being removed
/// with its last record, and `presenters/` from looking empty (the registry's fast path). Whoever removes an emptied
/// bucket removes its index too. An index is an optimisation only: anything wrong with it (missing, damaged, another
/// bucket's, a FIFO or a link in its place, over `maxBytes`) is a listing, as without it; a listing that found a
/// damaged record writes none (the damage is reported at each listing). A group member can write an index that
/// leaves out a presenter or holds a false record under a real one's name, as it can remove or rewrite that
/// presenter's record file; the record's owner notices and repairs the latter only (a reader keeps a record it
/// decoded for as long as it runs: records are immutable).
///
/// Format (text header, then the record files' bytes as read, each after its name and length):
///
///     gc-presenter-index 1 <listing> <generation> <hasBelow 0|1>\n
///     <record file name> <byte count>\n<bytes>\n        (once per record)
enum PresenterBucketIndex {
  static let directory = CoordinationPaths.presenterIndex
  static let magic = "gc-presenter-index"
  static let version = 1
  /// The largest index written or read: a bucket's `below` can hold every record under a directory (the container
  /// root's, every record); past this size its readers list it, as without an index.
  static let maxBytes = 1 << 20

  /// What an index holds: the listing's `below` flag and each record file's name and bytes.
  struct Contents {
    var hasBelow: Bool
    var records: [(name: String, bytes: ArraySlice<UInt8>)]
  }

  /// The index file of `listing` (`<bucket>` or `<bucket>/below`), relative to the container.
  static func path(of listing: String) -> String {
    directory + "/"
      + (listing.hasSuffix("/" + PresenterRegistry.belowDirectory)
        ? listing.dropLast(PresenterRegistry.belowDirectory.count + 1) + ".below" : listing)
  }

  static func encode(
    listing: String, generation: UInt64, hasBelow: Bool, records: [(name: String, bytes: [UInt8])]
  ) -> [UInt8] {
    var out = Array("\(magic) \(version) \(listing) ".utf8)
    DecimalDigits.append(generation, to: &out)
    out += Array(" \(hasBelow ? 1 : 0)\n".utf8)
    for (name, bytes) in records {
      out += Array("\(name) ".utf8)
      DecimalDigits.append(UInt64(bytes.count), to: &out)
      out.append(UInt8(ascii: "\n"))
      out += bytes
      out.append(UInt8(ascii: "\n"))
    }
    return out
  }

  /// The index in `bytes`, when it is the index of `listing` at `generation`, in the one form `encode` writes; nil
  /// for anything else (stale, another bucket's, damaged). Record bytes are not checked here: the registry decodes
  /// each as it decodes a record file.
  static func decode(_ bytes: [UInt8], listing: String, generation: UInt64) -> Contents? {
    guard bytes.count <= maxBytes else { return nil }
    var at = 0
    /// The next line's space-separated fields (at most `limit` bytes, then `\n`).
    func fields(limit: Int) -> [Substring]? {
      guard let end = bytes[at...].prefix(limit + 1).firstIndex(of: UInt8(ascii: "\n")) else { return nil }
      defer { at = end + 1 }
      guard let line = String(validating: bytes[at..<end], as: UTF8.self) else { return nil }
      return line.split(separator: " ", omittingEmptySubsequences: false)
    }
    guard let header = fields(limit: 128), header.count == 5, header[0] == magic, header[1] == "\(version)",
      header[2] == listing, header[3] == "\(generation)", header[4] == "0" || header[4] == "1"
    else { return nil }
    var contents = Contents(hasBelow: header[4] == "1", records: [])
    // Each record's line read on its bytes (a string and a split per record were a fifth of a new process's reading).
    let newline = UInt8(ascii: "\n")
    while at < bytes.count {
      guard let end = bytes[at...].prefix(321).firstIndex(of: newline),
        let space = bytes[at..<end].firstIndex(of: UInt8(ascii: " ")),
        let name = recordName(bytes[at..<space]), let count = canonicalCount(bytes[(space + 1)..<end]),
        count <= PresenterRecord.maxBytes, count < bytes.count - (end + 1), bytes[end + 1 + count] == newline
      else { return nil }
      contents.records.append((name, bytes[(end + 1)..<(end + 1 + count)]))
      at = end + 2 + count
    }
    return contents
  }

  /// A name a lister can have taken from a bucket (a file name, not hidden), as a string; nil for anything else.
  private static func recordName(_ bytes: ArraySlice<UInt8>) -> String? {
    guard (1...255).contains(bytes.count), bytes.first != UInt8(ascii: "."), !bytes.contains(UInt8(ascii: "/"))
    else { return nil }
    return String(validating: bytes, as: UTF8.self)
  }

  /// A byte count in the one form `encode` writes: digits, no leading zero (but `0` itself), at most 9 of them.
  private static func canonicalCount(_ bytes: ArraySlice<UInt8>) -> Int? {
    guard (1...9).contains(bytes.count), bytes.count == 1 || bytes.first != UInt8(ascii: "0"),
      bytes.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 })
    else { return nil }
    return bytes.reduce(0) { $0 * 10 + Int($1 &- UInt8(ascii: "0")) }
  }
}
