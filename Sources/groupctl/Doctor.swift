import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

/// `groupctl doctor`: what on this machine can break the container's guarantees, each finding with its fix.
///
/// It only reads: the container is never created or opened (opening one sweeps the temp files this reports), so
/// everything is looked at through the file system and /proc.
struct Doctor: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Check what could break the container's guarantees on this machine, each with its fix.",
    discussion: """
      One line per check: `ok|warn|fail  <check>: <finding> — fix: <what to do>` (--json: one JSON object). \
      Checks the file system (NFS, CIFS/SMB, FUSE and overlay break flock or inotify), inotify limits against \
      what this user and the group use, directory owners and modes, URL scheme registrations whose program is \
      gone, temp files left by dead processes, outside edits of a suite's plist kept aside, and free space. Exit status 0 when every check is ok, 1 otherwise.
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
      root = try container.root.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? GroupContainer.defaultRoot()
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
      checks = [
        inspector.fileSystem(), inspector.inotify(), inspector.permissions(), inspector.registrations(),
        inspector.temporaries(), inspector.unappliedEdits(), inspector.diskSpace(),
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

    init(_ status: Status, _ check: String, _ finding: String, fix: String? = nil) {
      self.status = status
      self.check = check
      self.finding = finding
      self.fix = status == .ok ? nil : fix
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
  var coordination: String { path + "/.coordination" }

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
      usage.watches += String(decoding: info, as: UTF8.self).split(separator: "\n").filter {
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
    ((try? FileSystem.listDirectory(coordination + "/processes")) ?? []).compactMap { name in
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
    var directories = [""] + ["Library", "Library/Preferences", "Library/Caches", "Downloads", "Documents", ".coordination"]
    for name in ((try? FileSystem.listDirectory(coordination)) ?? []).sorted() {
      if (try? FileSystem.status(coordination + "/" + name))?.kind == .directory { directories.append(".coordination/" + name) }
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
    let directory = coordination + "/schemes"
    let names = ((try? FileSystem.listDirectory(directory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    var stale: [String] = []
    var fixes: [String] = []
    for name in names {
      let file = directory + "/" + name
      guard let bytes = try? FileSystem.readFile(file, limit: 64 * 1024),
        let record = try? JSONDecoder().decode(Registration.self, from: Data(bytes))
      else {
        stale.append("'\(name):' has an unreadable registration")
        fixes.append("rm '\(file)'")
        continue
      }
      if let problem = ProcessSpawn.executableProblem(record.executable) {
        stale.append("'\(record.scheme):' launches '\(record.executable)', but \(problem)")
        fixes.append("register '\(record.scheme)' again with the program's current path (registerURLScheme), or rm '\(file)'")
      }
    }
    guard stale.isEmpty else {
      return Doctor.Check(.fail, "registrations", stale.joined(separator: "; "), fix: fixes.joined(separator: "; "))
    }
    return Doctor.Check(.ok, "registrations", "\(names.count) URL scheme registrations, every program there")
  }

  // MARK: temp files

  func temporaries() -> Doctor.Check {
    var left: [String] = []
    var visited = 0
    var pending = [""]
    while let relative = pending.popLast(), visited < Doctor.walkBudget {
      let full = relative.isEmpty ? path : path + "/" + relative
      for name in (try? FileSystem.listDirectory(full)) ?? [] {
        visited += 1
        let child = relative.isEmpty ? name : relative + "/" + name
        guard let status = try? FileSystem.status(full + "/" + name) else { continue }
        if status.kind == .directory {
          pending.append(child)
        } else if let writer = AtomicReplace.writer(ofTemporary: name), Self.liveWriter(writer) == nil {
          left.append(child)
        }
      }
    }
    let scope = visited >= Doctor.walkBudget ? " (looked at the first \(Doctor.walkBudget) entries)" : ""
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
