import FileCoordination
import Foundation
import GroupContainerCore
import Testing

/// Two real users, A and B, in one group: what one member of a group-shared container can do to another's files,
/// with real processes (`setpriv`). Made with `groupadd`/`useradd` the first time a test asks (kept afterwards: a
/// later run, or another test process, finds them there).
public struct GroupMembers: Sendable {
  public let a: UInt32
  public let b: UInt32
  public let group: UInt32

  static let names = (a: "gctrust-a", b: "gctrust-b", group: "gctrust")
  static let setpriv = "/usr/bin/setpriv"

  /// Whether these tests can run here: root (to make users and run programs as them) and the tools.
  public static let available: Bool =
    geteuid() == 0
    && [setpriv, "/usr/sbin/useradd", "/usr/sbin/groupadd"].allSatisfy {
      FileManager.default.isExecutableFile(atPath: $0)
    }

  /// The users and group, made on first use in this process.
  public static func make() async throws -> GroupMembers { try await made.value }

  private static let made = Task<GroupMembers, Error> {
    try await tool("/usr/sbin/groupadd", ["--system", names.group])
    for user in [names.a, names.b] {
      try await tool("/usr/sbin/useradd", ["--system", "-M", "-N", "-g", names.group, "-s", "/usr/sbin/nologin", user])
    }
    guard let group = getgrnam(names.group)?.pointee.gr_gid, let a = getpwnam(names.a)?.pointee.pw_uid,
      let b = getpwnam(names.b)?.pointee.pw_uid
    else {
      throw CocoaError(.fileNoSuchFile, userInfo: [NSDebugDescriptionErrorKey: "groupadd/useradd made no \(names)"])
    }
    return GroupMembers(a: a, b: b, group: group)
  }

  /// Runs an account tool; "already exists" (status 9: an earlier run made it) is fine.
  private static func tool(_ path: String, _ arguments: [String]) async throws {
    guard let run = try ToolRun(path, arguments) else { return }
    let status = await run.exit(timeout: 60)
    guard status == 0 || status == 9 else {
      throw CocoaError(
        .executableLoad,
        userInfo: [
          NSDebugDescriptionErrorKey:
            "\(path) \(arguments) failed (\(status.map(String.init) ?? "hung")): \(run.errors)"
        ])
    }
  }

  /// Runs `executable` with `arguments` as `uid` with the group as its only group, to its end; `status` is nil when
  /// it ran past the hang detector (`timeout`, generous: the machine may be loaded) and was killed.
  public func run(
    as uid: UInt32, _ executable: String, _ arguments: [String], timeout: Double = 90
  ) async throws -> (status: Int32?, out: String, err: String) {
    let run = try #require(
      try ToolRun(
        Self.setpriv, ["--reuid=\(uid)", "--regid=\(group)", "--groups=\(group)", executable] + arguments))
    let status = await run.exit(timeout: timeout)
    return (status, run.output, run.errors)
  }

  /// `sh -c script` as `uid`; the script sees `arguments` as `$1`, `$2`… and starts with `umask 022`.
  public func shell(
    as uid: UInt32, _ script: String, _ arguments: [String] = []
  ) async throws -> (status: Int32?, out: String, err: String) {
    try await run(as: uid, "/bin/sh", ["-c", "umask 022; " + script, "sh"] + arguments)
  }

  /// A group-shared container in `root` that both users can use: the root traversable by them, the container
  /// directory the group's (setgid 2770, made before the layout so everything beneath inherits the group).
  public func container(in root: TestRoot, _ identifier: String) throws -> GroupContainer {
    try allowTraversal(root)
    let directory = root.path + "/" + identifier
    guard mkdir(directory, 0o700) == 0, chown(directory, 0, group) == 0, chmod(directory, 0o2770) == 0 else {
      throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return try GroupContainer(identifier: identifier, root: root.url, sharing: .group)
  }

  /// A directory in `root` where the members' programs may leave marker files (sticky, writable by all).
  public func markers(in root: TestRoot) throws -> String {
    try allowTraversal(root)
    let directory = root.path + "/markers"
    guard mkdir(directory, 0o700) == 0, chmod(directory, 0o1777) == 0 else {
      throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return directory
  }

  /// The test root and its parent may be passed through (not listed) by the test users.
  private func allowTraversal(_ root: TestRoot) throws {
    for path in [root.url.deletingLastPathComponent().path, root.path] {
      var st = stat()
      guard stat(path, &st) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
      if st.st_mode & 0o011 != 0o011 { _ = chmod(path, (st.st_mode & 0o7777) | 0o011) }
    }
  }

  /// The owner of the file at `path` (not following a link there); nil when there is none.
  public static func owner(_ path: String) -> UInt32? {
    var st = stat()
    return lstat(path, &st) == 0 ? st.st_uid : nil
  }
}

/// How member B gets its own content into a file of member A's that decides what A runs (a URL scheme
/// registration, a relaunch registration). Each must be refused by A's reader, naming what is wrong.
public enum TrustAttack: String, CaseIterable, Sendable, CustomTestStringConvertible {
  /// B writes its own file and renames it over A's (the file is then B's).
  case replace
  /// B writes its own file and hard-links it to A's name (B's file, two links).
  case hardLinkOwnFile
  /// A file of A's that holds B's content gets a second name: A's file's. B cannot make that link here
  /// (fs.protected_hardlinks=1), but can where that sysctl is 0; root makes it for the test.
  case secondLinkToAsFile
  /// A makes its file group-writable by mistake (`chmod g+w`), then B edits it in place (it stays A's).
  case groupWritableThenEdited

  public var testDescription: String { rawValue }

  /// What the refusal must say is wrong.
  public func problem(_ users: GroupMembers) -> [String] {
    switch self {
    case .replace: ["belongs to uid \(users.b)"]
    case .hardLinkOwnFile: ["belongs to uid \(users.b)", "2 hard links"]
    case .secondLinkToAsFile: ["2 hard links"]
    case .groupWritableThenEdited: ["its mode 0660 lets its group write it"]
    }
  }

  /// Puts the content of `source` (a file B can read) at `file` (A's, mode 0640) this way; `scratch` is a directory
  /// on the same file system for the file of A's that `secondLinkToAsFile` links.
  public func perform(on file: String, from source: String, users: GroupMembers, scratch: String) async throws {
    switch self {
    case .replace:
      let b = try await users.shell(as: users.b, #"cp "$1" "$2.b" && mv -f "$2.b" "$2""#, [source, file])
      #expect(b.status == 0, "B could not replace '\(file)': \(b.err)")
    case .hardLinkOwnFile:
      let b = try await users.shell(as: users.b, #"cp "$1" "$2.b" && ln -f "$2.b" "$2""#, [source, file])
      #expect(b.status == 0, "B could not link its file to '\(file)': \(b.err)")
    case .secondLinkToAsFile:
      let asFile = scratch + "/a-file-\(UUID().uuidString)"
      try FileManager.default.copyItem(atPath: source, toPath: asFile)
      #expect(chown(asFile, users.a, users.group) == 0 && chmod(asFile, 0o640) == 0)
      #expect(unlink(file) == 0 && link(asFile, file) == 0)
    case .groupWritableThenEdited:
      let a = try await users.shell(as: users.a, #"chmod g+w "$1""#, [file])
      #expect(a.status == 0, "A could not chmod '\(file)': \(a.err)")
      let b = try await users.shell(as: users.b, #"cat "$1" > "$2""#, [source, file])
      #expect(b.status == 0, "B could not edit the group-writable '\(file)': \(b.err)")
      #expect(GroupMembers.owner(file) == users.a)
    }
  }
}
