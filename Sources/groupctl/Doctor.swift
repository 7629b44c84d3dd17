import ArgumentParser
import FileCoordination
import Foundation
import GroupContainer
import GroupContainerCore
import Messaging
import SystemLayer

/// `groupctl doctor`: what on this machine can break the container's guarantees, each finding with its fix.
///
/// It only reads: the container is never created or opened (opening one sweeps the temp files this reports), so
/// everything is looked at through the file system and /proc.
struct Doctor: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "doctor",
    abstract: "Check what could break the container's guarantees on this machine, each with its fix.",
    discussion: """
      One line per check: `ok|warn|fail  <check>: <finding> — fix: <what to do>` (--json: one JSON object). \
      Checks the file system (NFS, CIFS/SMB, FUSE and overlay break flock or inotify), inotify limits against \
      what this user and the group use, directory owners and modes, URL scheme registrations whose program is \
      gone, temp files left by dead processes, outside edits of a suite's plist kept aside, free space, and every \
      file of the container: FIFOs, sockets, devices and links where only regular files belong, foreign owners, \
      files that decide what runs but others may write, oversize or sparse files in .coordination, damaged \
      presenter records (--json lists each with its fix), and whether unused lock files are removed (a live \
      process of an older build holds that back). Exit status 0 when every check is ok, 1 otherwise.
      """)

  @OptionGroup var container: ContainerOptions
  @Flag(help: "Print one JSON object.") var json = false

  /// Free space under which the disk check warns.
  static let minimumFreeBytes: UInt64 = 256 << 20
  /// Free inodes under which the disk check warns.
  static let minimumFreeInodes: UInt64 = 1024
  /// How many entries the temp-file walk looks at, at most (the library's own sweep has the same budget).
  static let walkBudget = 20_000

  func run() throws {
    let root: String
    do {
      try GroupContainer.validate(identifier: container.groupID)
      root =
        try container.root.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? GroupContainer.defaultRoot()
    } catch {
      throw ValidationError("\(error)")
    }
    let path = root + "/" + container.groupID
    var checks: [Check]
    if (try? FileSystem.status(path))?.kind != .directory {
      checks = [
        Check(
          .fail, "container", "no such container '\(path)'",
          fix: "check the group identifier and --root (or GROUP_CONTAINER_ROOT); an app creates it when it opens it")
      ]
    } else {
      let inspector = Inspector(path: path)
      let walk = inspector.walk()
      checks = [
        inspector.fileSystem(), inspector.inotify(), inspector.permissions(), inspector.registrations(),
        inspector.temporaries(walk), inspector.unappliedEdits(), inspector.diskSpace(), inspector.fileTypes(walk),
        inspector.owners(walk), inspector.trustedFiles(walk), inspector.coordinationSizes(walk),
        inspector.presenterRecords(walk), inspector.lockFiles(),
      ]
    }
    let healthy = checks.allSatisfy { $0.status == .ok }
    if json {
      let report = Report(container: path, healthy: healthy, checks: checks)
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
      Output.line(String(decoding: try encoder.encode(report), as: UTF8.self))
    } else {
      for check in checks { Output.line(check.line) }
    }
    if !healthy { throw ExitCode(1) }
  }

  /// The JSON form.
  struct Report: Encodable {
    var container: String
    var healthy: Bool
    var checks: [Check]
  }

  /// One finding.
  struct Check: Encodable {
    enum Status: String, Encodable { case ok, warn, fail }
    var status: Status
    var check: String
    var finding: String
    var fix: String?
    /// Each file found wrong, with its own fix (the checks that walk the container).
    var problems: [Problem]?

    init(_ status: Status, _ check: String, _ finding: String, fix: String? = nil, problems: [Problem]? = nil) {
      self.status = status
      self.check = check
      self.finding = finding
      self.fix = status == .ok ? nil : fix
      self.problems = problems
    }

    /// A check over files: ok when `problems` is empty, else `status` with the first few shown.
    init(_ status: Status, _ check: String, _ problems: [Problem], ok: String, scope: String) {
      guard !problems.isEmpty else {
        self.init(.ok, check, ok + scope, problems: [])
        return
      }
      let shown = problems.prefix(5)
      let more = problems.count > 5 ? "; … (\(problems.count - 5) more: --json lists them)" : ""
      self.init(
        status, check,
        "\(problems.count) found\(scope): " + shown.map { "'\($0.path)' \($0.problem)" }.joined(separator: "; ") + more,
        fix: shown.map(\.fix).joined(separator: "; ") + (problems.count > 5 ? "; …" : ""), problems: problems)
    }

    /// One file found wrong.
    struct Problem: Encodable {
      /// The file's path relative to the container.
      var path: String
      var problem: String
      /// The command that fixes it.
      var fix: String
    }

    var line: String {
      let label = status.rawValue.padding(toLength: 4, withPad: " ", startingAt: 0)
      return "\(label)  \(check): \(finding)" + (fix.map { " — fix: \($0)" } ?? "")
    }
  }
}

