import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

/// `groupctl doctor` (issue #12, item 9) through the real binary, and the library's refusal of a container on a
/// file system that breaks flock or inotify.
///
/// Serialized: `GroupContainer.allowsUnsupportedFileSystem` is process-wide (it only matters for the unsupported
/// file systems these tests make, but two of them must not see each other's setting).
///
/// Mutants this suite catches:
/// - `FileSystemSupport.check` returning at once (no refusal): `aContainerOnOverlayIsRefusedUnlessAllowed` and
///   `anInjectedNetworkFileSystemIsRefusedUnlessAllowed` fail.
/// - `FileSystemSupport.optedIn` ignoring the environment variable: the `groupctl status` half of
///   `aContainerOnOverlayIsRefusedUnlessAllowed` fails.
/// - `GroupContainer(existingIdentifier:)` without the file-system check (read-only commands would open a
///   container on overlayfs): `aContainerOnOverlayIsRefusedUnlessAllowed` fails (`groupctl status` exits 0).
/// - doctor's registration check skipped: `aStaleRegistrationIsReported` fails (exit 0).
/// - doctor's temp-file walk treating every writer as alive: `aTempFileOfADeadProcessIsReported` fails.
/// - doctor's permissions check comparing only the owner: `aWrongModeIsReported` fails.
/// Issue #33 item 7, each run once by hand:
/// - `fileTypes` skipping FIFOs (`continue` for `.other`): `fifosInPresentersAndDocumentsAreReported` fails.
/// - `owners` without the single-user comparison: `aFileOfAnotherUserIsReported` fails; without the membership
///   test: `inAGroupContainerAStrangersFileIsReported` fails.
/// - `trustedFiles` skipping `OwnerOnlyWritable.problem`: `aRegistrationOthersMayWriteIsReported` fails.
/// - `coordinationSizes` without the size limit and the sparse test: `aSparseTenGigabyteLockFileIsReported` fails.
/// - `presenterRecords` skipping the decode: `aDamagedPresenterRecordIsReported` fails.
/// - `lockFiles` not asking for older builds' processes: `aLiveProcessOfAnOlderBuildIsReported` fails.
@Suite(.serialized, .runSlot(.minutes(3))) struct DoctorTests {
  static let group = "group.com.example.doctor"

  func doctor(_ root: TestRoot, _ extra: [String] = []) async throws -> (status: Int32?, out: String, err: String) {
    try await groupctl(["doctor", Self.group, "--root", root.path] + extra)
  }

  @Test func aHealthyContainerPassesEveryCheck() async throws {
    let root = try TestRoot()
    _ = try root.container(Self.group)
    let result = try await doctor(root)
    #expect(result.status == 0, "\(result.out)\(result.err)")
    let lines = result.out.split(separator: "\n")
    for check in [
      "filesystem", "inotify", "permissions", "registrations", "temp files", "outside edits", "disk space",
      "file types", "owners", "trusted files", "coordination sizes", "presenter records", "lock files",
    ] {
      #expect(lines.contains { $0.hasPrefix("ok    \(check): ") }, "no ok line for \(check) in \(result.out)")
    }
    let json = try await doctor(root, ["--json"])
    #expect(json.status == 0)
    #expect(json.out.split(separator: "\n").count == 1, "not one compact line: \(json.out)")
    let object = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
    #expect(object?["healthy"] as? Bool == true)
    #expect((object?["checks"] as? [[String: Any]])?.count == 13)
  }

  /// A live process of a build from before lock files were removed (its liveness lock is empty) holds their
  /// removal back: doctor names it, and says all is well once it is gone.
  @Test func aLiveProcessOfAnOlderBuildIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try FileCoordinator().coordinate(writingItemAt: container.documentsURL.appendingPathComponent("a")) { _ in }
    let older = try SystemFD.open(
      container.url.path + "/" + CoordinationPaths.processes + "/4000000.77.lock", [.readWrite, .create], mode: 0o600)
    try older.lock(.shared)
    let held = try await doctor(root)
    #expect(held.status == 1)
    let line = held.out.split(separator: "\n").first { $0.contains("lock files: ") }.map(String.init) ?? held.out
    #expect(line.hasPrefix("warn  lock files: ") && line.contains("4000000.77"), "\(line)")
    older.close()  // it exits
    let after = try await doctor(root)
    #expect(after.status == 0, "\(after.out)")
    #expect(after.out.contains("ok    lock files: "), "\(after.out)")
  }

  @Test func aMissingContainerIsNotCreated() async throws {
    let root = try TestRoot()
    let result = try await doctor(root)
    #expect(result.status == 1)
    #expect(result.out.contains("fail  container: no such container"), "\(result.out)")
    #expect(!FileManager.default.fileExists(atPath: root.path + "/" + Self.group))
  }

  @Test func aStaleRegistrationIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let app = root.url.appendingPathComponent("old-app")
    try FileManager.default.copyItem(atPath: "/bin/true", toPath: app.path)
    try container.registerURLScheme("gcdoctor", launching: app)
    #expect(try await doctor(root).status == 0)
    try FileManager.default.removeItem(at: app)
    let result = try await doctor(root)
    #expect(result.status == 1)
    let line = result.out.split(separator: "\n").first { $0.hasPrefix("fail  registrations: ") } ?? ""
    #expect(line.contains("gcdoctor") && line.contains(app.path) && line.contains("does not exist"), "\(result.out)")
    #expect(line.contains("— fix: "), "\(line)")
  }

  @Test func aTempFileOfADeadProcessIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    // The name an atomic replace gives its temp file; writer "<pid>.<start time>" with a start time no live
    // process has.
    let name = ".gc-tmp-\(getpid()).1-abc-notes.txt"
    #expect(FileManager.default.createFile(atPath: container.path + "/Documents/" + name, contents: Data("x".utf8)))
    let result = try await doctor(root)
    #expect(result.status == 1)
    let line = result.out.split(separator: "\n").first { $0.hasPrefix("warn  temp files: ") } ?? ""
    #expect(line.contains("1 left by dead processes") && line.contains("Documents/" + name), "\(result.out)")
    // Doctor only looks: the file is still there.
    #expect(FileManager.default.fileExists(atPath: container.path + "/Documents/" + name))
  }

  @Test func aWrongModeIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: container.documentsURL.path)
    let result = try await doctor(root)
    #expect(result.status == 1)
    let line = result.out.split(separator: "\n").first { $0.hasPrefix("fail  permissions: ") } ?? ""
    #expect(line.contains("'Documents' has mode 755, not 700"), "\(result.out)")
    #expect(line.contains("chmod 700 '\(container.documentsURL.path)'"), "\(line)")
  }

  /// A real overlayfs mount (as root); when it cannot be mounted the test says so and the injected case below
  /// still covers the refusal.
  @Test func aContainerOnOverlayIsRefusedUnlessAllowed() async throws {
    let base = try TestRoot()
    for name in ["lower", "upper", "work", "merged"] {
      try FileManager.default.createDirectory(atPath: base.path + "/" + name, withIntermediateDirectories: true)
    }
    let merged = base.path + "/merged"
    let options = "lowerdir=\(base.path)/lower,upperdir=\(base.path)/upper,workdir=\(base.path)/work"
    guard try runTool("/bin/mount", ["-t", "overlay", "overlay", "-o", options, merged]) == 0 else {
      withKnownIssue("cannot mount an overlay here (not root?): the injected file system test covers the refusal") {
        Issue.record("no overlay mount")
      }
      return
    }
    defer { _ = try? runTool("/bin/umount", ["-l", merged]) }
    let rootURL = URL(fileURLWithPath: merged)
    do {
      _ = try GroupContainer(identifier: Self.group, root: rootURL)
      Issue.record("a container on overlayfs was opened without the opt-in")
    } catch {
      guard error.code == .unsupportedFileSystem, let kind = error.fileSystemKind else {
        Issue.record("unexpected error \(error)")
        return
      }
      #expect(kind == "overlay")
      #expect("\(error)".contains("GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1"), "\(error)")
    }
    #expect(!FileManager.default.fileExists(atPath: merged + "/" + Self.group), "the refused container was created")

    // A process that writes makes the container with the environment's opt-in.
    let made = try await groupctl(
      ["write", Self.group, "Documents/x.txt", "--root", merged],
      environment: ["GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM": "1"])
    #expect(made.status == 0, "\(made.err)")

    // Opening the existing container (status only reads, creating nothing) is refused too, unless allowed.
    let refused = try await groupctl(["status", Self.group, "--root", merged])
    #expect(refused.status != 0)
    #expect(refused.err.contains("overlay") && refused.err.contains(merged), "\(refused.err)")
    let allowed = try await groupctl(
      ["status", Self.group, "--root", merged], environment: ["GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM": "1"])
    #expect(allowed.status == 0, "\(allowed.err)")

    GroupContainer.allowsUnsupportedFileSystem = true
    defer { GroupContainer.allowsUnsupportedFileSystem = false }
    let container = try GroupContainer(identifier: Self.group, root: rootURL)
    #expect(FileManager.default.fileExists(atPath: container.documentsURL.path))

    let report = try await groupctl(["doctor", Self.group, "--root", merged])
    #expect(report.status == 1)
    #expect(report.out.contains("fail  filesystem: overlay"), "\(report.out)")
  }

  /// The refusal through an injected `f_type` (NFS), for machines where no overlay can be mounted.
  @Test func anInjectedNetworkFileSystemIsRefusedUnlessAllowed() throws {
    let root = try TestRoot()
    GroupContainer.injectFileSystemKind(0x6969, under: root.path)
    defer { GroupContainer.injectFileSystemKind(nil, under: root.path) }
    do {
      _ = try GroupContainer(identifier: Self.group, root: root.url)
      Issue.record("a container on (injected) NFS was opened without the opt-in")
    } catch {
      guard error.code == .unsupportedFileSystem, let kind = error.fileSystemKind, let path = error.path else {
        Issue.record("unexpected error \(error)")
        return
      }
      #expect(kind == "nfs")
      #expect(path == root.path)
    }
    GroupContainer.allowsUnsupportedFileSystem = true
    defer { GroupContainer.allowsUnsupportedFileSystem = false }
    #expect(throws: Never.self) { _ = try GroupContainer(identifier: Self.group, root: root.url) }
  }

  // MARK: Issue #33 item 7: every file of the container

  /// Doctor's line for `check` with `status` ("fail", "warn"), or "".
  func line(_ out: String, _ status: String, _ check: String) -> String {
    let prefix = status.padding(toLength: 4, withPad: " ", startingAt: 0) + "  \(check): "
    return out.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init) ?? ""
  }

  /// The `problems` of `check` in doctor's `--json` output, as (path, fix) pairs.
  func problems(_ root: TestRoot, _ check: String) async throws -> [(path: String, fix: String)] {
    let json = try await doctor(root, ["--json"])
    let object = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
    let checks = object?["checks"] as? [[String: Any]] ?? []
    let found = checks.first { $0["check"] as? String == check }?["problems"] as? [[String: Any]] ?? []
    return found.map { ($0["path"] as? String ?? "", $0["fix"] as? String ?? "") }
  }

  @Test func fifosInPresentersAndDocumentsAreReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let record = ".coordination/presenters/999.1.7"
    #expect(mkfifo(container.path + "/" + record, 0o600) == 0)
    #expect(mkfifo(container.path + "/Documents/pipe", 0o600) == 0)
    let result = try await doctor(root)
    #expect(result.status == 1)
    let types = line(result.out, "fail", "file types")
    #expect(types.contains("'\(record)' is a FIFO") && types.contains("'Documents/pipe' is a FIFO"), "\(result.out)")
    #expect(types.contains("rm '\(container.path)/Documents/pipe'"), "\(types)")
    #expect(line(result.out, "fail", "presenter records").contains(record), "\(result.out)")
    let listed = try await problems(root, "file types")
    #expect(Set(listed.map(\.path)) == [record, "Documents/pipe"], "\(listed)")
    #expect(listed.allSatisfy { $0.fix.hasPrefix("rm '") })
  }

  @Test func aFileOfAnotherUserIsReported() async throws {
    guard getuid() == 0 else {
      withKnownIssue("chown to another uid needs root") { Issue.record("not root") }
      return
    }
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let file = container.path + "/Documents/theirs.txt"
    #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
    #expect(chown(file, 54321, 54321) == 0)
    let result = try await doctor(root)
    #expect(result.status == 1)
    let owners = line(result.out, "fail", "owners")
    #expect(owners.contains("'Documents/theirs.txt' belongs to uid 54321"), "\(result.out)")
    #expect(owners.contains("chown \(getuid()) '\(file)'"), "\(owners)")
    #expect(try await problems(root, "owners").map(\.path) == ["Documents/theirs.txt"])
  }

  @Test(.enabled(if: GroupMembers.available, "needs root, useradd and groupadd"))
  func inAGroupContainerAStrangersFileIsReported() async throws {
    let users = try await GroupMembers.make()
    let root = try TestRoot()
    let container = try users.container(in: root, Self.group)
    let member = container.path + "/Documents/member.txt"
    let stranger = container.path + "/Documents/stranger.txt"
    let wrongGroup = container.path + "/Documents/wrong-group.txt"
    for file in [member, stranger, wrongGroup] {
      #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
    }
    #expect(chown(member, users.a, users.group) == 0)
    #expect(chown(stranger, 54321, users.group) == 0)
    #expect(chown(wrongGroup, users.b, 0) == 0)
    let result = try await doctor(root)
    let owners = line(result.out, "fail", "owners")
    #expect(owners.contains("'Documents/stranger.txt' belongs to uid 54321, who is not a member"), "\(result.out)")
    #expect(owners.contains("'Documents/wrong-group.txt' has group 0") && owners.contains("chgrp \(users.group)"))
    #expect(!owners.contains("member.txt"), "\(owners)")
    #expect(
      Set(try await problems(root, "owners").map(\.path)) == ["Documents/stranger.txt", "Documents/wrong-group.txt"])
  }

  @Test func aRegistrationOthersMayWriteIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try container.registerURLScheme("gcdoctrust", launching: URL(fileURLWithPath: "/bin/true"))
    #expect(try await doctor(root).status == 0)
    let file = container.path + "/.coordination/schemes/gcdoctrust"
    #expect(chmod(file, 0o622) == 0)
    let result = try await doctor(root)
    #expect(result.status == 1)
    let trusted = line(result.out, "fail", "trusted files")
    #expect(
      trusted.contains("'.coordination/schemes/gcdoctrust'") && trusted.contains("chmod go-w '\(file)'"),
      "\(result.out)")
  }

  @Test func aSparseTenGigabyteLockFileIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let file = container.path + "/.coordination/locks/planted"
    #expect(FileManager.default.createFile(atPath: file, contents: nil))
    #expect(truncate(file, 10 << 30) == 0)
    let big = container.path + "/.coordination/activities-big"
    #expect(FileManager.default.createFile(atPath: big, contents: nil))
    #expect(truncate(big, 3 << 20) == 0)
    // A bucket's index over its own limit (1 MiB), under the directory default's (16 MiB).
    let indexes = container.path + "/.coordination/presenter-index"
    try FileManager.default.createDirectory(atPath: indexes, withIntermediateDirectories: true)
    #expect(FileManager.default.createFile(atPath: indexes + "/0000000000000001", contents: Data(count: 2 << 20)))
    let result = try await doctor(root)
    #expect(result.status == 1)
    let sizes = line(result.out, "fail", "coordination sizes")
    #expect(sizes.contains("'.coordination/presenter-index/0000000000000001' holds 2097152 bytes"), "\(sizes)")
    #expect(sizes.contains("'.coordination/locks/planted' holds 10737418240 bytes"), "\(result.out)")
    #expect(sizes.contains("truncate -s 0 '\(file)'"), "\(sizes)")
    #expect(sizes.contains("'.coordination/activities-big' is sparse"), "\(sizes)")
  }

  @Test func aDamagedPresenterRecordIsReported() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let record = ".coordination/presenters/999.1.3"
    #expect(
      FileManager.default.createFile(atPath: container.path + "/" + record, contents: Data("{\"version\":1".utf8)))
    let result = try await doctor(root)
    #expect(result.status == 1)
    let records = line(result.out, "fail", "presenter records")
    #expect(records.contains("'\(record)' is a damaged presenter record"), "\(result.out)")
    #expect(records.contains("rm '\(container.path)/\(record)'"), "\(records)")
  }
}
