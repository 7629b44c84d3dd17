import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

@Suite(.runSlot(.minutes(10))) struct ContainerTests {
  /// `directory()` costs the same at its 20,000th call as at its first. The function FileCoordination installs was
  /// held as a Mutex's value and read `inout`: Swift wrapped it in two more reabstraction thunks at every read, so
  /// each call went through all earlier ones (a 10,000-task download agent: 13,000 nested frames, 5 MB of stack on
  /// each thread). The call after 20,000 runs on a 512 KiB stack, as a Dispatch thread on Apple platforms: the
  /// nested thunks overflow it and the child process dies. Mutant caught: `ContainerRoot.opener` holding the function
  /// itself again.
  @Test func reachingTheDirectoryDoesNotGrowWithUse() async {
    await #expect(processExitsWith: .success) {
      let root = try TestRoot()
      let container = try root.container("group.com.example.reach")
      for _ in 0..<20_000 { _ = try container.directory() }
      let done = DispatchSemaphore(value: 0)
      let thread = Thread {
        _ = try? container.directory()
        done.signal()
      }
      thread.stackSize = 512 * 1024
      thread.start()
      done.wait()
    }
  }

  @Test func createsTheLayoutWithPrivatePermissions() throws {
    let root = try TestRoot()
    let container = try root.container("group.com.example.layout")
    #expect(container.url.path == root.path + "/group.com.example.layout")
    for dir in ["Library/Preferences", "Library/Caches", "Downloads", "Documents", ".coordination/locks"] {
      var isDir: ObjCBool = false
      #expect(
        FileManager.default.fileExists(atPath: container.path + "/" + dir, isDirectory: &isDir) && isDir.boolValue)
    }
    let attributes = try FileManager.default.attributesOfItem(atPath: container.path)
    #expect((attributes[.posixPermissions] as? Int) == 0o700)
  }

  @Test func groupSharingSetsSetgidDirectoriesAndGroupWritableFiles() throws {
    let root = try TestRoot()
    let container = try GroupContainer(identifier: "group.shared", root: root.url, sharing: .group)
    var st = stat()
    #expect(lstat(container.path + "/Documents", &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o2770)
    let url = container.documentsURL.appendingPathComponent("f")
    try container.write(Data("x".utf8), to: url)
    #expect(lstat(url.path, &st) == 0)
    #expect(st.st_mode & 0o777 == 0o660)
  }

  @Test func rootComesFromTheEnvironmentRules() throws {
    // Only the pure function: setenv would race other tests running in parallel.
    let root = try GroupContainer.defaultRoot()
    #expect(root.hasPrefix("/"))
  }

  @Test(arguments: [
    ("", "empty"), ("a/b", "only A-Z"), ("..", "'..'"), ("a..b", "'..'"), ("group.com/../x", "only A-Z"),
    ("grüße", "only A-Z"), ("a b", "only A-Z"), (".hidden", "start with"),
    (String(repeating: "a", count: 256), "longer"),
  ])
  func rejectsInvalidIdentifiers(identifier: String, rule: String) throws {
    let root = try TestRoot()
    let error = #expect(throws: GroupContainerError.self) { try GroupContainer(identifier: identifier, root: root.url) }
    #expect(error?.description.contains(rule) == true, "\(String(describing: error))")
    // Nothing was created for a refused identifier.
    #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty)
  }

  @Test func acceptsReverseDNSIdentifiers() throws {
    let root = try TestRoot()
    for id in ["group.com.example.app", "A-b.9", String(repeating: "a", count: 255)] {
      _ = try GroupContainer(identifier: id, root: root.url)
    }
  }

  @Test(arguments: ["../x", "/etc/passwd", "a/../../x", "a//b", "./a", "", ".coordination/locks/x", "a\0b"])
  func rejectsInvalidPaths(path: String) throws {
    let root = try TestRoot()
    let container = try root.container()
    #expect(throws: GroupContainerError.self) { try container.url(forRelativePath: path) }
  }

  @Test func refusesSymlinksThatLeadOutside() throws {
    let root = try TestRoot()
    let container = try root.container()
    let outside = root.url.appendingPathComponent("outside")
    try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/out", withDestinationPath: outside.path)
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/dangling", withDestinationPath: "/nonexistent/x")
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/in", withDestinationPath: "../Library")
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/private", withDestinationPath: "../.coordination")
    for bad in ["Documents/out/x", "Documents/out", "Documents/dangling", "Documents/private/locks"] {
      #expect(throws: GroupContainerError.self, "\(bad)") { try container.url(forRelativePath: bad) }
    }
    _ = try container.url(forRelativePath: "Documents/in/Caches")
    // The coordinator refuses them too, before running the accessor.
    #expect(throws: FileCoordinatorError.self) {
      try FileCoordinator().coordinate(writingItemAt: container.url.appendingPathComponent("Documents/out/x")) { _ in
        Issue.record("accessor ran for an escaping path")
      }
    }
  }

  @Test func resolvesSymbolicLinkReadsToTheTarget() throws {
    let root = try TestRoot()
    let container = try root.container()
    try Data("target".utf8).write(to: container.documentsURL.appendingPathComponent("real.txt"))
    try FileManager.default.createSymbolicLink(
      atPath: container.path + "/Documents/link.txt", withDestinationPath: "real.txt")
    let seen = try FileCoordinator().coordinate(
      readingItemAt: container.documentsURL.appendingPathComponent("link.txt"), options: .resolvesSymbolicLink
    ) { $0.lastPathComponent }
    #expect(seen == "real.txt")
  }

  @Test func urlsOutsideAnyContainerAreRefused() throws {
    #expect(throws: FileCoordinatorError.self) {
      try FileCoordinator().coordinate(readingItemAt: URL(fileURLWithPath: "/tmp/not-a-container/x")) { _ in }
    }
  }

  @Test func atomicWriteAndReadRefuseSymlinksAtTheItem() throws {
    let root = try TestRoot()
    let container = try root.container()
    let url = container.documentsURL.appendingPathComponent("a.txt")
    try container.write(Data("one".utf8), to: url)
    #expect(try container.contents(of: url) == Data("one".utf8))
    let leftovers = try FileManager.default.contentsOfDirectory(atPath: container.documentsURL.path)
    #expect(leftovers == ["a.txt"])
  }
}

