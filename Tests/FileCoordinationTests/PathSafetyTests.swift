import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// Paths are resolved from the container's directory descriptor, never checked and then used by path.
///
/// Mutants this suite catches:
/// - `GroupContainer.write` checking with `resolveBeneath` and then writing by path, as before this suite (temp
///   file and rename by path): 171 and 316 files outside in two runs of 20,000 writes, 62 and 135 of them temp
///   files (`writesNeverLandOutsideWhileSwapped`); with only the parent directory opened by path: 16 files outside.
///   The fixed code: 0 outside, ~1,000–4,800 writes landed and the rest refused as leading outside.
/// - `ContainerDirectory`'s component walk opening the directories on the way without `O_NOFOLLOW` (same test,
///   `walk`).
@Suite(.runSlot(.minutes(10))) struct PathSafetyTests {
  static let group = "group.com.example.paths"
  static let writes = 20_000

  /// A helper process swaps `Documents/sub` (a directory) with `Documents/link` (a symlink to a directory outside
  /// the container) in a tight loop while this process writes into `Documents/sub`. Nothing may appear outside:
  /// every write lands inside or fails saying the path leads outside.
  @Test(.runSlot(.minutes(3)), arguments: ["openat2", "walk"])
  func writesNeverLandOutsideWhileSwapped(resolution: String) async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let outside = root.path + "/outside"
    // Writes go to `sub/f…` and `sub/d/f…`: the swapped name is the last directory on the way and one before it.
    try FileManager.default.createDirectory(atPath: outside + "/d", withIntermediateDirectories: true)
    try FileManager.default.createDirectory(
      atPath: container.path + "/Documents/sub/d", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: container.path + "/Documents/link", withDestinationPath: outside)
    let swapper = try Child(.swap(a: "Documents/sub", b: "Documents/link"), root: root.path, group: Self.group)
    defer { swapper.kill() }
    await swapper.line { $0 == "swapping" }
    let directory = try container.directory()
    let bytes = Array("payload".utf8)
    var landed = 0
    var refused: [String: Int] = [:]
    // At least `writes`, and on until one landed (a busy machine may keep the swapper off its core with the link in
    // place for the whole run; the bound is for a hang).
    let deadline = ContinuousClock.now + .seconds(Wait.condition)
    var i = 0
    while i < Self.writes || (landed == 0 && ContinuousClock.now < deadline) {
      defer { i += 1 }
      let name = (i % 2 == 0 ? "" : "d/") + "f\(i % 16)"
      do {
        if resolution == "walk" {
          try directory.replaceFile(
            "Documents/sub/" + name, with: bytes, mode: 0o600, resolution: .componentWalk)
        } else {
          try container.write(Data(bytes), to: container.documentsURL.appendingPathComponent("sub/" + name))
        }
        landed += 1
      } catch let error as GroupContainerError {
        if error.code == .pathEscapesContainer {
          refused["escapes", default: 0] += 1
        } else {
          refused["\(error)", default: 0] += 1
        }
      } catch let error as FileSystemError {
        refused[
          error.errno == .tooManySymbolicLinkLevels || error.errno == .notDirectory ? "link" : "\(error)", default: 0] +=
          1
      }
    }
    swapper.kill()
    let escaped = try FileManager.default.subpathsOfDirectory(atPath: outside).filter { $0 != "d" }
    #expect(
      escaped.isEmpty,
      "\(escaped.count) files outside (\(escaped.filter { $0.hasPrefix(AtomicReplace.temporaryPrefix) }.count) temp): \(escaped.prefix(4))"
    )
    let clear: Set<String> = resolution == "walk" ? ["link"] : ["escapes"]
    #expect(Set(refused.keys).isSubset(of: clear), "unclear failures: \(refused)")
    #expect(landed > 0 && landed + refused.values.reduce(0, +) == i)
    // What landed is inside, in the real directory (under whichever name it has now), and no temp file is left.
    let real =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: container.path + "/Documents/sub")) == nil
      ? "sub" : "link"
    let inside = try FileManager.default.contentsOfDirectory(atPath: container.path + "/Documents/" + real)
    #expect(!inside.isEmpty && inside.allSatisfy { $0.hasPrefix("f") || $0 == "d" }, "\(inside)")
    print("swap race (\(resolution)): \(landed) landed, refused \(refused)")
  }

  /// Coordinated writes, whose accessor's `container.write` skips its own look at the item (CheckedWrite.swift),
  /// under two races: a directory on the way swapped with a link out (`directory`), and the item itself replaced by
  /// a link to a file outside, then by a plain file, again and again (`item`). Nothing outside changes or appears;
  /// every write lands inside or is refused as leading out.
  ///
  /// Mutants this test catches: a vouched write opening the parent by path, following links (`directory`: the
  /// outside file written); a vouched write truncating and writing the item in place (`item`: the same).
  @Test(.runSlot(.minutes(3)), arguments: ["directory", "item"])
  func coordinatedWritesNeverLandOutsideWhileSwapped(race: String) async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let outside = root.path + "/outside"
    let target = outside + "/target"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try Data("untouched".utf8).write(to: URL(fileURLWithPath: target))
    try FileManager.default.createDirectory(
      atPath: container.path + "/Documents/sub", withIntermediateDirectories: true)
    let attacker: Child
    let item: URL
    if race == "directory" {
      try FileManager.default.createSymbolicLink(
        atPath: container.path + "/Documents/link", withDestinationPath: outside)
      attacker = try Child(.swap(a: "Documents/sub", b: "Documents/link"), root: root.path, group: Self.group)
      await attacker.line { $0 == "swapping" }
      item = container.documentsURL.appendingPathComponent("sub/target")
    } else {
      attacker = try Child(.relink(item: "Documents/sub/target", target: target), root: root.path, group: Self.group)
      await attacker.line { $0 == "relinking" }
      item = container.documentsURL.appendingPathComponent("sub/target")
    }
    defer { attacker.kill() }
    let coordinator = FileCoordinator()
    var landed = 0
    var refused = 0
    var unclear: [String] = []
    // At least `writes / 2` writes, and on until both outcomes were seen: on a busy machine the attacker may be off
    // its core for a whole second, and every write then meets the same state (the bound is for a hang).
    let deadline = ContinuousClock.now + .seconds(Wait.condition)
    var i = 0
    while i < Self.writes / 2 || ((landed == 0 || refused == 0) && ContinuousClock.now < deadline) {
      defer { i += 1 }
      do {
        try coordinator.coordinate(writingItemAt: item) { try container.write(Data("payload \(i)".utf8), to: $0) }
        landed += 1
      } catch let error as FileCoordinatorError where error.containerError?.code == .pathEscapesContainer {
        refused += 1
      } catch let error as GroupContainerError where error.code == .pathEscapesContainer {
        refused += 1
      } catch {
        unclear.append("\(error)")
      }
    }
    attacker.kill()
    #expect(try String(contentsOfFile: target, encoding: .utf8) == "untouched")
    let escaped = try FileManager.default.contentsOfDirectory(atPath: outside).filter { $0 != "target" }
    #expect(escaped.isEmpty, "\(escaped.count) files outside: \(escaped.prefix(4))")
    #expect(unclear.isEmpty, "unclear failures: \(unclear.prefix(3))")
    #expect(landed > 0 && refused > 0, "\(landed) landed, \(refused) refused")
    print("coordinated \(race) race: \(landed) landed, \(refused) refused as leading out")
  }

  /// A coordinated write vouches for its item (CheckedWrite.swift) only to its accessor's thread, only while the
  /// accessor runs and only for that item; an access nested inside puts the outer mark back. Seen through a link to
  /// outside planted at the item after the coordinator's check: a vouched write replaces the link (never writing
  /// through it), an unvouched one refuses it as leading out.
  ///
  /// Mutants this test catches: the mark left set after the accessor (no `defer`), put back as "none" instead of
  /// the outer mark, or compared without the item.
  @Test(.runSlot(.minutes(3))) func aCoordinatedWriteVouchesOnlyForItsItemOnItsThreadWhileItRuns() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let outside = root.path + "/outside"
    try Data("untouched".utf8).write(to: URL(fileURLWithPath: outside))
    let a = container.documentsURL.appendingPathComponent("a")
    let b = container.documentsURL.appendingPathComponent("b")
    let c = container.documentsURL.appendingPathComponent("c")
    for url in [a, b, c] { try container.write(Data("file".utf8), to: url) }
    @Sendable func plantLink(_ url: URL) throws {
      try FileManager.default.removeItem(at: url)
      try FileManager.default.createSymbolicLink(atPath: url.path, withDestinationPath: outside)
    }
    /// "replaced", "refused", or the unexpected error.
    @Sendable func write(_ url: URL) -> String {
      do {
        try container.write(Data("written".utf8), to: url)
        return (try? FileManager.default.destinationOfSymbolicLink(atPath: url.path)) == nil ? "replaced" : "link kept"
      } catch let error where error.code == .pathEscapesContainer {
        return "refused"
      } catch {
        return "\(error)"
      }
    }
    try FileCoordinator().coordinate(writingItemAt: a) { _ in
      try plantLink(a)
      let elsewhere = Mutex("")
      let thread = Thread { elsewhere.withLock { $0 = write(a) } }
      thread.start()
      while elsewhere.withLock({ $0.isEmpty }) { usleep(1000) }
      #expect(elsewhere.withLock { $0 } == "refused", "another thread")
      try plantLink(b)
      #expect(write(b) == "refused", "another item")
      try FileCoordinator().coordinate(writingItemAt: c) { _ in }
      #expect(write(a) == "replaced", "the item, after an access nested in its accessor")
    }
    try plantLink(a)
    #expect(write(a) == "refused", "after the accessor")
    try FileCoordinator().coordinate(writingItemAt: c) { _ in }
    try plantLink(c)
    #expect(write(c) == "refused", "after an accessor with nothing nested")
    #expect(try String(contentsOfFile: outside, encoding: .utf8) == "untouched")
  }

  /// The documented choice: with openat2, relative symlinks on the way that stay inside are followed; absolute
  /// ones (even to inside) and any that lead out are refused; the item itself is never followed. The component
  /// walk (kernels without openat2) refuses every symlink on the way.
  @Test func linksInsideTheContainer() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let documents = container.path + "/Documents"
    try FileManager.default.createSymbolicLink(atPath: documents + "/relative", withDestinationPath: "../Library")
    try FileManager.default.createSymbolicLink(
      atPath: documents + "/absolute", withDestinationPath: container.path + "/Library")
    let directory = try container.directory()
    let bytes = Array("x".utf8)
    try directory.replaceFile("Documents/relative/a.txt", with: bytes, mode: 0o600)
    #expect(FileManager.default.fileExists(atPath: container.path + "/Library/a.txt"))
    #expect(throws: FileSystemError.self) {
      try directory.replaceFile("Documents/absolute/b.txt", with: bytes, mode: 0o600)
    }
    #expect(throws: FileSystemError.self) {
      try directory.replaceFile("Documents/relative/c.txt", with: bytes, mode: 0o600, resolution: .componentWalk)
    }
    #expect(!FileManager.default.fileExists(atPath: container.path + "/Library/b.txt"))
    #expect(!FileManager.default.fileExists(atPath: container.path + "/Library/c.txt"))
    // The item itself: a read of a symlink is refused, a write replaces the link (the target is untouched).
    try FileManager.default.createSymbolicLink(atPath: documents + "/item", withDestinationPath: "../Library/a.txt")
    #expect(throws: GroupContainerError.self) {
      try container.contents(of: container.documentsURL.appendingPathComponent("item"))
    }
    try container.write(Data("new".utf8), to: container.documentsURL.appendingPathComponent("item"))
    #expect(try String(contentsOfFile: container.path + "/Library/a.txt", encoding: .utf8) == "x")
    #expect(try String(contentsOfFile: documents + "/item", encoding: .utf8) == "new")
  }

  /// openat2 fails with EAGAIN when a rename anywhere on the system races a `..` of the lookup; the shim retries
  /// it. Here a thread renames without pause while writes go through `Documents/relative` (`../Library`): every
  /// one lands (this test failed a CI run once, under load, with "Resource temporarily unavailable").
  /// Mutant: the shim's `openat2_retrying` without its retry loop: EAGAIN errors here.
  @Test func aRenameElsewhereNeverFailsALookupThroughDotDot() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/relative", withDestinationPath: "../Library")
    let directory = try container.directory()
    let scratch = root.path + "/scratch"
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    #expect(FileManager.default.createFile(atPath: scratch + "/a", contents: nil))
    let stop = Atomic<Bool>(false)
    let renamer = Thread {
      while !stop.load(ordering: .relaxed) {
        rename(scratch + "/a", scratch + "/b")
        rename(scratch + "/b", scratch + "/a")
      }
    }
    renamer.start()
    defer { stop.store(true, ordering: .relaxed) }
    var failed = 0
    var first = ""
    for i in 0..<20_000 {
      do { try directory.replaceFile("Documents/relative/r.txt", with: [UInt8(i & 0xFF)], mode: 0o600) } catch {
        if failed == 0 { first = "\(error)" }
        failed += 1
      }
    }
    #expect(failed == 0, "\(failed) of 20,000 writes failed, the first with: \(first)")
  }
}

