// Lists every public declaration of the package's libraries that has no doc comment, and fails when there is one.
//
//   swift package dump-symbol-graph --minimum-access-level public --skip-synthesized-members --skip-inherited-docs \
//     --emit-extension-block-symbols
//   swift scripts/check-doc-comments.swift <symbol-graph directory> <package directory>
//
// `make test` runs both before the tests (a standalone step: running `swift` from inside a test would wait on the
// build lock that `swift test` holds).
//
// What counts, and why:
// - A symbol declared in a file under <package>/Sources/ (the libraries; executables' `Sources/groupctl` and
//   `Sources/gc-download-agent` are not API and are left out). Symbols with no location are synthesized by the
//   compiler (Codable's `init(from:)`, Equatable's `==`, a RawRepresentable's `init(rawValue:)`): nothing to write.
// - Enum cases count: callers match on them, and an error's cases are what a user reads to know what went wrong.
// - A member that implements a protocol requirement counts too (`description`, `==`, `hash(into:)`, a protocol
//   extension's default): the graphs are dumped with `--skip-inherited-docs`, so the requirement's comment does not
//   stand in for it. One line saying what this type's `description` prints, or what the default does, is worth
//   having; DocC would otherwise show the standard library's generic text.
import Foundation

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 2 else {
  FileHandle.standardError.write(
    Data("usage: check-doc-comments.swift <symbol-graph directory> <package directory>\n".utf8))
  exit(64)
}
let graphDirectory = URL(fileURLWithPath: arguments[arguments.startIndex])
let sources = URL(fileURLWithPath: arguments[arguments.startIndex + 1]).standardizedFileURL.path + "/Sources/"
let excludedModules: Set<String> = ["groupctl", "gc-download-agent"]

struct Undocumented: Hashable, Comparable {
  var file: String
  var line: Int
  var kind: String
  var name: String
  static func < (a: Self, b: Self) -> Bool { (a.file, a.line, a.name) < (b.file, b.line, b.name) }
}

var seen: Set<String> = []
var checked = 0
var missing: Set<Undocumented> = []
let files = (try? FileManager.default.contentsOfDirectory(atPath: graphDirectory.path)) ?? []
let graphs = files.filter { $0.hasSuffix(".symbols.json") }
guard !graphs.isEmpty else {
  FileHandle.standardError.write(
    Data("no *.symbols.json in \(graphDirectory.path): run swift package dump-symbol-graph first\n".utf8))
  exit(1)
}
for name in graphs.sorted() {
  let data = try Data(contentsOf: graphDirectory.appendingPathComponent(name))
  guard let graph = try JSONSerialization.jsonObject(with: data) as? [String: Any],
    let symbols = graph["symbols"] as? [[String: Any]]
  else { continue }
  for symbol in symbols {
    guard let location = symbol["location"] as? [String: Any], let uri = location["uri"] as? String,
      let path = URL(string: uri)?.standardizedFileURL.path, path.hasPrefix(sources)
    else { continue }
    let module = path.dropFirst(sources.count).split(separator: "/").first.map(String.init) ?? ""
    guard !excludedModules.contains(module) else { continue }
    let access = symbol["accessLevel"] as? String ?? ""
    guard access == "public" || access == "open" else { continue }
    let identifier = (symbol["identifier"] as? [String: Any])?["precise"] as? String ?? UUID().uuidString
    // An extension block (`--emit-extension-block-symbols`, which DocC needs for members of other modules' types)
    // is no declaration of its own: its members are checked one by one.
    guard (symbol["kind"] as? [String: Any])?["identifier"] as? String != "swift.extension" else { continue }
    guard seen.insert(identifier).inserted else { continue }
    checked += 1
    let lines = ((symbol["docComment"] as? [String: Any])?["lines"] as? [[String: Any]]) ?? []
    let text = lines.compactMap { $0["text"] as? String }.joined().trimmingCharacters(in: .whitespaces)
    if text.isEmpty {
      let position = location["position"] as? [String: Any]
      let kind = ((symbol["kind"] as? [String: Any])?["displayName"] as? String) ?? "symbol"
      let title = (symbol["pathComponents"] as? [String])?.joined(separator: ".") ?? identifier
      missing.insert(
        Undocumented(
          file: String(path.dropFirst(sources.count - "Sources/".count)), line: ((position?["line"] as? Int) ?? 0) + 1,
          kind: kind, name: title))
    }
  }
}
for symbol in missing.sorted() {
  print("\(symbol.file):\(symbol.line): \(symbol.kind) \(symbol.name) has no doc comment")
}
print(
  "doc comments: \(checked - missing.count) of \(checked) public declarations documented, \(missing.count) undocumented"
)
exit(missing.isEmpty ? 0 : 1)
