import Foundation
import Glibc
import SystemLayer
import TestSupport
import Testing

/// Replaces make their temp files in the container's staging directory (`.coordination/staging`) and rename them
/// into place: a process watching the written file's directory (every presenter of a file there) hears one event
/// per replace, not four. Where staging cannot work the replace still happens, next to its target.
///
/// Mutants this suite catches:
/// - `ContainerDirectory.stagingDirectory()` returning nil (temp files next to the target again):
///   `aReplaceIsOneEventForWhoeverWatchesItsDirectory`.
/// - `AtomicReplace.write` without its fallback on `EXDEV`: `aTargetOnAnotherFileSystemIsWrittenNextToIt`.
/// - `AtomicReplace.write` without its fallback when the temp file cannot be made in staging:
///   `aRemovedStagingDirectoryIsNoError`.
/// - the sweep skipping the staging directory: `aDeadWritersStagedTempFileIsSwept`;
/// - the staging directory made like the other private directories, where anything else in its place is an error
///   (here: `fatalError` in place of the warning in `CoordinationSpace.stageReplacements`):
///   `aPlantedStagingDirectoryIsNeverUsed` (both cases: the writing process fails).
@Suite(.runSlot(.minutes(3))) struct StagedReplaceTests {
  static let group = "group.com.example.staged"

  /// The events an inotify watch of `directory` queued, as (mask, name).
  final class DirectoryEvents {
    let fd: Int32
    init(_ directory: String) throws {
      fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
      try #require(fd >= 0, "inotify_init1: errno \(errno)")
      let mask = Watcher.create | Watcher.closeWrite | Watcher.movedFrom | Watcher.movedTo | Watcher.delete
      try #require(inotify_add_watch(fd, directory, mask) >= 0, "inotify_add_watch: errno \(errno)")
    }
    deinit { close(fd) }

    func drain() -> [(mask: UInt32, name: String)] {
      var events: [(UInt32, String)] = []
      var buffer = [UInt8](repeating: 0, count: 64 * 1024)
      while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return events }
        var at = 0
        while at + 16 <= count {
          let mask = buffer[at + 4..<at + 8].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
          let length = Int(buffer[at + 12..<at + 16].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
          let name = String(decoding: buffer[at + 16..<at + 16 + length].prefix { $0 != 0 }, as: UTF8.self)
          events.append((mask, name))
          at += 16 + length
        }
      }
    }
  }

  func temporaries(in directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
      $0.hasPrefix(AtomicReplace.temporaryPrefix)
    }
  }

  /// Three coordinated writes by another process (`groupctl write`): the directory's watch gets exactly three
  /// events, each the file's `IN_MOVED_TO`; nothing of the temp files.
  @Test func aReplaceIsOneEventForWhoeverWatchesItsDirectory() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let documents = container.path + "/Documents"
    let events = try DirectoryEvents(documents)
    var seen: [(mask: UInt32, name: String)] = []
    for text in ["one", "two", "three"] {
      let written = try await runToEnd(
        productsDirectory.appendingPathComponent("groupctl").path,
        ["write", Self.group, "Documents/note.txt", "--root", root.path], input: text)
      #expect(written.status == 0, "\(written.errors)")
      seen += events.drain()  // after each write: inotify merges an event with an identical one still queued
    }
    #expect(seen.count == 3, "\(seen.map { (String($0.mask, radix: 16), $0.name) })")
    #expect(seen.allSatisfy { $0.mask == Watcher.movedTo && $0.name == "note.txt" }, "\(seen)")
    #expect(try String(contentsOfFile: documents + "/note.txt", encoding: .utf8) == "three")
    #expect(temporaries(in: container.path + "/.coordination/staging") == [])
  }

  /// A directory of the container that is another file system (a tmpfs mounted there): a staged temp file cannot
  /// be renamed into it (`EXDEV`), so the replace is made next to the target, and nothing is left behind.
  @Test func aTargetOnAnotherFileSystemIsWrittenNextToIt() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    guard let disk = try SmallDisk.mount(in: root, size: "1m", name: Self.group + "/Documents/disk") else { return }
    defer { withExtendedLifetime(disk) {} }
    let url = container.documentsURL.appendingPathComponent("disk/f.txt")
    try container.write(Data("on the other disk".utf8), to: url)
    #expect(try container.contents(of: url) == Data("on the other disk".utf8))
    #expect(temporaries(in: disk.path) == [])
    #expect(temporaries(in: container.path + "/.coordination/staging") == [])
  }

  /// The staging directory removed while this process holds it open: writes go on (next to their targets).
  @Test func aRemovedStagingDirectoryIsNoError() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let url = container.documentsURL.appendingPathComponent("a.txt")
    try container.write(Data("1".utf8), to: url)  // the staging directory is open from here on
    try FileManager.default.removeItem(atPath: container.path + "/.coordination/staging")
    try container.write(Data("2".utf8), to: url)
    #expect(try container.contents(of: url) == Data("2".utf8))
    #expect(temporaries(in: container.path + "/Documents") == [])
  }

  /// Something else planted where the staging directory goes — a link to a directory outside the container, a
  /// FIFO — before a process opens the container: its writes still succeed, with their temp files next to their
  /// targets, and nothing lands outside.
  @Test(arguments: ["link", "fifo"]) func aPlantedStagingDirectoryIsNeverUsed(plant: String) async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let staging = container.path + "/.coordination/staging"
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try FileManager.default.removeItem(atPath: staging)
    if plant == "link" {
      try FileManager.default.createSymbolicLink(atPath: staging, withDestinationPath: outside)
    } else {
      try #require(mkfifo(staging, 0o600) == 0)
    }
    let written = try await runToEnd(
      productsDirectory.appendingPathComponent("groupctl").path,
      ["write", Self.group, "Documents/planted.txt", "--root", root.path], input: "still written")
    #expect(written.status == 0, "\(written.errors)")
    #expect(try String(contentsOfFile: container.path + "/Documents/planted.txt", encoding: .utf8) == "still written")
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside) == [])
    #expect(temporaries(in: container.path + "/Documents") == [])
  }

  /// A writer killed after making its temp file in the staging directory: reaping it sweeps that file, and a live
  /// writer's stays.
  @Test func aDeadWritersStagedTempFileIsSwept() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let staging = container.path + "/.coordination/staging/"
    let killed = try Child(.pauseWrite(item: "Documents/k.txt", staged: true), root: root.path, group: Self.group)
    let alive = try Child(.pauseWrite(item: "Documents/l.txt", staged: true), root: root.path, group: Self.group)
    defer { alive.kill() }
    let killedTemp = staging + (try #require(await killed.line { $0.hasPrefix("created ") }).dropFirst(8))
    let aliveTemp = staging + (try #require(await alive.line { $0.hasPrefix("created ") }).dropFirst(8))
    #expect(FileManager.default.fileExists(atPath: killedTemp))
    killed.kill()
    _ = await killed.exit()
    _ = try container.status()  // reaps the dead writer; the sweep it queues runs in the background
    let swept = await eventually { !FileManager.default.fileExists(atPath: killedTemp) }
    #expect(swept, "the dead writer's staged temp file was not swept")
    #expect(FileManager.default.fileExists(atPath: aliveTemp), "a live writer's temp file was swept")
  }
}