/// Names are bytes: the NFC and NFD spellings of `café` are two files, two locks, two items.
///
/// Mutants this suite catches:
/// - `ContainerPath` equality and hashing by `String` (canonical equivalence): after writing the NFC spelling, the
///   NFD write reuses its lock file and runs while another process holds the NFD item
///   (`canonicallyEquivalentNamesAreDifferentItems`), and the unit test sees them equal.
@Suite(.runSlot(.minutes(10))) struct NameBytesTests {
  static let nfd = "Documents/cafe\u{301}"
  static let nfc = "Documents/caf\u{E9}"

  @Test func containerPathsCompareBytes() throws {
    let a = try ContainerPath(Self.nfd), b = try ContainerPath(Self.nfc)
    #expect(a != b)
    #expect(Set([a, b]).count == 2)
    #expect((a < b) != (b < a))
    #expect(!(try ContainerPath(Self.nfd + "/x")).isDescendant(of: b))
    #expect(LockOrder.Key(path: a, kind: .item).fileName != LockOrder.Key(path: b, kind: .item).fileName)
  }

  @Test(.runSlot(.minutes(3))) func canonicallyEquivalentNamesAreDifferentItems() async throws {
    let root = try TestRoot()
    let container = try root.container(PathSafetyTests.group)
    let holder = try Child(.hold(mode: .write, item: Self.nfd), root: root.path, group: PathSafetyTests.group)
    defer { holder.kill() }
    await holder.line { $0 == "locked" }
    let nfc = container.url.appendingPathComponent(Self.nfc)
    let nfd = container.url.appendingPathComponent(Self.nfd)
    // Not excluded by the other spelling: this returns while the holder keeps the NFD item.
    try FileCoordinator().coordinate(writingItemAt: nfc) { try container.write(Data("nfc".utf8), to: $0) }
    let entered = Mutex<UInt64?>(nil)
    let done = Mutex(false)
    let writer = Thread {
      try? FileCoordinator().coordinate(writingItemAt: nfd) { url in
        entered.withLock { $0 = monotonicNow() }
        try? container.write(Data("nfd".utf8), to: url)
      }
      done.withLock { $0 = true }
    }
    writer.start()
    try? await Task.sleep(for: .seconds(0.5))
    #expect(entered.withLock { $0 } == nil, "the NFD write ran while another process held the NFD item")
    let killed = monotonicNow()
    holder.kill()
    _ = await eventually { done.withLock { $0 } }
    let at = try #require(entered.withLock { $0 }, "the NFD write never ran after the holder died")
    #expect(at > killed)
    let names = try FileManager.default.contentsOfDirectory(atPath: container.documentsURL.path)
    #expect(Set(names.map { Array($0.utf8) }) == [Array("caf\u{E9}".utf8), Array("cafe\u{301}".utf8)])
  }
}

