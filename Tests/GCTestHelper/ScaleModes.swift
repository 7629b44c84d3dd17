// Helper modes for the atomic-publish (torn read) tests: a writer replacing a large self-checking document in a
// loop, and readers checking every read of it. Both stop when the file <root>/stop appears.
import FileCoordination
import Foundation
import GroupContainerCore

/// A document of `bytes` bytes (rounded to 8) that checks itself: word 0 a magic, word 1 the generation, word 2
/// the word count, word i ≥ 3 derived from the generation and i. Any mix of two generations, any short or long
/// read, fails `check`.
enum SelfCheckingDocument {
  static let magic: UInt64 = 0x4743_5041_544F_4D31  // "GCPATOM1"

  static func word(_ generation: UInt64, _ index: Int) -> UInt64 {
    (generation &* 0x9E37_79B9_7F4A_7C15) ^ UInt64(index)
  }

  static func make(generation: UInt64, bytes: Int) -> Data {
    let count = max(3, bytes / 8)
    var words = [UInt64](repeating: 0, count: count)
    words[0] = magic
    words[1] = generation
    words[2] = UInt64(count)
    for i in 3..<count { words[i] = word(generation, i) }
    return words.withUnsafeBytes { Data($0) }
  }

  /// The generation of a complete document, or a description of what is wrong with it.
  static func check(_ data: Data) -> Result<UInt64, TornRead> {
    guard data.count >= 24, data.count % 8 == 0 else { return .failure(TornRead("\(data.count) bytes")) }
    return data.withUnsafeBytes { raw -> Result<UInt64, TornRead> in
      let words = raw.bindMemory(to: UInt64.self)
      guard words[0] == magic else { return .failure(TornRead("no magic in \(data.count) bytes")) }
      let generation = words[1]
      guard words[2] == UInt64(words.count) else {
        return .failure(TornRead("generation \(generation): \(words.count) words, header says \(words[2])"))
      }
      for i in 3..<words.count where words[i] != word(generation, i) {
        return .failure(TornRead("generation \(generation): word \(i) of \(words.count) is from another write"))
      }
      return .success(generation)
    }
  }

  struct TornRead: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
  }
}

/// `HelperCommand.tornWriter(item:bytes:)`.
func tornWriter(_ container: GroupContainer, root: String, item: URL, bytes: Int) throws {
  let coordinator = FileCoordinator()
  var generation: UInt64 = 0
  while access(root + "/stop", F_OK) != 0 {
    generation += 1
    let document = SelfCheckingDocument.make(generation: generation, bytes: bytes)
    try coordinator.coordinate(writingItemAt: item, options: .forReplacing) { url in
      try container.write(document, to: url)
    }
    FileHandle.standardOutput.write(Data("wrote \(generation)\n".utf8))
  }
  FileHandle.standardOutput.write(Data("done \(generation)\n".utf8))
}

/// `HelperCommand.tornReader(item:coordinated:)`.
func tornReader(_ container: GroupContainer, root: String, item: URL, coordinated: Bool) throws {
  let coordinator = FileCoordinator()
  var reads = 0, torn = 0
  var seen: Set<UInt64> = []
  var first: String?
  while access(root + "/stop", F_OK) != 0 {
    let data: Data
    do {
      data =
        coordinated
        ? try coordinator.coordinate(readingItemAt: item) { url in try container.contents(of: url) }
        : try container.contents(of: item)
    } catch {
      continue  // not written yet
    }
    reads += 1
    switch SelfCheckingDocument.check(data) {
    case .success(let generation):
      if seen.insert(generation).inserted {
        FileHandle.standardOutput.write(Data("seen \(seen.count)\n".utf8))
      }
    case .failure(let problem):
      torn += 1
      if first == nil { first = problem.description }
    }
  }
  let summary = "reads \(reads) torn \(torn) seen \(seen.count)" + (first.map { " first: \($0)" } ?? "")
  FileHandle.standardOutput.write(Data((summary + "\n").utf8))
}
