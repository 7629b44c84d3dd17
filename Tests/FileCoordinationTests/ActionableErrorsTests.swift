import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// Errors a user can act on (issue #12, item 7): the path the user gave and the errno's meaning, never an internal
/// temp name, never a Foundation error dump — through the library and through the real `groupctl` (its stderr).
///
/// Mutants this suite catches:
/// - `ContainerDirectory.replaceFile` throwing the bare `openat2` error for a missing parent (no "parent directory
///   … does not exist"): `aMissingParentDirectoryIsNamed` fails.
/// - `AtomicReplace.write` rethrowing the rename error as is (it names `.gc-tmp-…`):
///   `aFailedRenameNamesTheDestinationNotTheTempFile` fails.
/// - `SystemFD.readRegularFile` throwing EINVAL for a directory: `readingADirectorySaysSo` fails.
/// - `URLHandlers.register` not checking the program: `registeringAMissingOrNonExecutableProgramIsRefused` fails.
/// - `URLHandlers.open` launching a vanished program without checking it first (no "does not exist", no
///   "registerURLScheme" advice): `openingARegistrationWhoseProgramVanishedSaysSo` fails.
@Suite(.runSlot(.minutes(3))) struct ActionableErrorsTests {
  static let group = "group.com.example.errors"

  /// What every error here must be: it names `path`, says `meaning`, shows no temp name and no Cocoa dump.
  func expectActionable(
    _ text: String, path: String, meaning: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(text.contains(path), "no '\(path)' in: \(text)", sourceLocation: sourceLocation)
    #expect(
      text.lowercased().contains(meaning.lowercased()), "no '\(meaning)' in: \(text)", sourceLocation: sourceLocation)
    #expect(!text.contains(".gc-tmp"), "a temp name in: \(text)", sourceLocation: sourceLocation)
    #expect(!text.contains("NSCocoaErrorDomain"), "a Cocoa dump in: \(text)", sourceLocation: sourceLocation)
    #expect(!text.isEmpty, sourceLocation: sourceLocation)
  }

  @Test func aMissingParentDirectoryIsNamed() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let url = container.url.appendingPathComponent("Documents/sub/x.txt")
    do {
      try container.write(Data("x".utf8), to: url)
      Issue.record("the write into a missing directory succeeded")
    } catch {
      expectActionable("\(error)", path: "Documents/sub/x.txt", meaning: "No such file or directory")
      expectActionable("\(error)", path: "Documents/sub'", meaning: "parent directory")
      #expect("\(error)".contains("does not exist"), "\(error)")
    }
    let cli = try await groupctl(["write", Self.group, "Documents/sub/x.txt", "--root", root.path])
    #expect(cli.status == 1)
    expectActionable(cli.err, path: "Documents/sub/x.txt", meaning: "parent directory")
    #expect(cli.err.contains("does not exist") && cli.err.contains("No such file or directory"), "\(cli.err)")
  }

  /// A rename over a non-empty directory fails (EISDIR/ENOTEMPTY): the error names the destination, not the temp
  /// file the rename started from.
  @Test func aFailedRenameNamesTheDestinationNotTheTempFile() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try FileManager.default.createDirectory(
      at: container.url.appendingPathComponent("Documents/dir/inner"), withIntermediateDirectories: true)
    do {
      try container.write(Data("x".utf8), to: container.url.appendingPathComponent("Documents/dir"))
      Issue.record("the write over a directory succeeded")
    } catch {
      expectActionable("\(error)", path: "Documents/dir", meaning: "Is a directory")
    }
    let cli = try await groupctl(["write", Self.group, "Documents/dir", "--root", root.path])
    #expect(cli.status == 1)
    expectActionable(cli.err, path: "Documents/dir", meaning: "Is a directory")
  }

  @Test func readingADirectorySaysSo() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    do {
      _ = try container.contents(of: container.documentsURL)
      Issue.record("reading a directory succeeded")
    } catch {
      expectActionable("\(error)", path: container.documentsURL.path, meaning: "is a directory")
      #expect(!"\(error)".contains("Invalid argument"), "\(error)")
    }
    let cli = try await groupctl(["read", Self.group, "Documents", "--root", root.path])
    #expect(cli.status == 1)
    expectActionable(cli.err, path: "Documents", meaning: "is a directory")
    #expect(!cli.err.contains("errno 22") && !cli.err.contains("Invalid argument"), "\(cli.err)")
  }

  @Test func registeringAMissingOrNonExecutableProgramIsRefused() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let missing = root.url.appendingPathComponent("no-such-app")
    do {
      try container.registerURLScheme("gcmissing", launching: missing)
      Issue.record("a missing program was registered")
    } catch {
      guard let inner = error.openURLError, inner.code == .invalidExecutable else {
        Issue.record("unexpected error \(error)")
        return
      }
      #expect(inner.subject == missing.path)
      expectActionable("\(error)", path: missing.path, meaning: "does not exist")
    }
    let plain = root.url.appendingPathComponent("not-executable")
    #expect(FileManager.default.createFile(atPath: plain.path, contents: Data("#!/bin/sh\n".utf8)))
    do {
      try container.registerURLScheme("gcplain", launching: plain)
      Issue.record("a non-executable file was registered")
    } catch {
      expectActionable("\(error)", path: plain.path, meaning: "not executable")
    }
    do {
      try container.registerURLScheme("gcdir", launching: root.url)
      Issue.record("a directory was registered")
    } catch {
      expectActionable("\(error)", path: root.path, meaning: "is a directory")
    }
    // Nothing was stored for the refused schemes.
    let schemes = try FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/schemes")
    #expect(schemes.isEmpty, "\(schemes)")
  }

  @Test func openingARegistrationWhoseProgramVanishedSaysSo() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let app = root.url.appendingPathComponent("vanishing-app")
    try FileManager.default.copyItem(atPath: "/bin/true", toPath: app.path)
    try container.registerURLScheme("gcgone", launching: app)
    try FileManager.default.removeItem(at: app)
    do {
      _ = try await container.open(URL(string: "gcgone://x")!, timeout: .seconds(5))
      Issue.record("opening with a vanished program succeeded")
    } catch {
      expectActionable("\(error)", path: app.path, meaning: "does not exist")
      #expect("\(error)".contains("registerURLScheme"), "\(error)")
    }
    let cli = try await groupctl(["open", Self.group, "gcgone://x", "--root", root.path, "--timeout", "5"])
    #expect(cli.status == 1)
    expectActionable(cli.err, path: app.path, meaning: "does not exist")
  }
}