/// Temp files of the atomic replace: names stay under NAME_MAX, and those of dead writers are swept.
///
/// Mutants this suite catches:
/// - the temp name repeating the target's first 64 Characters instead of 64 bytes: ENAMETOOLONG
///   (`aLongNameOfEmojiWrites`).
/// - no sweep at container open (`tempFilesOfAKilledWriterAreSwept`).
/// - a sweep that ignores liveness: the live writer's temp file goes too (same test).
/// The path rule, read on bytes in one pass (`ContainerPath.check`, which `init` and message decoding use), against
/// a plain statement of it over every string of up to five of `a`, `.`, `/`, NUL and `é`, and a few long ones.
///
/// Mutants this suite catches: `check` without its `.`/`..` test, or checking `.coordination` on every component;
/// `init` dropping the last component. `check` without its empty-component test lives (an equivalent mutant: the
/// `.`/`..` test refuses an empty component too, with a worse message).
@Suite(.runSlot(.minutes(10))) struct PathRuleTests {
  /// The rule as the docs state it, component by component on `String`s.
  static func reference(_ path: String) -> [String]? {
    guard !path.isEmpty, path.utf8.count <= ContainerPath.maxPathBytes, !path.hasPrefix("/") else { return nil }
    var parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
    if parts.count > 1 && parts.last == "" { parts.removeLast() }
    let valid = parts.allSatisfy {
      !$0.isEmpty && $0 != "." && $0 != ".." && !$0.utf8.contains(0)
        && $0.utf8.count <= ContainerPath.maxComponentBytes
    }
    return valid && parts[0] != ".coordination" ? parts : nil
  }

  @Test func theOnePassReadingIsTheRule() {
    var paths = [""]
    for _ in 0..<5 { paths += paths.flatMap { path in ["a", ".", "/", "\0", "é"].map { path + $0 } } }
    paths += [
      ".coordination", ".coordination/x", "a/.coordination", ".coordinationx/y", String(repeating: "x", count: 255),
      String(repeating: "x", count: 256), "a/" + String(repeating: "é", count: 128),
      String(repeating: "a/", count: 2048),
      String(repeating: "a/", count: 2049),
    ]
    #expect(ContainerPath.root.string == "")
    for path in Set(paths) {
      let expected = Self.reference(path)
      let parsed = try? ContainerPath(path)
      #expect(parsed?.components == expected, "\(path.debugDescription)")
      #expect(parsed?.string == expected?.joined(separator: "/"), "\(path.debugDescription)")  // joined by hand
      #expect(((try? ContainerPath.check(path)) != nil) == (expected != nil), "\(path.debugDescription)")
    }
  }
}

