import Foundation
import TestSupport
import Testing

/// README.md's code, and the DocC articles' (`Sources/*/Documentation.docc/*.md`), is the code that builds and runs:
/// every ```swift block is either a whole example program (`<!-- example: <path> executable: <target> -->` on the
/// line before it, the file byte for byte; the README's in `Examples/Readme/`, the articles' in `Examples/Docs/`,
/// all built by `make test`) or, in the README only, the installation snippet (`<!-- package-manifest -->`, checked
/// against Package.swift and CHANGELOG.md). An example followed by `<!-- output -->` and a ```text block is run with
/// a fresh container root and must print exactly those lines (`<…>` stands for any text: a pid, a URL); the
/// getting-started example is run as its two processes. Every README example shows its output (or has a test of
/// its own); an article's example without an output block is compiled, not run (it waits for another process).
///
/// To add an example (e.g. a ported iOS snippet): put its `main.swift` in an executable target of the Examples
/// package, paste the file in README.md or the article after an `example:` marker naming the path and the target,
/// and, in the README, either show its output after an `<!-- output -->` marker or run it in a test of its own and
/// list it in `runElsewhere`. DocC does not render the markers (HTML comments).
///
/// Mutants this suite catches (each run once, then restored): a README block edited without its file (`$0 - 2` in
/// the tour) and a block's marker removed → `everySwiftBlockIsAnExampleFileOrTheManifestSnippet`; a documented
/// output that the program does not print ("time left: 60 s") → `everyTourExampleRunsAndPrintsWhatTheReadmeShows`;
/// CHANGELOG's newest version differing from the installation line ("0.2.0") →
/// `theInstallationSnippetMatchesTheManifestAndTheChangelog` (and `groupctlVersionIsTheNewestChangelogVersion`); the
/// watcher printing its own pid instead of the setter's → `gettingStartedSharesAValueBetweenTwoProcesses`.
@Suite(.runSlot(.minutes(3))) struct ReadmeTests {
  static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  /// Examples that a dedicated test runs (the value names it) instead of the output comparison.
  static let runElsewhere: [String: String] = ["getting-started": "gettingStartedSharesAValueBetweenTwoProcesses"]

  @Test func everySwiftBlockIsAnExampleFileOrTheManifestSnippet() throws {
    let documents = try Readme.documents(Self.repository)
    #expect(!documents[0].readme.examples.isEmpty)
    for (name, document) in documents {
      for block in document.blocks where block.kind == .unmarked || (block.kind == .manifest && name != "README.md") {
        let fix =
          "put `<!-- example: <path> executable: <target> -->` (or, in README.md, `<!-- package-manifest -->`) on the line before it"
        Issue.record("\(name) line \(block.line): a ```swift block with no marker: \(fix)")
      }
      for example in document.examples {
        let url = Self.repository.appendingPathComponent(example.path)
        guard let file = try? String(contentsOf: url, encoding: .utf8) else {
          Issue.record("\(name) line \(example.line): \(example.path) does not exist")
          continue
        }
        if let hint = Readme.firstDifference(readme: example.code, file: file, readmeLine: example.line + 1) {
          Issue.record("\(name) line \(example.line) differs from \(example.path): \(hint)")
        }
      }
    }
    // Every README program is in the README, every article program in an article (a file edited alone would
    // otherwise go unnoticed).
    for (folder, shownIn) in [("Readme", ["README.md"]), ("Docs", documents.map(\.name).filter { $0 != "README.md" })] {
      let shown = documents.filter { shownIn.contains($0.name) }.flatMap(\.readme.examples).map(\.path)
      let directory = Self.repository.appendingPathComponent("Examples/\(folder)")
      for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
        let path = "Examples/\(folder)/\(name)/main.swift"
        #expect(shown.contains(path), "\(path) is not shown in \(folder == "Readme" ? "README.md" : "a DocC article")")
      }
    }
  }

  @Test func theInstallationSnippetMatchesTheManifestAndTheChangelog() throws {
    let readme = try Readme.load(Self.repository.appendingPathComponent("README.md"))
    let snippets = readme.blocks.filter { $0.kind == .manifest }
    try #require(snippets.count == 1, "README.md needs one `<!-- package-manifest -->` block")
    let snippet = snippets[0].code
    let version = try Self.newestChangelogVersion()
    let dependency = try #require(
      snippet.firstMatch(
        of: #/\.package\(url: "https://[^"]+/(?<name>[A-Za-z0-9_.-]+)", from: "(?<version>[0-9.]+)"\)/#),
      "no `.package(url: \"https://…\", from: \"…\")` line in \(snippet)")
    #expect(
      String(dependency.version) == version, "the README installs \(dependency.version), CHANGELOG.md is at \(version)")
    let product = try #require(
      snippet.firstMatch(of: #/\.product\(name: "(?<product>[^"]+)", package: "(?<package>[^"]+)"\)/#))
    #expect(String(product.package) == String(dependency.name), "package: must be the URL's last component")
    let manifest = try String(contentsOf: Self.repository.appendingPathComponent("Package.swift"), encoding: .utf8)
    #expect(
      manifest.contains("name: \"\(product.package)\","), "Package.swift's package is not named \(product.package)")
    #expect(
      manifest.contains(".library(name: \"\(product.product)\""), "Package.swift has no library \(product.product)")
  }

  /// The examples that the output comparison runs (read when the tests are listed): the README's, and the
  /// articles' that show an output.
  static let comparedExamples: [String] = ((try? Readme.documents(repository)) ?? []).flatMap { document in
    document.readme.examples.filter { document.name == "README.md" || $0.output != nil }
  }.map(\.executable).filter { runElsewhere[$0] == nil }

  @Test(arguments: comparedExamples) func everyTourExampleRunsAndPrintsWhatTheReadmeShows(executable: String)
    async throws
  {
    let examples = try Readme.documents(Self.repository).flatMap(\.readme.examples)
    let example = try #require(examples.first { $0.executable == executable })
    let expected = try #require(
      example.output,
      "\(example.path): show its output after an `<!-- output -->` marker, or run it in a test of its own")
    let server = try await FileServer.start()
    let root = try TestRoot()
    let child = try Child(
      [], executable: executable,
      environment: [
        "GROUP_CONTAINER_ROOT": root.path,
        "TOUR_DOWNLOAD_URL": server.url("/gen/65536?seed=1").absoluteString,
      ])
    let status = await child.exit()
    #expect(status == 0, "\(executable) exited \(String(describing: status)); stderr: \(child.errors.text)")
    let lines = child.output
    #expect(lines.count == expected.count, "\(executable) printed \(lines), README.md shows \(expected)")
    for (line, pattern) in zip(lines, expected) {
      #expect(Readme.matches(line, pattern), "\(executable) printed '\(line)', README.md shows '\(pattern)'")
    }
  }

  @Test func gettingStartedSharesAValueBetweenTwoProcesses() async throws {
    let root = try TestRoot()
    let env = ["GROUP_CONTAINER_ROOT": root.path]
    let watcher = try Child(["watch"], executable: "getting-started", environment: env)
    await watcher.line { $0 == "counter is 0; watching from process \(watcher.pid)" }
    let setter = try Child(["set", "42"], executable: "getting-started", environment: env)
    #expect(await setter.exit() == 0)
    #expect(setter.output == ["process \(setter.pid) set counter to 42"])
    await watcher.line { $0 == "counter is now 42, set by process \(setter.pid)" }
    watcher.kill()
    let usage = try Child(["set", "forty-two"], executable: "getting-started", environment: env)
    #expect(await usage.exit() == 64)
  }

  /// The README's programs (`Examples/Readme/`) end on an error with its message and status 1, as a user's program
  /// should: a top-level `try` crashed with "Fatal error: Error raised at top level" and a stack dump (issue #35).
  /// A container root that is a regular file makes the first call fail.
  @Test(arguments: ["getting-started", "tour-defaults", "tour-files", "tour-images", "tour-downloads"])
  func aReadmeProgramReportsAnErrorAsAMessage(executable: String) async throws {
    let root = try TestRoot()
    let file = root.path + "/not-a-directory"
    try Data().write(to: URL(fileURLWithPath: file))
    let child = try Child(
      executable == "getting-started" ? ["set", "1"] : [], executable: executable,
      environment: ["GROUP_CONTAINER_ROOT": file])
    #expect(await child.exit() == 1, "stdout: \(child.output); stderr: \(child.errors.text)")
    let errors = child.errors.text
    #expect(errors.hasPrefix("\(executable): ") && errors.contains(file), "\(errors)")
    #expect(!errors.contains("Fatal error") && errors.split(separator: "\n").count == 1, "\(errors)")
  }

  @Test func groupctlVersionIsTheNewestChangelogVersion() async throws {
    let version = try Self.newestChangelogVersion()
    let groupctl = try Child(["--version"], executable: "groupctl")
    #expect(await groupctl.exit() == 0, "stderr: \(groupctl.errors.text)")
    #expect(groupctl.output.map { $0.trimmingCharacters(in: .whitespaces) } == [version])
  }

  /// The first `## <version>` heading of CHANGELOG.md.
  static func newestChangelogVersion() throws -> String {
    let text = try String(contentsOf: repository.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
    let heading = try #require(
      text.split(separator: "\n").lazy.compactMap { $0.wholeMatch(of: #/## (?<version>[0-9]+\.[0-9]+\.[0-9]+)\s*/#) }
        .first, "CHANGELOG.md has no `## <version>` heading")
    return String(heading.version)
  }
}

/// The ```swift blocks of README.md and what marks them.
struct Readme {
  struct Block {
    enum Kind: Equatable { case example(path: String, executable: String), manifest, unmarked }
    var kind: Kind
    /// 1-based line of the marker (or of the fence when there is none).
    var line: Int
    /// The lines between the fences, each followed by "\n".
    var code: String
    /// The lines of the ```text block after an `<!-- output -->` marker that follows the block.
    var output: [String]?
  }

  struct Example {
    var path: String
    var executable: String
    var line: Int
    var code: String
    var output: [String]?
  }

  var blocks: [Block]

  var examples: [Example] {
    blocks.compactMap { block in
      guard case .example(let path, let executable) = block.kind else { return nil }
      return Example(path: path, executable: executable, line: block.line, code: block.code, output: block.output)
    }
  }

  static func load(_ file: URL) throws -> Readme {
    try parse(String(contentsOf: file, encoding: .utf8))
  }

  /// README.md first, then every DocC article (`Sources/<Module>/Documentation.docc/<Article>.md`), each named by its
  /// path in the repository.
  static func documents(_ repository: URL) throws -> [(name: String, readme: Readme)] {
    var names = ["README.md"]
    let sources = repository.appendingPathComponent("Sources")
    for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
      let catalog = "Sources/\(module)/Documentation.docc"
      let articles =
        (try? FileManager.default.contentsOfDirectory(
          atPath: repository.appendingPathComponent(catalog).path)) ?? []
      names += articles.filter { $0.hasSuffix(".md") }.sorted().map { "\(catalog)/\($0)" }
    }
    return try names.map { ($0, try load(repository.appendingPathComponent($0))) }
  }

  static func parse(_ text: String) -> Readme {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    var blocks: [Block] = []
    var i = 0
    /// The body of the fenced block whose opening fence is at `start`, and the index after its closing fence.
    func fenced(from start: Int) -> ([String], Int) {
      var end = start + 1
      while end < lines.count, lines[end] != "```" { end += 1 }
      return (Array(lines[(start + 1)..<min(end, lines.count)]), end + 1)
    }
    while i < lines.count {
      guard lines[i] == "```swift" else {
        if lines[i].hasPrefix("```") { i = fenced(from: i).1 } else { i += 1 }
        continue
      }
      let marker = i > 0 ? lines[i - 1] : ""
      let (body, next) = fenced(from: i)
      var block = Block(kind: .unmarked, line: i + 1, code: body.map { $0 + "\n" }.joined(), output: nil)
      if let match = marker.wholeMatch(of: #/<!-- example: (?<path>\S+) executable: (?<exe>\S+) -->/#) {
        block.kind = .example(path: String(match.path), executable: String(match.exe))
        block.line = i
      } else if marker == "<!-- package-manifest -->" {
        block.kind = .manifest
        block.line = i
      }
      i = next
      // An output marker after blank lines, then its ```text block.
      var j = i
      while j < lines.count, lines[j].isEmpty { j += 1 }
      if j + 1 < lines.count, lines[j] == "<!-- output -->", lines[j + 1] == "```text" {
        let (output, after) = fenced(from: j + 1)
        block.output = output
        i = after
      }
      blocks.append(block)
    }
    return Readme(blocks: blocks)
  }

  /// Where two texts first differ, as a hint to fix it; nil when they are equal.
  static func firstDifference(readme: String, file: String, readmeLine: Int) -> String? {
    guard readme != file else { return nil }
    let a = readme.split(separator: "\n", omittingEmptySubsequences: false)
    let b = file.split(separator: "\n", omittingEmptySubsequences: false)
    for index in 0..<max(a.count, b.count) {
      let left = index < a.count ? String(a[index]) : "(end of block)"
      let right = index < b.count ? String(b[index]) : "(end of file)"
      if left != right {
        return "README.md line \(readmeLine + index + 1): '\(left)', file line \(index + 1): '\(right)'"
      }
    }
    return "they differ in their last line ending"
  }

  /// Whether `line` is `pattern`, where each `<…>` in the pattern stands for any non-empty text.
  static func matches(_ line: String, _ pattern: String) -> Bool {
    var regex = "^"
    var rest = Substring(pattern)
    while let open = rest.firstIndex(of: "<"), let close = rest[open...].firstIndex(of: ">") {
      regex += NSRegularExpression.escapedPattern(for: String(rest[..<open])) + ".+"
      rest = rest[rest.index(after: close)...]
    }
    regex += NSRegularExpression.escapedPattern(for: String(rest)) + "$"
    return line.range(of: regex, options: .regularExpression) != nil
  }
}