/// The checks, on one container directory.
private struct Inspector {
  let path: String
  var coordination: String { path + "/" + CoordinationPaths.directory }

  // MARK: file system

  func fileSystem() -> Doctor.Check {
    let kind: FileSystemKind
    do { kind = try FileSystem.kind(of: path) } catch {
      return Doctor.Check(.warn, "filesystem", "cannot tell: \(error)", fix: "run doctor as the container's owner")
    }
    guard let reason = kind.unsupportedReason else {
      return Doctor.Check(.ok, "filesystem", "\(kind.name): flock and inotify work")
    }
    let optedIn = Environment.value("GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM") == "1"
    return Doctor.Check(
      optedIn ? .warn : .fail, "filesystem",
      "\(kind.name) (\(reason))" + (optedIn ? "; allowed by GROUPCONTAINER_ALLOW_UNSUPPORTED_FILESYSTEM=1" : ""),
      fix: "move the container root to a local disk (ext4, xfs, btrfs, tmpfs) with --root or GROUP_CONTAINER_ROOT")
  }

  // MARK: inotify

  /// This user's inotify instances and watches, counted from /proc: each `/proc/<pid>/fd/<n>` of this user's
  /// processes that links to `anon_inode:inotify` is an instance, and each `inotify wd:` line of its
  /// `/proc/<pid>/fdinfo/<n>` a watch. Best effort: processes that end meanwhile or cannot be read are skipped.
  struct Usage {
    var instances = 0
    var watches = 0
  }

  static func inotifyUsage(of pid: Int32) -> Usage {
    var usage = Usage()
    let fdDirectory = "/proc/\(pid)/fd"
    for fd in (try? FileSystem.listDirectory(fdDirectory)) ?? [] {
      guard (try? FileSystem.readLink(fdDirectory + "/" + fd)) == "anon_inode:inotify" else { continue }
      usage.instances += 1
      let info = (try? FileSystem.readFile("/proc/\(pid)/fdinfo/\(fd)", limit: 16 << 20)) ?? []
      usage.watches +=
        String(decoding: info, as: UTF8.self).split(separator: "\n").filter {
          $0.hasPrefix("inotify wd:")
        }.count
    }
    return usage
  }