@Suite(.runSlot(.minutes(10))) struct TemporaryFileTests {
  /// Temp names are built by hand in one string: the same name as the interpolation they replace, the writer
  /// readable back by the sweeper, never over NAME_MAX.
  @Test func temporaryNamesAreBuiltAsBefore() {
    let names = ["a.txt", "", String(repeating: "x", count: 255), String(repeating: "é", count: 100) + "z"]
    for number: UInt64 in [0, 1, 0xf, 0x10, 0xabc, 0x9E37_79B9_7F4A_7C15, .max] {
      for name in names {
        let temp = AtomicReplace.temporaryName(for: name, number: number)
        let kept = AtomicReplace.prefix(of: name, bytes: 64)
        #expect(temp == "\(AtomicReplace.temporaryPrefix)\(AtomicReplace.writer)-\(String(number, radix: 16))-\(kept)")
        #expect(AtomicReplace.writer(ofTemporary: temp) == Substring(AtomicReplace.writer))
        #expect(temp.utf8.count <= 255)
      }
    }
  }

  @Test func aLongNameOfEmojiWrites() throws {
    let root = try TestRoot()
    let container = try root.container(PathSafetyTests.group)
    let name = String(repeating: "😀", count: 63) + "abc"
    #expect(name.utf8.count == 255)
    let url = container.documentsURL.appendingPathComponent(name)
    try container.write(Data("long".utf8), to: url)
    #expect(try container.contents(of: url) == Data("long".utf8))
    try container.write(Data("durable".utf8), to: url, durable: true)
    #expect(try container.contents(of: url) == Data("durable".utf8))
  }

  @Test(.runSlot(.minutes(3))) func tempFilesOfAKilledWriterAreSwept() async throws {
    let root = try TestRoot()
    let container = try root.container(PathSafetyTests.group)
    let group = PathSafetyTests.group
    try FileManager.default.createDirectory(
      atPath: container.path + "/Documents/deep/er", withIntermediateDirectories: true)
    let killed = try Child(.pauseWrite(item: "Documents/deep/er/k.txt"), root: root.path, group: group)
    let alive = try Child(.pauseWrite(item: "Documents/l.txt"), root: root.path, group: group)
    defer { alive.kill() }
    let killedTemp = try #require(await killed.line { $0.hasPrefix("created ") }).dropFirst(8)
    let aliveTemp = try #require(await alive.line { $0.hasPrefix("created ") }).dropFirst(8)
    let killedPath = container.path + "/Documents/deep/er/" + killedTemp
    let alivePath = container.path + "/Documents/" + aliveTemp
    #expect(FileManager.default.fileExists(atPath: killedPath))
    killed.kill()
    // The next process to open the container sweeps what the dead writer left, and only that.
    let next = try Child(
      .access(mode: .read, item: "Documents/x", count: 1, holdMS: 0, log: root.path + "/log"), root: root.path,
      group: group)
    #expect(await next.exit() == 0)
    #expect(!FileManager.default.fileExists(atPath: killedPath), "the dead writer's temp file was not swept")
    #expect(FileManager.default.fileExists(atPath: alivePath), "a live writer's temp file was swept")
  }
}