@Suite(.runSlot(.minutes(10))) struct LockOrderTests {
  @Test func plansAncestorsSharedAndItemExclusiveInOrder() throws {
    let plan = LockOrder.plan([(try ContainerPath("Documents/a/b.txt"), .write)])
    #expect(
      plan.map { "\($0.key.kind) \($0.key.path) \($0.mode)" } == [
        "tree  shared", "tree Documents shared", "tree Documents/a shared", "item Documents/a/b.txt exclusive",
      ])
  }

  @Test func mergesDuplicatesToTheStrongestModeAndSortsByDepthThenPath() throws {
    let plan = LockOrder.plan([
      (try ContainerPath("Documents/z"), .read), (try ContainerPath("Documents"), .writeTree),
      (try ContainerPath("Documents/a"), .write), (try ContainerPath("Documents/z"), .write),
    ])
    #expect(
      plan.map { "\($0.key.kind) \($0.key.path) \($0.mode)" } == [
        "tree  shared", "tree Documents exclusive", "item Documents exclusive",
        "item Documents/a exclusive", "item Documents/z exclusive",
      ])
  }

  @Test func everyPermutationOfItemsGivesTheSamePlan() throws {
    let paths = try ["b/c", "a", "b", "a/z/q"].map { try ContainerPath($0) }
    let reference = LockOrder.plan(paths.map { ($0, .write) }).map(\.key)
    for _ in 0..<50 {
      #expect(LockOrder.plan(paths.shuffled().map { ($0, .write) }).map(\.key) == reference)
    }
  }
}
