import Foundation
import Synchronization
import SystemLayer
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The fast routes of setting up an access (issue #8, "Scale") give exactly what the exact routes give.
///
/// - A file URL's container-relative path by bytes (`ContainerPath.lexical`) instead of `standardizedFileURL`.
/// - One `openat2(RESOLVE_NO_SYMLINKS)` (`ContainerDirectory.hasNoSymbolicLink`) before walking the path for links.
/// - A one-item lock plan built in order instead of merged and sorted.
/// - Lock-table entries updated in place.
///
/// Mutants this suite catches:
/// - `lexical` without the `%` check (`percentEscapesTakeTheExactRoute`, `lexicalAgreesWithTheExactRoute`);
/// - `lexical` without the `.coordination` check, or without the `.`/`..` checks (`lexicalAgreesWithTheExactRoute`);
/// - `isInside` without the `/` after the base (`lexicalAgreesWithTheExactRoute`: `<container>ab/…` is not inside);
/// - `hasNoSymbolicLink` counting `ELOOP` as "no link" (`noLinkCheck`, `resolveBeneathWithRootAgrees`);
/// - `hasNoSymbolicLink` using `RESOLVE_BENEATH` alone, without `RESOLVE_NO_SYMLINKS` (`noLinkCheck`);
/// - `replaceFileIfNoSymbolicLink` without the `fstatat` of the last component
///   (`writeTakesTheFastRouteOnlyWithoutLinks`: `Documents/fileLink` is replaced by the fast route);
/// - the one-item plan with the item lock before the tree lock, or without the root's tree lock
///   (`oneItemPlanIsTheGeneralPlan`);
/// - `LockTable.release` not writing the decremented count back (`lockTableCountsHoldsInPlace`);
/// - `locateAgain` answering without comparing the URL, or `byPath` not forgetting the remembered URL when it changes
///   (`locateRemembersOnlyTheSameURL`);
/// - `ContainerPath.withCString` without the `/` between components (`noLinkCheck` through `resolveBeneath`:
///   `resolveBeneathWithRootAgrees`).
@Suite(.runSlot(.minutes(10))) struct FastPathTests {
  static let group = "group.com.example.fastpath"

  /// Every URL either takes the exact route (nil) or gets the exact route's answer; plain ones take the fast one.
  @Test func lexicalAgreesWithTheExactRoute() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let base = container.path
    let plain = [
      base + "/Documents/a.txt", base + "/Documents/", base + "/Documents", base, base + "/", base + "/a/b/c/d",
      base + "/Library/Preferences/x.plist", base + "/..x/y", base + "/.hidden", base + "/a;b,c=d&e",
    ]
    for path in plain {
      let url = URL(fileURLWithPath: path)
      let fast = try #require(ContainerPath.lexical(url, in: base), "\(path) should take the fast route")
      #expect(fast == (try container.exactRelativePath(of: url)), "\(path)")
      #expect(fast == (try container.relativePath(of: url)), "\(path)")
      let (space, located) = try CoordinationSpace.locate(url)
      #expect(space === (try container.coordinationSpace()))
      #expect(located == fast, "\(path)")
    }
    let exactOnly = [
      base + "/Documents/./a.txt", base + "/Documents/../Documents/a.txt", base + "/Documents//a.txt",
      base + "/.coordination/locks", base + "/café", base + "/a b", base + "/.", base + "/Documents/..",
      base + "2/Documents/a.txt", base + "ab/Documents/a.txt", base.dropLast() + "/Documents", "/elsewhere/Documents",
      base + "/" + String(repeating: "x", count: 256),
    ]
    for path in exactOnly {
      let url = URL(fileURLWithPath: path)
      #expect(ContainerPath.lexical(url, in: base) == nil, "\(path) should take the exact route")
      // Both routes of `locate` agree, errors included.
      let exact = Result { () throws(GroupContainerError) in try container.exactRelativePath(of: url) }
      let located = Result { () throws(GroupContainerError) in try CoordinationSpace.locate(url).1 }
      switch (exact, located) {
      case (.success(let a), .success(let b)): #expect(a == b, "\(path)")
      case (.failure, .failure): break
      case (.success(let a), .failure(let e)): Issue.record("\(path): exact route \(a), locate threw \(e)")
      case (.failure(let e), .success(let b)):
        // Outside this container, locate may still find another container (none here) — it must not.
        Issue.record("\(path): exact route threw \(e), locate gave \(b)")
      }
    }
    // A URL relative to a base takes the exact route.
    let relative = URL(fileURLWithPath: "Documents/a.txt", relativeTo: URL(fileURLWithPath: base + "/"))
    #expect(ContainerPath.lexical(relative, in: base) == nil)
    #expect(try CoordinationSpace.locate(relative).1 == ContainerPath("Documents/a.txt"))
  }

  /// Escaped bytes are decoded by the exact route only: `café` NFC and NFD stay two paths.
  @Test func percentEscapesTakeTheExactRoute() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let nfc = container.url.appendingPathComponent("Documents/caf\u{E9}")
    let nfd = container.url.appendingPathComponent("Documents/cafe\u{301}")
    #expect(ContainerPath.lexical(nfc, in: container.path) == nil)
    let a = try CoordinationSpace.locate(nfc).1
    let b = try CoordinationSpace.locate(nfd).1
    #expect(a.lastComponent.utf8.elementsEqual("caf\u{E9}".utf8))
    #expect(b.lastComponent.utf8.elementsEqual("cafe\u{301}".utf8))
    #expect(a != b)
  }

  /// `locate` remembers the last URL it placed; it answers again only for the same bytes, and forgets when a
  /// container is opened (one opened inside another takes the paths beneath it).
  @Test func locateRemembersOnlyTheSameURL() throws {
    let root = try TestRoot()
    let outer = try root.container(Self.group)
    let outerSpace = try outer.coordinationSpace()
    // Each URL gets its own answer, asked again right away (from memory) or after another URL.
    let a = URL(fileURLWithPath: outer.path + "/Documents/a.txt")
    let b = URL(fileURLWithPath: outer.path + "/Documents/b.txt")
    for (url, name) in [(a, "a.txt"), (b, "b.txt"), (a, "a.txt"), (a, "a.txt"), (b, "b.txt")] {
      let (space, item) = try CoordinationSpace.locate(url)
      #expect(space === outerSpace)
      #expect(item == (try ContainerPath("Documents/" + name)))
    }
    // Canonically equivalent spellings: Foundation escapes non-ASCII bytes, so these take the exact route and are
    // never remembered; each still gets its own bytes (the memory compares bytes all the same).
    let nfc = URL(fileURLWithPath: outer.path + "/Documents/caf\u{E9}")
    let nfd = URL(fileURLWithPath: outer.path + "/Documents/cafe\u{301}")
    for (url, name) in [(nfc, "caf\u{E9}"), (nfd, "cafe\u{301}"), (nfc, "caf\u{E9}")] {
      let item = try CoordinationSpace.locate(url).1
      #expect(item.components.count == 2 && item.lastComponent.utf8.elementsEqual(name.utf8), "\(item)")
    }

    // Placed in the outer container, then a container opened at `Documents/inner`: the same URL is the inner one's.
    let url = URL(fileURLWithPath: outer.path + "/Documents/inner/a.txt")
    #expect(try CoordinationSpace.locate(url).1 == (try ContainerPath("Documents/inner/a.txt")))
    try FileManager.default.createDirectory(atPath: outer.path + "/Documents/inner", withIntermediateDirectories: true)
    let inner = try CoordinationSpace.open(
      containerPath: outer.path + "/Documents/inner", fileMode: 0o600, directoryMode: 0o700)
    let (space, item) = try CoordinationSpace.locate(url)
    #expect(space === inner)
    #expect(item == (try ContainerPath("a.txt")))
  }

  /// The kernel's "no link on the way" answer, for each kind of path.
  @Test func noLinkCheck() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let directory = try container.directory()
    let documents = container.path + "/Documents"
    try Data("x".utf8).write(to: URL(fileURLWithPath: documents + "/file"))
    try FileManager.default.createDirectory(atPath: documents + "/sub", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: documents + "/inLink", withDestinationPath: "sub")
    try FileManager.default.createSymbolicLink(atPath: documents + "/outLink", withDestinationPath: root.path)
    try FileManager.default.createSymbolicLink(atPath: documents + "/dangling", withDestinationPath: "nothing")
    #expect(directory.hasNoSymbolicLink(""))
    #expect(directory.hasNoSymbolicLink("Documents/file"))
    #expect(directory.hasNoSymbolicLink("Documents/sub"))
    #expect(directory.hasNoSymbolicLink("Documents/missing"))
    #expect(directory.hasNoSymbolicLink("Documents/missing/deeper"))
    #expect(directory.hasNoSymbolicLink("Documents/file/x"))  // ENOTDIR: nothing on the way was a link
    // A FIFO neither blocks the check nor is opened by it (the check opens nothing: EISDIR / ENOTDIR).
    #expect(mkfifo(documents + "/fifo", 0o600) == 0)
    #expect(directory.hasNoSymbolicLink("Documents/fifo"))
    // A link anywhere, staying inside or not, last or not, dangling or not: the caller must judge it.
    #expect(!directory.hasNoSymbolicLink("Documents/inLink"))
    #expect(!directory.hasNoSymbolicLink("Documents/inLink/x"))
    #expect(!directory.hasNoSymbolicLink("Documents/outLink"))
    #expect(!directory.hasNoSymbolicLink("Documents/outLink/x"))
    #expect(!directory.hasNoSymbolicLink("Documents/dangling"))
  }

  /// The write's fast route writes only where no link is on the way; elsewhere it writes nothing and leaves the
  /// judging to the walk (`GroupContainer.write` then follows an inside link and refuses a way out, as before).
  @Test func writeTakesTheFastRouteOnlyWithoutLinks() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let directory = try container.directory()
    let documents = container.path + "/Documents"
    try FileManager.default.createDirectory(atPath: documents + "/sub", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: documents + "/inLink", withDestinationPath: "sub")
    try FileManager.default.createSymbolicLink(atPath: documents + "/fileLink", withDestinationPath: "sub/f")
    try FileManager.default.createSymbolicLink(atPath: documents + "/outLink", withDestinationPath: root.path)
    let bytes = Array("new".utf8)
    #expect(try directory.replaceFileIfNoSymbolicLink("Documents/plain", with: bytes, mode: 0o600))
    #expect(try directory.replaceFileIfNoSymbolicLink("Documents/sub/f", with: bytes, mode: 0o600))
    #expect(try directory.replaceFileIfNoSymbolicLink("top", with: bytes, mode: 0o600))
    #expect(FileManager.default.contents(atPath: documents + "/plain") == Data(bytes))
    #expect(FileManager.default.contents(atPath: container.path + "/top") == Data(bytes))
    for relative in ["Documents/inLink/g", "Documents/fileLink", "Documents/outLink/x", "Documents/missing/x", ""] {
      #expect(try !directory.replaceFileIfNoSymbolicLink(relative, with: bytes, mode: 0o600), "\(relative)")
    }
    #expect(!FileManager.default.fileExists(atPath: documents + "/sub/g"))
    #expect(!FileManager.default.fileExists(atPath: root.path + "/x"))
    // Through the public write: the inside link is followed by the walk, the way out refused.
    try container.write(Data("via".utf8), to: container.url.appendingPathComponent("Documents/inLink/g"))
    #expect(FileManager.default.contents(atPath: documents + "/sub/g") == Data("via".utf8))
    #expect(throws: GroupContainerError.self) {
      try container.write(Data("out".utf8), to: container.url.appendingPathComponent("Documents/outLink/x"))
    }
    #expect(!FileManager.default.fileExists(atPath: root.path + "/x"))
  }

  /// `resolveBeneath` with the container's descriptor answers as the walk alone does, errors included.
  @Test func resolveBeneathWithRootAgrees() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let space = try container.coordinationSpace()
    let documents = container.path + "/Documents"
    try FileManager.default.createDirectory(atPath: documents + "/sub", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: documents + "/inLink", withDestinationPath: "sub")
    try FileManager.default.createSymbolicLink(atPath: documents + "/outLink", withDestinationPath: root.path)
    try FileManager.default.createSymbolicLink(atPath: documents + "/dangling", withDestinationPath: "../../x")
    try FileManager.default.createSymbolicLink(
      atPath: documents + "/private", withDestinationPath: "../.coordination/locks")
    let paths = [
      "Documents/a", "Documents/sub/a", "Documents/inLink", "Documents/inLink/a", "Documents/outLink",
      "Documents/outLink/a", "Documents/dangling", "Documents/private/a", "Documents/missing/a",
    ]
    var refused = 0
    for relative in paths {
      let item = try ContainerPath(relative)
      let walk = Result { () throws(GroupContainerError) in try resolveBeneath(item, containerPath: space.containerPath)
      }
      let fast = Result { () throws(GroupContainerError) in
        try resolveBeneath(item, containerPath: space.containerPath, root: space.root)
      }
      switch (walk, fast) {
      case (.success(let a), .success(let b)): #expect(a == b, "\(relative)")
      case (.failure(let a), .failure(let b)):
        #expect("\(a)" == "\(b)", "\(relative)")
        refused += 1
      default: Issue.record("\(relative): walk \(walk), with the descriptor \(fast)")
      }
    }
    #expect(refused == 4)  // outLink, outLink/a, dangling (leads out), private
    #expect(
      try resolveBeneath(ContainerPath("Documents/inLink/a"), containerPath: space.containerPath, root: space.root)
        == ContainerPath("Documents/sub/a"))
  }

  /// The one-item plan equals the merged-and-sorted one (a duplicated access takes the general route).
  @Test func oneItemPlanIsTheGeneralPlan() throws {
    let paths = try ["", "a", "a/b", "a/b/c", "Documents/x.txt", "z/y/x/w"].map {
      $0.isEmpty ? .root : try ContainerPath($0)
    }
    for path in paths {
      for access in [LockOrder.Access.read, .write, .writeTree] {
        let fast = LockOrder.plan([(path, access)])
        let general = LockOrder.plan([(path, access), (path, access)])
        #expect(fast.map(\.key) == general.map(\.key), "\(path) \(access)")
        #expect(fast.map(\.mode) == general.map(\.mode), "\(path) \(access)")
      }
    }
  }

  /// Holds of one owner are counted in place: the lock is free for others only after the last release.
  @Test(.runSlot(.minutes(3))) func lockTableCountsHoldsInPlace() throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let table = try container.coordinationSpace().locks
    let plan = LockOrder.plan([(try ContainerPath("Documents/held"), .read)])
    let a = LockOwner.coordinator(.max - 1)
    let b = LockOwner.coordinator(.max - 2)
    let first = try table.acquire(plan, owner: a, isCancelled: { false })
    let second = try table.acquire(plan, owner: a, isCancelled: { false })
    table.release(second, owner: a)
    // Still held shared by `a`: `b`'s exclusive request waits, and gives up when cancelled.
    let write = LockOrder.plan([(try ContainerPath("Documents/held"), .write)])
    let calls = Counter()
    #expect(throws: FileCoordinatorError.self) {
      _ = try table.acquire(write, owner: b, isCancelled: { calls.next() > 3 })
    }
    table.release(first, owner: a)
    let bounded = Counter()  // ~10 s of 50 ms waits: a hold never released fails here instead of hanging
    let taken = try table.acquire(write, owner: b, isCancelled: { bounded.next() > 200 })
    #expect(table.held().contains { $0.path == (try? ContainerPath("Documents/held")) && $0.mode == .exclusive })
    table.release(taken, owner: b)
  }
}

/// A thread-safe call counter for cancellation closures.
private final class Counter: Sendable {
  private let value = Mutex(0)
  func next() -> Int {
    value.withLock {
      $0 += 1; return $0
    }
  }
}
