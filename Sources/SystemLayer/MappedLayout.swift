/// The declared layout of a file of mapped 64-bit words (`MappedCounters`): which word indices mean what.
///
/// Each mapped file declares its layout once, as a small type in the module that owns the file, with the named
/// ranges documented beside their declaration; every user reads its indices from there. That type lists its
/// ranges in a `MappedLayout`, and a test checks every layout with `problems`: ranges disjoint, each inside the
/// words callers may use (`MappedCounters.capacity`: the last word of the file is the epoch).
///
/// The words are shared with every process mapping the file, including processes of an older build: a range is
/// never moved or shrunk (that is a format change), new ones go in words no range holds.
package struct MappedLayout: Sendable, CustomStringConvertible {
  /// One named range of word indices.
  package struct Field: Sendable {
    package let name: String
    package let words: Range<Int>
  }

  /// The file, as its documentation names it (e.g. `.coordination/counters`).
  package let file: String
  /// How many words the fields may use, from index 0.
  package let wordCount: Int
  package let fields: [Field]

  /// A layout of `fields`, given as (name, words) pairs; `wordCount` defaults to what a `MappedCounters` file offers.
  package init(file: String, wordCount: Int = MappedCounters.capacity, _ fields: [(String, Range<Int>)]) {
    self.file = file
    self.wordCount = wordCount
    self.fields = fields.map { Field(name: $0.0, words: $0.1) }
  }

  /// The single word `index`, as a range.
  package static func word(_ index: Int) -> Range<Int> { index..<index + 1 }

  /// What is wrong with the layout, one sentence each; empty when its fields are non-empty, disjoint and fit.
  package var problems: [String] {
    var problems: [String] = []
    for field in fields {
      if field.words.isEmpty { problems.append("\(file): '\(field.name)' holds no word") }
      if field.words.lowerBound < 0 || field.words.upperBound > wordCount {
        problems.append("\(file): '\(field.name)' (\(field.words)) does not fit in words 0..<\(wordCount)")
      }
    }
    for (i, a) in fields.enumerated() {
      for b in fields[(i + 1)...] where a.words.overlaps(b.words) {
        problems.append("\(file): '\(a.name)' (\(a.words)) overlaps '\(b.name)' (\(b.words))")
      }
    }
    return problems
  }

  /// The fields by first word, one a line: the layout as a table.
  package var description: String {
    fields.sorted { $0.words.lowerBound < $1.words.lowerBound }
      .map { field in
        let words = field.words.count == 1 ? "\(field.words.lowerBound)" : "\(field.words)"
        return "\(file) \(words) \(field.name)"
      }
      .joined(separator: "\n")
  }
}
