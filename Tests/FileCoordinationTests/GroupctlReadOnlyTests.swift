import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// `groupctl` for users: commands that only read create nothing, every command's exit status (0, 1 with
/// `groupctl: <reason>`, 64 with its own usage line), `--version`, and `status --json` as one line. Runs the real
/// binary.
///
/// Mutants this suite catches (each made once, seen failing, restored):
/// - `ContainerOptions.openExisting()` calling the creating `open()`: the missing-container table fails (the root
///   and container appear), and so does `aContainerMadeByHandIsReadAsItIs` (the layout appears).
/// - `GroupContainer(existingIdentifier:)` skipping its existence check: the table fails on the message (the raw
///   `open … No such file or directory` instead of `no such container`; the open itself still creates nothing).
/// - `DefaultsStore.openExisting` opening (creating) without finding the suite's files: the missing-suite test
///   fails (`typo.lock`/`typo.journal` appear in Library/Preferences).
/// - `CacheOptions.openExisting` without its directory check: the missing-cache test fails.
/// - `Groupctl.exit(command:)` handing a `ValidationError` to ArgumentParser (the top-level usage): the usage
///   table fails.
/// - `status --json` with `.prettyPrinted`: the one-line test fails.
/// - `Groupctl.exit(command:)` printing every error as a failure (no pass-through for ArgumentParser's own):
///   `helpExits0WithTheSubcommandsHelp` fails (the `help` subcommand throws its help from run()).
@Suite(.runSlot(.minutes(3))) struct GroupctlReadOnlyTests {
  static let group = "group.com.example.readonly"
  static let task = String(repeating: "ab", count: 16)

  /// Every command that only reads, with the arguments it needs.
  static let readOnlyCommands: [[String]] = [
    ["read", group, "Documents/x.txt"], ["status", group], ["status", group, "--json"],
    ["defaults", "read", group], ["defaults", "read", group, "k"], ["defaults", "read", group, "--suite", "s"],
    ["defaults", "read-type", group, "k"], ["defaults", "find", group, "word"], ["defaults", "domains", group],
    ["defaults", "export", group, "s", "-"], ["defaults", "delete", group, "k"],
    ["defaults", "rename", group, "a", "b"], ["defaults", "sync", group],
    ["cache", "get", group, "k"], ["cache", "list", group], ["cache", "stats", group],
    ["downloads", "list", group], ["downloads", "watch", group],
  ]

  @Test(arguments: readOnlyCommands)
  func aMissingContainerIsAnErrorAndNothingIsCreated(command: [String]) async throws {
    let root = try TestRoot()
    let typo = root.path + "/tpyo"  // the misspelled --root: must not appear
    let run = try await groupctl(command + ["--root", typo])
    #expect(run.status == 1, "\(run)")
    #expect(run.err == "groupctl: no such container '\(Self.group)' at \(typo)/\(Self.group)\n", "\(run)")
    #expect(!FileManager.default.fileExists(atPath: typo))
    // The root exists, the container does not: the root stays empty.
    let inRoot = try await groupctl(command + ["--root", root.path])
    #expect(inRoot.status == 1 && inRoot.err.contains("no such container"), "\(inRoot)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty)
  }

  /// `downloads wait` keeps its documented status for an unknown task (2): without a container there is none.
  @Test func waitingInAMissingContainerIsNoSuchTask() async throws {
    let root = try TestRoot()
    let typo = root.path + "/tpyo"
    let run = try await groupctl(["downloads", "wait", Self.group, Self.task, "--root", typo])
    #expect(run.status == 2, "\(run)")
    #expect(run.err.contains("'\(Self.task)'") && run.err.contains("no such container '\(Self.group)'"), "\(run)")
    #expect(!FileManager.default.fileExists(atPath: typo))
  }

  @Test func aMissingSuiteIsAnErrorAndNothingIsCreated() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let preferences = container.preferencesURL.path
    let written = try await groupctl([
      "defaults", "write", Self.group, "k", "v", "--suite", "real", "--root", root.path,
    ])
    #expect(written.status == 0, "\(written)")
    let before = try FileManager.default.contentsOfDirectory(atPath: preferences).sorted()
    for command in [
      ["defaults", "read", Self.group, "--suite", "typo"], ["defaults", "read", Self.group, "k", "--suite", "typo"],
      ["defaults", "read-type", Self.group, "k", "--suite", "typo"], ["defaults", "export", Self.group, "typo", "-"],
      ["defaults", "delete", Self.group, "k", "--suite", "typo"], ["defaults", "sync", Self.group, "--suite", "typo"],
      ["defaults", "rename", Self.group, "k", "l", "--suite", "typo"],
    ] {
      let run = try await groupctl(command + ["--root", root.path])
      #expect(run.status == 1, "\(command): \(run)")
      #expect(run.err == "groupctl: no such suite 'typo' in \(Self.group)\n", "\(command): \(run)")
    }
    // The default suite (the group identifier) was never written either.
    let plain = try await groupctl(["defaults", "read", Self.group, "--root", root.path])
    #expect(plain.status == 1 && plain.err.contains("no such suite '\(Self.group)'"), "\(plain)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: preferences).sorted() == before)
    // The suite that exists reads.
    let real = try await groupctl(["defaults", "read", Self.group, "k", "--suite", "real", "--root", root.path])
    #expect(real.status == 0 && real.out == "v\n", "\(real)")
  }

  @Test func aSuiteThatIsOnlyAPlistFileExists() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    // A plist put in place by hand (a copy from elsewhere) is a suite: XML, one key.
    let xml = """
      <?xml version="1.0" encoding="UTF-8"?>
      <plist version="1.0"><dict><key>answer</key><integer>42</integer></dict></plist>
      """
    try Data(xml.utf8).write(to: container.preferencesURL.appendingPathComponent("copied.plist"))
    let run = try await groupctl(["defaults", "read", Self.group, "answer", "--suite", "copied", "--root", root.path])
    #expect(run.status == 0 && run.out == "42\n", "\(run)")
  }

  @Test func aMissingCacheIsAnErrorAndNothingIsCreated() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    for command in [
      ["cache", "get", Self.group, "k"], ["cache", "list", Self.group], ["cache", "stats", Self.group],
    ] {
      let run = try await groupctl(command + ["--cache", "typo", "--root", root.path])
      #expect(run.status == 1 && run.err.hasPrefix("groupctl: no such cache 'typo' in \(Self.group)"), "\(run)")
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: container.cachesURL.path).isEmpty)
  }

  @Test func aContainerMadeByHandIsReadAsItIs() async throws {
    let root = try TestRoot()
    // No layout, no .coordination: an existing directory all the same.
    let documents = root.path + "/\(Self.group)/Documents"
    try FileManager.default.createDirectory(atPath: documents, withIntermediateDirectories: true)
    try Data("by hand\n".utf8).write(to: URL(fileURLWithPath: documents + "/note.txt"))
    let run = try await groupctl(["read", Self.group, "Documents/note.txt", "--root", root.path])
    #expect(run.status == 0 && run.out == "by hand\n", "\(run)")
    // Reading made the coordination state only; no layout directory appeared.
    let entries = try FileManager.default.contentsOfDirectory(atPath: root.path + "/\(Self.group)")
    #expect(Set(entries) == [".coordination", "Documents"], "\(entries)")
  }

  /// Usage errors: 64, the SUBCOMMAND's usage line, and nothing created (the value is checked first).
  static let usageErrors: [(command: [String], usage: String, message: String)] = [
    (["defaults", "write", group, "k", "-int", "x"], "groupctl defaults write", "'x' is not an integer"),
    (["defaults", "write", group, "k", "{ a = 1"], "groupctl defaults write", "not a valid old-style property list"),
    (["defaults", "write", group, "k"], "groupctl defaults write", "missing value"),
    (["defaults", "write", group, "k", "-array", "-dict"], "groupctl defaults write", "cannot hold -dict"),
    (["defaults", "write", group, "k", "-dict", "a"], "groupctl defaults write", "has no value"),
    (["defaults", "write", group, "k", "-array-add"], "groupctl defaults write", "one item or more"),
    (["defaults", "read-type", group], "groupctl defaults read-type", "Missing expected argument"),
    (["cache", "pressure", "bogus", group], "groupctl cache pressure", "is not a level"),
    (["open", group, "not a url"], "groupctl open", "not"),
    (["read", group], "groupctl read", "Missing expected argument"),
    (["status", group, "--bogus"], "groupctl status", "Unknown option"),
    (["downloads", "wait", group, "xyz"], "groupctl downloads wait", "is not a task id"),
  ]

  @Test(arguments: usageErrors)
  func usageErrorsExit64WithTheSubcommandsUsage(command: [String], usage: String, message: String) async throws {
    let root = try TestRoot()
    let typo = root.path + "/none"
    let run = try await groupctl(command + ["--root", typo])
    #expect(run.status == 64, "\(run)")
    #expect(run.err.contains("Usage: \(usage) "), "\(run)")
    #expect(run.err.contains(message), "\(run)")
    #expect(!run.err.contains("<subcommand>"), "the top-level usage: \(run)")
    #expect(!FileManager.default.fileExists(atPath: typo))
  }

  @Test func failuresExit1WithTheReason() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let r = root.path
    #expect(try await groupctl(["defaults", "write", Self.group, "s", "text", "--root", r]).status == 0)
    let failures: [(command: [String], reason: String)] = [
      (["read", Self.group, "Documents/missing.txt"], "missing.txt"),
      (["defaults", "read", Self.group, "nokey"], "the key 'nokey' does not exist in suite '\(Self.group)'"),
      (["defaults", "read-type", Self.group, "nokey"], "the key 'nokey' does not exist"),
      (["defaults", "delete", Self.group, "nokey"], "the key 'nokey' does not exist"),
      (["defaults", "rename", Self.group, "nokey", "other"], "the key 'nokey' does not exist"),
      (["defaults", "write", Self.group, "s", "-array-add", "x"], "is string, not an array; left unchanged"),
      (["defaults", "write", Self.group, "s", "-dict-add", "k", "v"], "is string, not a dictionary"),
      (["defaults", "import", Self.group, "other", r + "/no-such-file.plist"], "no-such-file.plist"),
    ]
    for (command, reason) in failures {
      let run = try await groupctl(command + ["--root", r])
      #expect(run.status == 1, "\(command): \(run)")
      #expect(run.err.hasPrefix("groupctl: ") && run.err.contains(reason), "\(command): \(run)")
      #expect(!run.err.contains("Usage:"), "a failure is not a usage error: \(run)")
    }
    // -array-add on a string left it as it was.
    #expect(try await groupctl(["defaults", "read", Self.group, "s", "--root", r]).out == "text\n")
  }

  @Test func helpExits0WithTheSubcommandsHelp() async throws {
    for command in [["--help"], ["defaults", "--help"], ["help", "defaults", "write"], ["defaults", "import", "-h"]] {
      let run = try await groupctl(command)
      #expect(run.status == 0 && run.out.contains("USAGE: groupctl"), "\(command): \(run)")
      #expect(run.err.isEmpty, "\(command): \(run)")
    }
    #expect(try await groupctl(["help", "defaults", "write"]).out.contains("-array-add"))
  }

  @Test func aStatusOfItsOwnPassesThrough() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try FileManager.default.createDirectory(
      at: container.cachesURL.appendingPathComponent("images"), withIntermediateDirectories: true)
    let miss = try await groupctl(["cache", "get", Self.group, "nothing", "--root", root.path])
    #expect(miss.status == 1 && miss.err == "no image for 'nothing'\n", "\(miss)")
  }

  @Test func versionPrintsTheReleaseNumber() async throws {
    let run = try await groupctl(["--version"])
    #expect(run.status == 0 && run.out == "0.1.0\n", "\(run)")
  }

  @Test func statusJSONIsOneCompactLine() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let run = try await groupctl(["status", Self.group, "--json", "--root", root.path])
    #expect(run.status == 0, "\(run)")
    #expect(run.out.hasSuffix("\n") && run.out.dropLast().split(separator: "\n").count == 1, "\(run)")
    #expect(!run.out.dropLast().contains("\n") && !run.out.contains("  "), "\(run)")
    let status = try JSONDecoder().decode(ContainerStatus.self, from: Data(run.out.utf8))
    #expect(status.container == container.path)
  }
}