/// One container is one coordination space in a process, whatever path it is reached by.
///
/// Mutants this suite catches:
/// - spaces keyed by the container's path instead of its device and inode: two spaces, and presenters registered
///   through each path get colliding ids (`oneContainerUnderTwoPathsIsOneSpace`).
@Suite(.runSlot(.minutes(10))) struct ContainerIdentityTests {
  @Test(.runSlot(.minutes(3))) func oneContainerUnderTwoPathsIsOneSpace() async throws {
    let root = try TestRoot()
    let real = root.path + "/real"
    let alias = root.path + "/alias"
    try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: alias, withDestinationPath: real)
    let group = PathSafetyTests.group
    let viaReal = try GroupContainer(identifier: group, root: URL(fileURLWithPath: real))
    let viaAlias = try GroupContainer(identifier: group, root: URL(fileURLWithPath: alias))
    #expect(try viaReal.coordinationSpace() === viaAlias.coordinationSpace())
    // A presenter through each path: distinct ids, and both hear another process's coordinated write.
    let first = RecordingPresenter(url: viaReal.documentsURL.appendingPathComponent("n.txt"))
    let second = RecordingPresenter(url: viaAlias.documentsURL.appendingPathComponent("n.txt"))
    try FileCoordinator.addFilePresenter(first)
    defer { FileCoordinator.removeFilePresenter(first) }
    try FileCoordinator.addFilePresenter(second)
    defer { FileCoordinator.removeFilePresenter(second) }
    let records = try viaReal.status().presenters
    #expect(records.count == 2 && Set(records.map(\.id)).count == 2, "\(records)")
    let writer = try Child(
      .access(mode: .write, item: "Documents/n.txt", count: 1, holdMS: 0, log: root.path + "/log"), root: real,
      group: group)
    #expect(await writer.exit() == 0)
    #expect(await first.waitFor(["relinquishToWriter coordinated"]), "\(first.events)")
    #expect(await second.waitFor(["relinquishToWriter coordinated"]), "\(second.events)")
  }
}

