import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

struct Present: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "present",
    abstract: "Present an item and print each presenter callback as one JSON line until interrupted.",
    discussion: """
      Prints {"event":"ready",…} once registered, then one line per callback, e.g. \
      {"event":"relinquishToWriter","item":"Documents/a.txt","pid":123,"coordinated":true}. \
      It relinquishes and saves at once (after --answer-delay, to simulate a slow presenter).
      """)

  @OptionGroup var container: ContainerOptions
  @Argument(help: "Container-relative path of the item to present.") var path: String
  @Option(help: "Seconds to wait before answering relinquish/save/accommodate requests.")
  var answerDelay: Double = 0
  @Option(
    help: """
      Print only this callback (repeatable), e.g. --only reacquire: a presenter that formats and writes a line \
      per callback adds that work to every handshake it answers (benchmarks count one event only).
      """)
  var only: [String] = []

  func run() async throws {
    let group = try container.open()
    let presenter = PrintingPresenter(
      url: try group.url(forRelativePath: path), container: group, answerDelay: answerDelay, only: Set(only))
    try FileCoordinator.addFilePresenter(presenter)
    // The cleanup is in place before "ready": a signal right after it must still unregister and exit 0.
    Interrupts.onInterrupt { FileCoordinator.removeFilePresenter(presenter) }
    Output.json(["event": .string("ready"), "item": .string(path), "pid": .int(Int(CurrentProcess.id))])
    while true { try await Task.sleep(for: .seconds(3600)) }
  }
}

/// A presenter that reports every callback on stdout.
final class PrintingPresenter: FilePresenter, @unchecked Sendable {  // `url` is guarded by `lock`
  private let lock = NSLock()
  private var url: URL
  private let container: GroupContainer
  private let answerDelay: Double
  /// The events to print; empty: all.
  private let only: Set<String>
  let presentedItemOperationQueue: OperationQueue = {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 1
    return queue
  }()

  init(url: URL, container: GroupContainer, answerDelay: Double, only: Set<String> = []) {
    self.only = only
    self.url = url
    self.container = container
    self.answerDelay = answerDelay
  }

  var presentedItemURL: URL? { lock.withLock { url } }

  private func relative(_ url: URL?) -> String? {
    guard let url else { return nil }
    return (try? container.relativePath(of: url).string) ?? url.path
  }

  private func emit(_ event: String, subitem: URL? = nil, to destination: URL? = nil) {
    guard only.isEmpty || only.contains(event) else { return }
    let origin = ChangeOrigin.current
    Output.json([
      "event": .string(event),
      "item": relative(presentedItemURL).map { .string($0) },
      "subitem": relative(subitem).map { .string($0) },
      "to": relative(destination).map { .string($0) },
      "pid": origin?.processID.map { .int(Int($0)) },
      "coordinated": .bool(origin?.isCoordinated ?? false),
      "purpose": origin?.purposeIdentifier.map { .string($0) },
      "resync": (origin?.isResync ?? false) ? .bool(true) : nil,
      "time": .double(Double(RealtimeClock.nanoseconds()) / 1e9),
    ])
  }

  private func answer(_ body: @escaping @Sendable () -> Void) {
    if answerDelay > 0 { Thread.sleep(forTimeInterval: answerDelay) }
    body()
  }

  func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    emit("relinquishToReader")
    answer { reader { [self] in emit("reacquire") } }
  }

  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    emit("relinquishToWriter")
    answer { writer { [self] in emit("reacquire") } }
  }

  func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    emit("save")
    answer { completionHandler(nil) }
  }

  func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    emit("accommodateDeletion")
    answer { completionHandler(nil) }
  }

  func presentedItemDidMove(to newURL: URL) {
    emit("didMove", to: newURL)
    lock.withLock { url = newURL }
  }

  func presentedItemDidChange() { emit("didChange") }
  func presentedSubitemDidAppear(at url: URL) { emit("subitemDidAppear", subitem: url) }
  func presentedSubitemDidChange(at url: URL) { emit("subitemDidChange", subitem: url) }
  func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { emit("subitemDidMove", subitem: oldURL, to: newURL) }

  func accommodatePresentedSubitemDeletion(
    at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void
  ) {
    emit("accommodateSubitemDeletion", subitem: url)
    answer { completionHandler(nil) }
  }
}
