import Foundation
import GroupContainer
import SimpleTimerKit
import Testing

/// The Timer kit's rules, in this process (ExamplesTests in the root runs the host and widget around them).
@Suite struct SimpleTimerTests {
  @Test func finishedURLRules() {
    #expect(FinishedURL.isValid(FinishedURL.url))
    #expect(!FinishedURL.isValid(URL(string: "other://finished?source=widget")!))
    #expect(!FinishedURL.isValid(URL(string: "simpletimer://finished?source=widget#x")!))
  }

  @Test func theEndIsClaimedExactlyOnce() throws {
    let root = try TestRoot()
    let timer = try SimpleTimer(container: try GroupContainer(identifier: SimpleTimer.groupIdentifier, root: root.url))
    try timer.saveForBackground(timeLeft: 0)
    #expect(try timer.claimFinish(by: "widget"))
    #expect(try !timer.claimFinish(by: "host"))
    #expect(timer.defaults[TimerKeys.finishedBy] == "widget")
    #expect(timer.remaining() == 0)
  }
}
