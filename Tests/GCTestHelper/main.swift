// "The other process" of the multi-process tests: a lock holder, a contender, a presenter, a crasher.
// Usage: gc-test-helper <HelperInvocation JSON> [what the library appended…]; tests start it with
// `Child(.command(…), root:, group:)`. The commands and what they print: Tests/HelperCommand/HelperCommand.swift.
import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import PropertyList
import SharedDefaults
import SystemLayer

@MainActor func say(_ text: String) {
  FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

// A helper whose test process died (a crash) must not live on: it would hold the test's output pipe open and
// `swift test` would wait for it forever. Exits once its parent is gone.
// (A process the download agent started for a session's events has the agent as its parent: it stays.)
let parentAtStart = getppid()
if ProcessInfo.processInfo.environment["GROUPCONTAINER_BACKGROUND_SESSION"] == nil {
  Thread.detachNewThread {
    while getppid() == parentAtStart { Thread.sleep(forTimeInterval: 0.25) }
    exit(3)
  }
}

let invocation: HelperInvocation
do {
  invocation = try HelperInvocation(arguments: Array(CommandLine.arguments.dropFirst()))
} catch {
  FileHandle.standardError.write(Data("gc-test-helper: \(error)\n".utf8))
  exit(2)
}
// Before the container is opened (which starts the watcher, with a tick): WatcherModes.swift.
switch invocation.command {
case .watchAfterDescriptors, .watchThenStop, .renameInto, .consumeRenames, .spin:
  try runWatcherMode(invocation.command)
default: break
}
let root = invocation.root
let container = try GroupContainer(identifier: invocation.group, root: URL(fileURLWithPath: root))
func item(_ path: String) -> URL { container.url.appendingPathComponent(path) }

/// Appends one line with O_APPEND (atomic for small writes), so several processes can share a log.
func log(_ file: String, _ line: String) {
  let fd = try! SystemFD.open(file, [.writeOnly, .create, .append], mode: 0o600)
  try! fd.writeAll(Array((line + "\n").utf8))
  fd.close()
}

func writingOptions(_ mode: HelperCommand.AccessMode) -> FileCoordinator.WritingOptions {
  switch mode {
  case .delete: .forDeleting
  case .replace: .forReplacing
  case .merge: .forMerging
  case .read, .write: []
  }
}

// What each command does and prints: HelperCommand.swift.
switch invocation.command {
case .access(let mode, let path, let count, let hold, let logFile):
  let coordinator = FileCoordinator()
  let pid = getpid()
  for _ in 0..<count {
    let body: (URL) throws -> Void = { _ in
      log(logFile, "B \(pid) \(mode.rawValue) \(MonotonicClock.nanoseconds())")
      MonotonicClock.sleep(nanoseconds: hold * 1_000_000)
      log(logFile, "E \(pid) \(mode.rawValue) \(MonotonicClock.nanoseconds())")
    }
    if mode == .read {
      try coordinator.coordinate(readingItemAt: item(path), byAccessor: body)
    } else {
      try coordinator.coordinate(writingItemAt: item(path), options: writingOptions(mode), byAccessor: body)
    }
  }
  say("done")

case .hold(let mode, let path):
  let body: (URL) throws -> Void = { _ in
    say("locked")
    while true { sleep(60) }
  }
  if mode == .read {
    try FileCoordinator().coordinate(readingItemAt: item(path), byAccessor: body)
  } else {
    try FileCoordinator().coordinate(writingItemAt: item(path), options: writingOptions(mode), byAccessor: body)
  }

case .pair(let a, let b, let count):
  let coordinator = FileCoordinator()
  for i in 0..<count {
    try coordinator.coordinate(writingItemAt: item(a), writingItemAt: item(b)) { urlA, urlB in
      try container.write(Data("\(i)".utf8), to: urlA)
      try container.write(Data("\(i)".utf8), to: urlB)
    }
  }
  say("done \(count)")

case .present(let path, let delay, let stall):
  let presenter = LinePresenter(url: item(path), delay: delay)
  try FileCoordinator.addFilePresenter(presenter)
  if stall > 0 { Watcher.shared.stall(nanoseconds: stall * 1_000_000) }
  say("ready \(getpid())")
  while stall > 0 && access(root + "/resume-watcher", F_OK) != 0 { usleep(20_000) }
  Watcher.shared.stall(nanoseconds: 0)
  // A test's barrier: each time `<root>/drain-<pid>` appears, prints "drained" once what was queued for this
  // process before it was handled — every inotify event, the datagrams in its socket (served on the watcher's turn
  // after the first body) — and the presenter's callbacks for them ran (its queue is serial).
  let drain = root + "/drain-\(getpid())"
  while true {
    if unlink(drain) == 0 {
      Watcher.shared.afterQueuedEvents {
        DispatchQueue.global().async {
          Watcher.shared.afterQueuedEvents {
            presenter.presentedItemOperationQueue.addOperation {
              FileHandle.standardOutput.write(Data("drained\n".utf8))
            }
          }
        }
      }
    }
    usleep(20_000)
  }

case .defaultsSet(let suite, let count, let size):
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  for i in 0..<count {
    try defaults.set(value: .data([UInt8](repeating: UInt8(i % 256), count: size)), forKey: "k\(i)")
    say("ack \(i)")
  }
  say("done")

case .defaultsKeys(let suite):
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  for (key, value) in defaults.dictionaryRepresentation().sorted(by: { $0.key < $1.key }) {
    let shown = (value as? Data).map { "\($0.count)" } ?? (value as? Int).map { "\($0)" } ?? "?"
    say("\(key) \(shown)")
  }
  say("end")

case .defaultsHold(let suite):
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  try defaults.update("held") { _ in
    FileHandle.standardOutput.write(Data("holding\n".utf8))
    while true { sleep(60) }
  }

case .defaultsObserve(let suite):
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  let observation = defaults.observe { change in
    let describe: (PropertyListValue?) -> String = { $0.map { "\($0.intValue ?? -1)" } ?? "nil" }
    let line =
      "change \(change.key) \(describe(change.oldValue)) \(describe(change.newValue)) \(change.originProcessID.map(String.init) ?? "-")"
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
  }
  say("ready \(getpid())")
  while true { sleep(60) }
  _ = observation

case .urlHandler(let scheme):
  // Started by open(_:), it gets the URL as the argument after the invocation's.
  try container.onOpenURL(schemes: [scheme]) { url in
    FileHandle.standardOutput.write(Data("opened \(url.absoluteString)\n".utf8))
    return url.host != "refuse"
  }
  say("ready \(getpid())\(invocation.appended.last.map { " launched-with " + $0 } ?? "")")
  while true { sleep(60) }

case .defaultRoot, .noInotify:  // PresenterModes.swift
  try runPresenterMode(invocation.command, container)

case .swap, .relink, .exchange, .plantLink, .remake, .pauseWrite:  // PathAttacks.swift
  try runPathAttack(invocation.command, container: container)

case .pressureCgroup, .pressureBudget, .pressureListen, .pressureDefaults, .pressureDisk:  // MemoryPressure.swift
  try runMemoryPressure(invocation.command, container: container)

case .cacheIdle, .cacheHold:  // LockCaching.swift
  try runLockCachingMode(invocation.command, container)

case .lockCounter, .lockChurn, .lockSweep:  // LockFileSweeps.swift
  try runLockFileSweepMode(invocation.command, container)

case .tornWriter(let path, let bytes):  // ScaleModes.swift
  try tornWriter(container, root: root, item: item(path), bytes: bytes)

case .tornReader(let path, let coordinated):  // ScaleModes.swift
  try tornReader(container, root: root, item: item(path), coordinated: coordinated)

// LiveActivitiesModes.swift
case .actRequest, .actObserve, .actObserveNew, .actUpdate, .actUpdateLoop, .actLike, .actDismiss, .actState:
  try await runActivityMode(invocation.command, container)

case .dlStart, .dlAttach, .dlRelaunched, .dlLaunchRace:  // DownloadSessions.swift
  try await runDownloadSessionMode(invocation, container)

case .cacheWriter(let cache, _, _, _, _), .cacheReader(let cache, _, _, _), .cacheStoreLoop(let cache, _, _, _),
  .cacheWatch(let cache, _), .cacheReadAll(let cache, _, _), .cacheMemory(let cache, _), .cacheCgroup(let cache, _),
  .cacheBudget(let cache, _, _), .cacheDisk(let cache), .cacheTrimRace(let cache, _, _):  // ImageCacheModes.swift
  try runImageCacheMode(invocation.command, cacheName: cache, container)

case .seqWriter, .seqReader:  // InvariantHelpers.swift
  try runInvariantMode(invocation.command, root: root, container)

case .domainReader(let suite):  // PersistentDomainHelper.swift
  try runDomainReader(suite: suite, directory: root, container)

case .defaultsScript(let suite, let steps):  // DefaultsScript.swift
  try runDefaultsScript(suite: suite, directory: root, steps: steps, container)

case .watchAfterDescriptors, .watchThenStop, .renameInto, .consumeRenames, .spin:  // WatcherModes.swift, run above
  break

case .ioFault:  // IOFaultModes.swift
  try await runIOFaultRound(invocation.command, container)

case .syscallCounts:  // SyscallCountModes.swift
  try await runSyscallCounts(invocation.command, container)

case .descriptors(let stay):  // Descriptors.swift
  runDescriptors(stay: stay)

case .intentHost, .inboxReceiver:  // IntentModes.swift
  try await runIntentMode(invocation.command, container)

case .widgetTimeline(let kind, let policy, let entries, let spacing):  // WidgetModes.swift
  try await runWidgetTimeline(kind: kind, policy: policy, entries: entries, spacingMS: spacing, container)

case .todayWidget(let kind, let refresh, let timeout):  // WidgetModes.swift
  try await runTodayWidget(kind: kind, refreshMS: refresh, updateTimeoutMS: timeout, container)
}

final class LinePresenter: FilePresenter, @unchecked Sendable {  // immutable
  let presentedItemURL: URL?
  let delay: Double
  let presentedItemOperationQueue: OperationQueue = {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 1
    return queue
  }()

  init(url: URL, delay: Double) {
    presentedItemURL = url
    self.delay = delay
  }

  func report(_ event: String, _ detail: String = "") {
    let origin = ChangeOrigin.current
    let who = origin?.processID.map(String.init) ?? "-"
    let kind = origin?.isCoordinated == true ? "coordinated" : "uncoordinated"
    let line =
      "\(event) \(kind) \(who)\(origin?.isResync == true ? " resync" : "")\(detail.isEmpty ? "" : " " + detail)"
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
  }

  func wait() { if delay > 0 { Thread.sleep(forTimeInterval: delay) } }

  func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    report("relinquishToReader")
    wait()
    reader { self.report("reacquire") }
  }
  func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
    // With GC_TEST_REPORT_QUIETS set: how many quiets this process's watcher is in (the prepare began its own).
    let quiets = getenv("GC_TEST_REPORT_QUIETS") != nil ? "quiets=\(Watcher.shared.quietsUnderWay)" : ""
    report("relinquishToWriter", quiets)
    wait()
    writer { self.report("reacquire") }
  }
  /// An item named `failsave…` refuses to save (for the failure path of the handshake).
  func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    report("save")
    let refuses = presentedItemURL?.lastPathComponent.hasPrefix("failsave") == true
    completionHandler(refuses ? SaveRefused() : nil)
  }

  struct SaveRefused: Error, CustomStringConvertible {
    var description: String { "the widget refuses to save" }
  }
  func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    report("accommodateDeletion")
    completionHandler(nil)
  }
  func presentedItemDidChange() { report("didChange") }
  func presentedItemDidMove(to newURL: URL) { report("didMove", newURL.lastPathComponent) }
  func presentedSubitemDidAppear(at url: URL) { report("subitemDidAppear", url.lastPathComponent) }
  func presentedSubitemDidChange(at url: URL) { report("subitemDidChange", url.lastPathComponent) }
  func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
    report("subitemDidMove", oldURL.lastPathComponent + ">" + newURL.lastPathComponent)
  }
  func accommodatePresentedSubitemDeletion(at url: URL, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
    report("accommodateSubitemDeletion", url.lastPathComponent)
    completionHandler(nil)
  }
}
