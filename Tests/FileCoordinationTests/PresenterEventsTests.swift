import FileCoordination
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// `FileCoordinator.events(presentedItemAt:)`: presenter callbacks as an AsyncSequence, across real processes.
///
/// Mutants this suite catches (each tried): no `onTermination` removal (cancelling the task, or leaving the loop,
/// leaves the presenter listed by `groupctl status --json`); `relinquishPresentedItem(toWriter:)` answered but not
/// yielded (the writer's relinquish event is missing before its didChange).
@Suite(.runSlot(.minutes(3))) struct PresenterEventsTests {
  let group = "group.com.example.events"

  /// The presenters `groupctl status --json` (another process) lists for the container.
  func listedPresenters(_ root: TestRoot) async throws -> [ContainerStatus.Presenter] {
    let status = try Child(["status", group, "--json", "--root", root.path], executable: "groupctl")
    guard await status.exit() == 0 else {
      Issue.record("groupctl status failed: \(status.errors.text)")
      return []
    }
    return try JSONDecoder().decode(ContainerStatus.self, from: Data(status.output.joined(separator: "\n").utf8))
      .presenters
  }

  /// Polls `listedPresenters` until it is empty; false (the test then fails) if it never becomes so.
  func waitUntilNoPresenterIsListed(_ root: TestRoot) async throws -> Bool {
    let deadline = Date().addingTimeInterval(Wait.condition)
    while Date() < deadline {
      if try await listedPresenters(root).isEmpty { return true }
      try? await Task.sleep(for: .seconds(0.05))
    }
    return false
  }

  @Test func aWriteInAnotherProcessYieldsDidChangeWithTheWritersPid() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("e.txt")
    try Data("0".utf8).write(to: url)
    // The sequence lives in this closure only, as in `for await event in try FileCoordinator.events(…)`.
    let (seen, writer) = try await { () async throws -> ([PresentedItemEvent], Child) in
      let events = try FileCoordinator.events(presentedItemAt: url)
      await #expect(try listedPresenters(root).map(\.item) == ["Documents/e.txt"])
      let log = root.url.appendingPathComponent("access.log").path
      let writer = try Child(
        .access(mode: .write, item: "Documents/e.txt", count: 1, holdMS: 0, log: log), root: root.path, group: group)
      var seen: [PresentedItemEvent] = []
      for await event in events {
        seen.append(event)
        if event.kind == .didChange, event.origin?.processID == writer.pid { break }
      }
      return (seen, writer)
    }()
    let change = try #require(seen.last)
    #expect(change.kind == .didChange)
    #expect(change.origin?.processID == writer.pid)
    #expect(change.origin?.isCoordinated == true)
    #expect(change.description == "didChange (pid \(writer.pid), coordinated)")
    // The writer was asked first, and the stream answered at once (the write went ahead).
    #expect(
      seen.contains { $0.kind == .relinquishToWriter && $0.origin?.processID == writer.pid }, "\(seen)")
    #expect(await writer.exit() == 0)
    #expect(writer.output.contains("done"))
    // Leaving the loop with `break` (and the sequence with it) ended it: no process lists the presenter any more.
    await #expect(try waitUntilNoPresenterIsListed(root))
  }

  @Test func cancellingTheIteratingTaskUnregistersThePresenter() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let url = container.documentsURL.appendingPathComponent("c.txt")
    try Data("0".utf8).write(to: url)
    let events = try FileCoordinator.events(presentedItemAt: url)
    let loop = Task {
      var count = 0
      for await _ in events { count += 1 }
      return count
    }
    await #expect(try listedPresenters(root).map(\.item) == ["Documents/c.txt"])
    loop.cancel()
    _ = await loop.value  // the loop ends: cancellation finishes the sequence
    await #expect(try waitUntilNoPresenterIsListed(root))
  }

  @Test func anItemOutsideEveryContainerThrowsInsteadOfYieldingNothing() throws {
    let outside = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-container-\(UUID()).txt")
    #expect(throws: FileCoordinatorError.self) { _ = try FileCoordinator.events(presentedItemAt: outside) }
  }
}
