import Foundation
import Testing

@testable import DownloadAgent

/// The agent loop's thread (`LoopThread`): the loop's jobs, and the timeouts of its waits (`Doorbell`), run there,
/// so an idle agent gives Dispatch's pools nothing to do and their threads end (with the continuations they cache).
///
/// Mutants this suite catches (each run once and seen failing): the doorbell's timeout back on
/// `DispatchQueue.global().asyncAfter`; a timer that never fires (a wait without a ring then hangs until the limit).
@Suite struct AgentLoopThreadTests {
  @Test(.timeLimit(.minutes(1)))
  func aWaitEndsByItsTimeoutOrARingAndResumesOnTheLoopThread() async {
    let doorbell = Doorbell()
    let threads = await withTaskExecutorPreference(LoopThread.shared) { () async -> [Bool] in
      var threads = [onLoopThread()]
      await doorbell.wait(timeout: .milliseconds(20))  // nothing rings: its timeout ends it
      threads.append(onLoopThread())
      let ringer = Task.detached { () -> Bool in
        try? await Task.sleep(for: .milliseconds(20))
        let timed = LoopThread.shared.hasTimer(owner: doorbell)  // the wait's timeout is the loop thread's
        doorbell.ring()
        return timed
      }
      await doorbell.wait(timeout: .seconds(600))  // the ring from another thread ends it
      threads.append(onLoopThread())
      #expect(await ringer.value)
      return threads
    }
    #expect(threads == [true, true, true])
  }

  @Test(.timeLimit(.minutes(1)))
  func aTimerRunsOnTheLoopThread() async {
    let owner = Doorbell()
    let ran: Bool = await withCheckedContinuation { continuation in
      LoopThread.shared.after(nanoseconds: 1_000_000, owner: owner) {
        continuation.resume(returning: onLoopThread())
      }
    }
    withExtendedLifetime(owner) {}
    #expect(ran)
  }
}

/// `Thread.current` is not available in async code: read from a synchronous function.
private func onLoopThread() -> Bool { LoopThread.shared.isCurrent }
