import FileCoordination
import Foundation
import GroupContainerCore
import Synchronization
import TestSupport
import Testing

/// A container's coordination space is opened once per process, while other threads use the spaces already open.
///
/// Mutants this suite catches (each run once and seen failing):
/// - a space listed (`CoordinationSpace.all`) before its presenter host exists: `presenterCallsWhileContainersOpen`
///   (the process traps on the nil host; seen in a whole-suite run, `removeFilePresenter` in one test while another
///   test opened its container).
@Suite(.runSlot(.minutes(3)))
struct SpaceOpeningTests {
  @Test func presenterCallsWhileContainersOpen() throws {
    let roots = try (0..<40).map { _ in try TestRoot() }
    let presenter = RecordingPresenter(url: try roots[0].container().documentsURL.appendingPathComponent("p"))
    let opening = Atomic<Bool>(true)
    let calls = Atomic<Int>(0)
    let caller = Thread {
      while opening.load(ordering: .relaxed) {
        FileCoordinator.removeFilePresenter(presenter)
        _ = FileCoordinator.filePresenters
        calls.add(1, ordering: .relaxed)
      }
    }
    caller.start()
    defer { opening.store(false, ordering: .relaxed) }
    let opened = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: roots.count - 1) { i in
      if (try? roots[i + 1].container("group.com.example.opening")) != nil { opened.add(1, ordering: .relaxed) }
    }
    opening.store(false, ordering: .relaxed)
    #expect(opened.load(ordering: .relaxed) == roots.count - 1)
    #expect(calls.load(ordering: .relaxed) > 0)
  }
}