/// Reaping a dead process removes its leftovers through the container's descriptor and never follows a link.
///
/// Mutants this suite catches:
/// - `ContainerDirectory.removeTree` following a symlink to a directory: the outside file goes
///   (`reapingNeverFollowsLinks`).
@Suite(.runSlot(.minutes(10))) struct ReapTests {
  @Test(.runSlot(.minutes(3))) func reapingNeverFollowsLinks() async throws {
    let root = try TestRoot()
    let container = try root.container(PathSafetyTests.group)
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside + "/d", withIntermediateDirectories: true)
    try Data("keep".utf8).write(to: URL(fileURLWithPath: outside + "/d/keep.txt"))
    let inbox = container.path + "/.coordination/inbox/77777.1"
    try FileManager.default.createDirectory(atPath: inbox + "/sub", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: inbox + "/link", withDestinationPath: outside)
    try FileManager.default.createSymbolicLink(atPath: inbox + "/sub/d", withDestinationPath: outside + "/d")
    let next = try Child(
      .access(mode: .read, item: "Documents/x", count: 1, holdMS: 0, log: root.path + "/log"), root: root.path,
      group: PathSafetyTests.group)
    #expect(await next.exit() == 0)
    #expect(!FileManager.default.fileExists(atPath: inbox), "the dead process's inbox was not reaped")
    #expect(FileManager.default.fileExists(atPath: outside + "/d/keep.txt"))
  }
}
