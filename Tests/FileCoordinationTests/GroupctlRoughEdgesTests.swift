import Foundation
import TestSupport
import Testing

/// What a newcomer met at groupctl's edges (issue #35, item 6), each with the message it gives now. Runs the real
/// binary.
///
/// Mutants this suite catches (each made once, seen failing, restored):
/// - `Read.run` without its missing-item message: `readingAMissingItemNamesTheItem` fails (`openat2 … (errno 2)`).
/// - `CacheStore` reading with `Data(contentsOf:)` again: `storingAMissingFileNamesTheFile` fails (an
///   NSCocoaErrorDomain dump).
/// - `RootArguments.hoistRoot` returning its arguments unchanged: `rootBeforeTheSubcommandIsTheRoot` fails
///   (ArgumentParser: "Unknown option '--root'").
/// - the root configuration with `version: "0.1.0"` again: `versionIsARootOptionOnly` fails (every subcommand's
///   help lists `--version`).
@Suite(.runSlot(.minutes(3))) struct GroupctlRoughEdgesTests {
  static let group = "group.com.example.edges"

  @Test func readingAMissingItemNamesTheItem() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let run = try await groupctl(["read", Self.group, "Documents/missing.txt", "--root", root.path])
    #expect(run.status == 1, "\(run)")
    #expect(
      run.err.hasPrefix("groupctl: no such item 'Documents/missing.txt' in the container '\(Self.group)'"), "\(run)")
    #expect(!run.err.contains("errno") && !run.err.contains("openat"), "\(run)")
  }

  @Test func storingAMissingFileNamesTheFile() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let missing = root.path + "/no-such.png"
    let run = try await groupctl(["cache", "store", Self.group, "k", missing, "--root", root.path])
    #expect(run.status == 1, "\(run)")
    #expect(run.err == "groupctl: cannot read '\(missing)': No such file or directory\n", "\(run)")
  }

  /// The groupctl article: "All take `--root DIR`, before or after the subcommand".
  @Test func rootBeforeTheSubcommandIsTheRoot() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try Data("hello".utf8).write(to: container.documentsURL.appendingPathComponent("a.txt"))
    for arguments in [["--root", root.path], ["--root=\(root.path)"]] {
      let run = try await groupctl(arguments + ["read", Self.group, "Documents/a.txt"])
      #expect(run.status == 0 && run.out == "hello", "\(arguments): \(run)")
    }
    // After the subcommand it wins over a root given before it.
    let typo = root.path + "/elsewhere"
    let run = try await groupctl(["--root", typo, "read", Self.group, "Documents/a.txt", "--root", root.path])
    #expect(run.status == 0 && run.out == "hello", "\(run)")
  }

  @Test(arguments: [
    (["stauts"], "'status'"), (["defaults", "raed"], "'read'"), (["cahce"], "'cache'"), (["downlods"], "'downloads'"),
  ])
  func aMistypedSubcommandGetsASuggestion(arguments: [String], suggestion: String) async throws {
    let run = try await groupctl(arguments + [Self.group])
    #expect(run.status == 64, "\(run)")
    #expect(run.err.contains("unknown command '\(arguments.last!)' (did you mean \(suggestion)"), "\(run)")
  }

  @Test func versionIsARootOptionOnly() async throws {
    let top = try await groupctl(["--help"])
    #expect(top.out.contains("--version"), "\(top)")
    for subcommand in [["status"], ["defaults", "read"], ["cache", "store"], ["downloads", "list"]] {
      let help = try await groupctl(subcommand + ["--help"])
      #expect(help.status == 0, "\(help)")
      #expect(!help.out.contains("--version"), "\(subcommand) lists --version: \(help.out)")
    }
  }
}