  static func limit(_ name: String) -> Int? {
    guard let bytes = try? FileSystem.readFile("/proc/sys/fs/inotify/" + name, limit: 64) else { return nil }
    return Int(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
  }

  /// Live processes registered in the container (`processes/<pid>.<start>.lock` whose pid still has that start
  /// time).
  func liveProcesses() -> [Int32] {
    ((try? FileSystem.listDirectory(path + "/" + CoordinationPaths.processes)) ?? []).compactMap { name in
      guard name.hasSuffix(".lock") else { return nil }
      return Self.liveWriter(name.dropLast(5))
    }
  }

  /// The pid of `<pid>.<start time>` when that process still runs.
  static func liveWriter(_ writer: Substring) -> Int32? {
    let parts = writer.split(separator: ".")
    guard parts.count == 2, let pid = Int32(parts[0]), let start = UInt64(parts[1]),
      let status = CurrentProcess.status(of: pid), status.running, status.startTime == start
    else { return nil }
    return pid
  }

  func inotify() -> Doctor.Check {
    guard let instances = Self.limit("max_user_instances"), let watches = Self.limit("max_user_watches"),
      let queue = Self.limit("max_queued_events")
    else {
      return Doctor.Check(
        .warn, "inotify", "cannot read /proc/sys/fs/inotify (no inotify in this kernel?)",
        fix: "presenters need inotify: use a kernel with CONFIG_INOTIFY_USER")
    }
    var mine = Usage()
    let me = CurrentProcess.userID
    for entry in (try? FileSystem.listDirectory("/proc")) ?? [] {
      guard let pid = Int32(entry), (try? FileSystem.status("/proc/\(entry)"))?.owner == me else { continue }
      let usage = Self.inotifyUsage(of: pid)
      mine.instances += usage.instances
      mine.watches += usage.watches
    }
    let members = liveProcesses()
    var group = Usage()
    for pid in members {
      let usage = Self.inotifyUsage(of: pid)
      group.instances += usage.instances
      group.watches += usage.watches
    }
    let finding =
      "this user: \(mine.instances) of \(instances) instances, \(mine.watches) of \(watches) watches; the group's "
      + "\(members.count) live processes: \(group.instances) instances, \(group.watches) watches; queue "
      + "\(queue) events"
    var problems: [String] = []
    var fixes: [String] = []
    // Each process of the group needs one instance; a few spare let the next app and widget start.
    if instances - mine.instances < 8 || mine.instances * 10 >= instances * 9 {
      problems.append("few inotify instances left (a new process gets no presenters)")
      fixes.append("sysctl fs.inotify.max_user_instances=\(max(512, instances * 2))")
    }
    if mine.watches * 10 >= watches * 9 {
      problems.append("few inotify watches left")
      fixes.append("sysctl fs.inotify.max_user_watches=\(max(524_288, watches * 2))")
    }
    if queue < 16384 {
      problems.append("a queue under 16384 events overflows sooner (every presenter then rescans)")
      fixes.append("sysctl fs.inotify.max_queued_events=16384")
    }
    guard problems.isEmpty else {
      return Doctor.Check(
        .warn, "inotify", finding + ": " + problems.joined(separator: "; "),
        fix: fixes.joined(separator: " and ") + " (persist it in /etc/sysctl.d/)")
    }
    return Doctor.Check(.ok, "inotify", finding)
  }

  // MARK: permissions

  func permissions() -> Doctor.Check {
    guard let top = try? FileSystem.status(path) else {
      return Doctor.Check(.fail, "permissions", "cannot examine '\(path)'", fix: "run doctor as the container's owner")
    }
    // The sharing mode is the container's own: group containers are setgid 2770, user containers 0700.
    let group = top.mode & 0o2000 != 0
    let expected: mode_t = group ? 0o2770 : 0o700
    var directories =
      [""] + [
        "Library", "Library/Preferences", "Library/Caches", "Downloads", "Documents", CoordinationPaths.directory,
      ]
    for name in ((try? FileSystem.listDirectory(coordination)) ?? []).sorted() {
      if (try? FileSystem.status(coordination + "/" + name))?.kind == .directory {
        directories.append(CoordinationPaths.directory + "/" + name)
      }
    }
    var wrong: [String] = []
    var fixes: [String] = []
    for relative in directories {
      let full = relative.isEmpty ? path : path + "/" + relative
      guard let status = try? FileSystem.status(full) else { continue }
      let shown = relative.isEmpty ? "the container" : "'\(relative)'"
      if status.kind != .directory {
        wrong.append("\(shown) is not a directory")
        fixes.append("remove '\(full)' (it is made again when the container opens)")
        continue
      }
      if !group && status.owner != CurrentProcess.userID {
        wrong.append("\(shown) belongs to uid \(status.owner), not you (uid \(CurrentProcess.userID))")
        fixes.append("chown \(CurrentProcess.userID) '\(full)'")
      }
      if status.mode != expected {
        wrong.append("\(shown) has mode \(String(status.mode, radix: 8)), not \(String(expected, radix: 8))")
        fixes.append("chmod \(String(expected, radix: 8)) '\(full)'")
      }
    }
    let mode = group ? "group-shared (2770)" : "this user only (0700)"
    guard wrong.isEmpty else {
      return Doctor.Check(
        .fail, "permissions", "\(mode): " + wrong.joined(separator: "; "), fix: fixes.joined(separator: "; "))
    }
    return Doctor.Check(.ok, "permissions", "\(mode): \(directories.count) directories as the mode requires")
  }

  // MARK: registrations

  /// The fields of a scheme registration doctor needs.
  struct Registration: Decodable {
    var scheme: String
    var executable: String
  }

  func registrations() -> Doctor.Check {
    let directory = path + "/" + CoordinationPaths.schemes
    let names = ((try? FileSystem.listDirectory(directory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    var stale: [String] = []
    var fixes: [String] = []
    for name in names {
      let file = directory + "/" + name
      guard let bytes = try? FileSystem.readFile(file, limit: 64 * 1024),
        let record = try? UntrustedJSON.decode(Registration.self, from: bytes)
      else {
        stale.append("'\(name):' has an unreadable registration")
        fixes.append("rm '\(file)'")
        continue
      }
      if let problem = ProcessSpawn.executableProblem(record.executable) {
        stale.append("'\(record.scheme):' launches '\(record.executable)', but \(problem)")
        fixes.append(
          "register '\(record.scheme)' again with the program's current path (registerURLScheme), or rm '\(file)'")
      }
    }
    guard stale.isEmpty else {
      return Doctor.Check(.fail, "registrations", stale.joined(separator: "; "), fix: fixes.joined(separator: "; "))
    }
    return Doctor.Check(.ok, "registrations", "\(names.count) URL scheme registrations, every program there")
  }

  // MARK: temp files

  /// One entry of the container as the walk saw it (`lstat`: a link is looked at, never followed).
  struct Entry {
    /// The path relative to the container.
    var relative: String
    var name: String
    var status: FileStatus
  }

  /// Every entry of the container, depth first, up to `Doctor.walkBudget` entries.
  struct Walk {
    var entries: [Entry] = []
    var complete = true
    var scope: String { complete ? "" : " (looked at the first \(Doctor.walkBudget) entries)" }
  }

  func walk() -> Walk {
    var walk = Walk()
    var pending = [""]
    while let relative = pending.popLast() {
      let full = relative.isEmpty ? path : path + "/" + relative
      for name in (try? FileSystem.listDirectory(full)) ?? [] {
        guard walk.entries.count < Doctor.walkBudget else {
          walk.complete = false
          return walk
        }
        let child = relative.isEmpty ? name : relative + "/" + name
        guard let status = try? FileSystem.status(full + "/" + name) else { continue }
        walk.entries.append(Entry(relative: child, name: name, status: status))
        if status.kind == .directory { pending.append(child) }
      }
    }
    return walk
  }

  func temporaries(_ walk: Walk) -> Doctor.Check {
    var left: [String] = []
    for entry in walk.entries where entry.status.kind != .directory {
      if let writer = AtomicReplace.writer(ofTemporary: entry.name), Self.liveWriter(writer) == nil {
        left.append(entry.relative)
      }
    }
    let scope = walk.scope
    guard left.isEmpty else {
      let shown = left.sorted().prefix(5).joined(separator: ", ") + (left.count > 5 ? ", …" : "")
      return Doctor.Check(
        .warn, "temp files", "\(left.count) left by dead processes\(scope): \(shown)",
        fix: "open the container once (e.g. groupctl status <group-id>), which removes them, or delete them")
    }
    return Doctor.Check(.ok, "temp files", "none left by dead processes\(scope)")
  }

  // MARK: outside edits kept aside

  /// Edits of a suite's plist by another tool that SharedDefaults kept aside instead of applying
  /// (`<suite>.plist.unapplied-…`: they held values the plist showed before, so applying them could have undone
  /// newer writes).
  func unappliedEdits() -> Doctor.Check {
    let preferences = path + "/Library/Preferences"
    let kept = ((try? FileSystem.listDirectory(preferences)) ?? []).filter { $0.contains(".plist.unapplied-") }.sorted()
    guard kept.isEmpty else {
      let shown = kept.prefix(5).joined(separator: ", ") + (kept.count > 5 ? ", …" : "")
      return Doctor.Check(
        .warn, "outside edits", "\(kept.count) edit(s) of a suite's plist kept aside, not applied: \(shown)",
        fix: "compare each with the current plist (groupctl defaults read), re-apply what is wanted, then delete it")
    }
    return Doctor.Check(.ok, "outside edits", "no edit of a suite's plist kept aside")
  }

  // MARK: disk space

  func diskSpace() -> Doctor.Check {
    let space: FileSystemSpace
    do { space = try FileSystem.space(of: path) } catch {
      return Doctor.Check(.warn, "disk space", "cannot tell: \(error)", fix: "run doctor as the container's owner")
    }
    func mebibytes(_ bytes: UInt64) -> String { "\(bytes >> 20) MiB" }
    let finding =
      "\(mebibytes(space.availableBytes)) free of \(mebibytes(space.totalBytes)), \(space.availableInodes) inodes free"
    if space.availableBytes < Doctor.minimumFreeBytes
      || (space.availableInodes < Doctor.minimumFreeInodes && space.availableInodes > 0)
    {
      return Doctor.Check(
        .warn, "disk space",
        finding + ": writes, downloads and defaults fail with ENOSPC when it runs out",
        fix: "free space on the file system of '\(path)' (at least \(Doctor.minimumFreeBytes >> 20) MiB)")
    }
    return Doctor.Check(.ok, "disk space", finding)
  }
}

// MARK: - Every file of the container (issue #33 item 7)

extension Inspector {
  typealias Problem = Doctor.Check.Problem

  /// `rm` of an entry, quoted for a shell.
  func remove(_ entry: Entry) -> String { "rm '\(path)/\(entry.relative)'" }

  static let coordinationPrefix = CoordinationPaths.directory + "/"

  /// Where only regular files (and directories) belong — everywhere, but for the inbox sockets the framework
  /// makes — nothing else: a FIFO blocks whoever opens it for reading, a device or socket is nobody's data, and a
  /// link in `.coordination/` is never the framework's. Links elsewhere are the user's business.
  func fileTypes(_ walk: Walk) -> Doctor.Check {
    var problems: [Problem] = []
    for entry in walk.entries where entry.status.kind != .regular && entry.status.kind != .directory {
      let private_ = entry.relative.hasPrefix(Self.coordinationPrefix)
      let parts = entry.relative.split(separator: "/")
      if entry.status.isSocket && parts.count == 4 && parts[1] == CoordinationPaths.Name.inbox
        && entry.name == ".socket"
      {
        continue
      }
      if entry.status.kind == .symlink && !private_ { continue }
      problems.append(
        Problem(
          path: entry.relative,
          problem: "is a \(entry.status.typeName) where only regular files belong", fix: remove(entry)))
    }
    return Doctor.Check(
      .fail, "file types", problems, ok: "only regular files and directories (and inbox sockets)", scope: walk.scope)
  }

  /// Owners: one user's container holds only its owner's files; a group container only files of the group's
  /// members (or root), in its group (anyone else's file there is one no member can fix, or one a stranger controls).
  func owners(_ walk: Walk) -> Doctor.Check {
    guard let top = try? FileSystem.status(path) else {
      return Doctor.Check(.warn, "owners", "cannot examine '\(path)'", fix: "run doctor as the container's owner")
    }
    let group = top.mode & 0o2000 != 0
    var members: [UInt32: Bool] = [:]
    var problems: [Problem] = []
    for entry in walk.entries {
      let st = entry.status
      let full = "'\(path)/\(entry.relative)'"
      if !group {
        if st.owner != top.owner {
          problems.append(
            Problem(
              path: entry.relative, problem: "belongs to uid \(st.owner), not the container's owner (uid \(top.owner))",
              fix: "chown \(top.owner) \(full)"))
        }
        continue
      }
      // Root is no stranger (it could change anything anyway; the library trusts it as an owner too).
      let member = members[st.owner] ?? (st.owner == 0 || GroupMembership.contains(uid: st.owner, gid: top.group))
      members[st.owner] = member
      if !member {
        problems.append(
          Problem(
            path: entry.relative, problem: "belongs to uid \(st.owner), who is not a member of group \(top.group)",
            fix: "chown \(top.owner) \(full)"))
      } else if st.group != top.group {
        problems.append(
          Problem(
            path: entry.relative, problem: "has group \(st.group), not the container's group \(top.group)",
            fix: "chgrp \(top.group) \(full)"))
      }
    }
    let ok = group ? "every file belongs to a member of group \(top.group), in that group" : "every file is the owner's"
    return Doctor.Check(.fail, "owners", problems, ok: ok, scope: walk.scope)
  }

  /// Files whose content decides what runs (URL scheme registrations, download sessions' relaunch records) keep
  /// the owner-only-writable rule (OwnerOnlyWritable): readers refuse them otherwise, so an app would not open.
  func trustedFiles(_ walk: Walk) -> Doctor.Check {
    var problems: [Problem] = []
    var count = 0
    for entry in walk.entries where entry.status.kind != .directory {
      let parts = entry.relative.split(separator: "/")
      let scheme =
        parts.count == 3 && parts[0] == CoordinationPaths.directory && parts[1] == CoordinationPaths.Name.schemes
        && !entry.name.hasPrefix(".")
      let relaunch =
        parts.count == 5 && parts[0] == CoordinationPaths.directory && parts[1] == CoordinationPaths.Name.downloads
        && parts[2] == "sessions"
        && entry.name == "app"
      guard scheme || relaunch else { continue }
      count += 1
      guard let problem = OwnerOnlyWritable.problem(entry.status, reader: CurrentProcess.userID) else { continue }
      let fix =
        entry.status.mode & 0o022 != 0 && entry.status.linkCount == 1 && entry.status.kind == .regular
        ? "chmod go-w '\(path)/\(entry.relative)'"
        : remove(entry) + (scheme ? " (then register the scheme again)" : " (then attach the session again)")
      problems.append(Problem(path: entry.relative, problem: problem, fix: fix))
    }
    return Doctor.Check(
      .fail, "trusted files", problems, ok: "\(count) files that decide what runs, writable by their owner only",
      scope: walk.scope)
  }

  /// The most a file of `.coordination/` may hold, by directory; nil: no limit (the bytes of a download in flight,
  /// temp files of atomic replaces of the user's files, the agent's log).
  static func sizeLimit(_ parts: [Substring]) -> Int64? {
    guard parts.count >= 2 else { return 16 << 20 }
    switch String(parts[1]) {
    case CoordinationPaths.Name.locks, CoordinationPaths.Name.processes: return 4096
    case CoordinationPaths.Name.presenters: return Int64(PresenterRecordCheck.maximumBytes)
    case CoordinationPaths.Name.presenterIndex: return Int64(PresenterRecordCheck.maximumIndexBytes)
    case CoordinationPaths.Name.staging: return nil
    case CoordinationPaths.Name.downloads where parts.last?.hasSuffix(".partial") == true || parts.last == "agent.log":
      return nil
    default: return 16 << 20
    }
  }

  /// Oversize files in `.coordination/` (every process reads or maps them) and sparse ones (a file that claims more
  /// than it holds: a 10 GB hole in a lock file is someone's doing, and reading it would cost 10 GB).
  func coordinationSizes(_ walk: Walk) -> Doctor.Check {
    var problems: [Problem] = []
    for entry in walk.entries where entry.status.kind == .regular && entry.relative.hasPrefix(Self.coordinationPrefix) {
      let parts = entry.relative.split(separator: "/")
      let st = entry.status
      let full = "'\(path)/\(entry.relative)'"
      // A lock file's inode must stay (others may hold it locked): empty it rather than remove it.
      let fix = parts.count > 1 && parts[1] == CoordinationPaths.Name.locks ? "truncate -s 0 \(full)" : remove(entry)
      if let limit = Self.sizeLimit(parts), st.size > limit {
        problems.append(
          Problem(path: entry.relative, problem: "holds \(st.size) bytes (at most \(limit) belong there)", fix: fix))
      } else if st.size >= 1 << 20 && st.allocatedBytes < st.size / 2 {
        problems.append(
          Problem(
            path: entry.relative, problem: "is sparse: \(st.size) bytes, \(st.allocatedBytes) allocated", fix: fix))
      }
    }
    return Doctor.Check(
      .fail, "coordination sizes", problems, ok: "no oversize or sparse file in .coordination", scope: walk.scope)
  }

  /// The lock files, and whether they are removed when unused: not while a process of a build from before that
  /// lives (Rule 3b; its liveness lock is empty: Messaging's Liveness.swift).
  func lockFiles() -> Doctor.Check {
    let locks = (try? FileSystem.listDirectory(path + "/" + CoordinationPaths.locks)) ?? []
    let count = locks.filter { LockOrder.isLockFileName($0) }.count
    guard let processes = try? SystemFD.open(path + "/" + CoordinationPaths.processes, [.readOnly, .directory]),
      let older = MessagingSpace.olderBuildProcesses(in: processes)
    else {
      return Doctor.Check(
        .warn, "lock files", "\(count) lock files; cannot tell which builds the live processes run",
        fix: "run doctor as the container's owner")
    }
    guard older.isEmpty else {
      let names = older.map { "\($0)" }.joined(separator: ", ")
      return Doctor.Check(
        .warn, "lock files",
        "\(count) lock files, none removed while process(es) \(names) of an older build live (their liveness "
          + "locks are empty; such a build would not notice a removed lock file)",
        fix: "restart process(es) \(names) on a build that removes lock files (it marks its liveness lock)")
    }
    return Doctor.Check(.ok, "lock files", "\(count) lock files; unused ones are removed")
  }

  /// Presenter records that are not records: each is a presenter no coordinator can ask (its item is unknown).
  /// A live owner writes its own records again when it notices; what stays is junk or a dead process's.
  func presenterRecords(_ walk: Walk) -> Doctor.Check {
    var problems: [Problem] = []
    var count = 0
    let prefix = PresenterRecordCheck.directory + "/"
    // Every file beneath `presenters/` is a record (a bucket's, a `below` copy, a process's copy: PresenterRegistry).
    for entry in walk.entries
    where entry.relative.hasPrefix(prefix) && !entry.name.hasPrefix(".") && entry.status.kind != .directory {
      count += 1
      let problem: String?
      if entry.status.kind != .regular {
        problem = "is a \(entry.status.typeName), not a record"
      } else {
        do {
          let bytes = try FileSystem.readFile(path + "/" + entry.relative, limit: PresenterRecordCheck.maximumBytes)
          problem = PresenterRecordCheck.problem(bytes, fileName: entry.name)
        } catch {
          problem = "cannot be read: \(error)"
        }
      }
      guard let problem else { continue }
      let owner = entry.name.split(separator: ".").prefix(2).joined(separator: ".")
      let alive =
        Self.liveWriter(Substring(owner)).map { " (its process \($0) is alive: it writes its own records again)" } ?? ""
      problems.append(
        Problem(path: entry.relative, problem: "is a damaged presenter record: \(problem)\(alive)", fix: remove(entry)))
    }
    return Doctor.Check(
      .fail, "presenter records", problems, ok: "\(count) presenter records, all valid", scope: walk.scope)
  }
}
