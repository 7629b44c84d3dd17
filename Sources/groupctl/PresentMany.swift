import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

/// `groupctl stress present-many`: one process presenting many files, the load of the "unrelated presenters"
/// benchmark (an access must not pay for presenters of other items).
struct PresentMany: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "present-many",
    abstract: "Present --count files <prefix>0, <prefix>1, … (they need not exist) until killed.",
    discussion: "Prints {\"event\":\"ready\",\"pid\":…} once all are registered.",
    shouldDisplay: false)
  @OptionGroup var container: ContainerOptions
  @Option(help: "How many files.") var count = 5000
  @Option(help: "Container-relative path prefix of the files.") var prefix = "Documents/presented/f"

  func run() throws {
    let group = try container.open()
    var presenters: [SilentPresenter] = []
    for i in 0..<count {
      let presenter = SilentPresenter(url: try group.url(forRelativePath: "\(prefix)\(i)"))
      try FileCoordinator.addFilePresenter(presenter)
      presenters.append(presenter)
    }
    Output.json(["event": .string("ready"), "pid": .int(Int(CurrentProcess.id)), "count": .int(presenters.count)])
    let parent = CurrentProcess.parentID
    while CurrentProcess.parentID == parent { Thread.sleep(forTimeInterval: 0.2) }  // until killed, or orphaned
    withExtendedLifetime(presenters) {}
  }
}

/// A presenter with no callbacks of its own (the protocol's defaults answer at once).
final class SilentPresenter: FilePresenter, Sendable {
  let presentedItemURL: URL?
  let presentedItemOperationQueue: OperationQueue = {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 1
    return queue
  }()

  init(url: URL) { presentedItemURL = url }
}
