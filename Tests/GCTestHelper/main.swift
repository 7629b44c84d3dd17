// "The other process" of the multi-process tests: a lock holder, a contender, a presenter, a crasher.
// Usage: gc-test-helper <command> <container-root> <group-id> [arguments…]; see each case below.
import FileCoordination
import Foundation
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
if ProcessInfo.processInfo.environment["GROUPCONTAINER_BACKGROUND_SESSION"] == nil { Thread.detachNewThread {
  while getppid() == parentAtStart { Thread.sleep(forTimeInterval: 0.25) }
  exit(3)
} }

let args = CommandLine.arguments
guard args.count >= 4 else {
  FileHandle.standardError.write(Data("usage: gc-test-helper <command> <root> <group> …\n".utf8))
  exit(2)
}
let command = args[1]
let container = try GroupContainer(identifier: args[3], root: URL(fileURLWithPath: args[2]))
func item(_ path: String) -> URL { container.url.appendingPathComponent(path) }

/// Appends one line with O_APPEND (atomic for small writes), so several processes can share a log.
func log(_ file: String, _ line: String) {
  let fd = try! SystemFD.open(file, [.writeOnly, .create, .append], mode: 0o600)
  try! fd.writeAll(Array((line + "\n").utf8))
  fd.close()
}

func writingOptions(_ mode: String) -> FileCoordinator.WritingOptions {
  switch mode {
  case "delete": .forDeleting
  case "replace": .forReplacing
  case "merge": .forMerging
  default: []
  }
}

switch command {
case "access":
  // access <root> <group> <read|write|delete|replace> <item> <count> <hold-ms> <log>
  // Logs "B <pid> <mode> <ns>" / "E <pid> <mode> <ns>" (CLOCK_MONOTONIC) around each accessor.
  let (mode, path, count, hold, logFile) = (args[4], args[5], Int(args[6])!, UInt64(args[7])!, args[8])
  let coordinator = FileCoordinator()
  let pid = getpid()
  for _ in 0..<count {
    let body: (URL) throws -> Void = { _ in
      log(logFile, "B \(pid) \(mode) \(MonotonicClock.nanoseconds())")
      MonotonicClock.sleep(nanoseconds: hold * 1_000_000)
      log(logFile, "E \(pid) \(mode) \(MonotonicClock.nanoseconds())")
    }
    if mode == "read" {
      try coordinator.coordinate(readingItemAt: item(path), byAccessor: body)
    } else {
      try coordinator.coordinate(writingItemAt: item(path), options: writingOptions(mode), byAccessor: body)
    }
  }
  say("done")

case "hold":
  // hold <root> <group> <read|write|delete> <item>: takes the access, says "locked", then waits to be killed.
  let (mode, path) = (args[4], args[5])
  let body: (URL) throws -> Void = { _ in
    say("locked")
    while true { sleep(60) }
  }
  if mode == "read" {
    try FileCoordinator().coordinate(readingItemAt: item(path), byAccessor: body)
  } else {
    try FileCoordinator().coordinate(writingItemAt: item(path), options: writingOptions(mode), byAccessor: body)
  }

case "pair":
  // pair <root> <group> <item-a> <item-b> <count>: write+write of both items in the given order, count times.
  let (a, b, count) = (args[4], args[5], Int(args[6])!)
  let coordinator = FileCoordinator()
  for i in 0..<count {
    try coordinator.coordinate(writingItemAt: item(a), writingItemAt: item(b)) { urlA, urlB in
      try container.write(Data("\(i)".utf8), to: urlA)
      try container.write(Data("\(i)".utf8), to: urlB)
    }
  }
  say("done \(count)")

case "present":
  // present <root> <group> <item> [answer-delay-seconds] [stall-ms]: a presenter printing
  // "<event> <coordinated|uncoordinated> <pid|-> [resync]" per callback. With stall-ms the watcher thread reads
  // no events for that long (so the kernel queue overflows), or until the file <root>/resume-watcher appears.
  let path = args[4]
  let delay = args.count > 5 ? Double(args[5])! : 0
  let stall = args.count > 6 ? UInt64(args[6])! : 0
  let presenter = LinePresenter(url: item(path), delay: delay)
  try FileCoordinator.addFilePresenter(presenter)
  if stall > 0 { Watcher.shared.stall(nanoseconds: stall * 1_000_000) }
  say("ready \(getpid())")
  while stall > 0 && access(args[2] + "/resume-watcher", F_OK) != 0 { usleep(20_000) }
  Watcher.shared.stall(nanoseconds: 0)
  while true { sleep(60) }

case "defaults-set":
  // defaults-set <root> <group> <suite> <count> <value-bytes>: sets k<i> = data of value-bytes bytes (byte i%256)
  // and says "ack <i>" once each set returned — everything acked must survive a kill -9.
  let (suite, count, size) = (args[4], Int(args[5])!, Int(args[6])!)
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  for i in 0..<count {
    try defaults.set(value: .data([UInt8](repeating: UInt8(i % 256), count: size)), forKey: "k\(i)")
    say("ack \(i)")
  }
  say("done")

case "defaults-keys":
  // defaults-keys <root> <group> <suite>: one line per key, "<key> <integer value or data length>", then "end".
  let defaults = try SharedDefaults(suiteName: args[4], container: container)
  for (key, value) in defaults.dictionaryRepresentation().sorted(by: { $0.key < $1.key }) {
    let shown = (value as? Data).map { "\($0.count)" } ?? (value as? Int).map { "\($0)" } ?? "?"
    say("\(key) \(shown)")
  }
  say("end")

case "defaults-hold":
  // defaults-hold <root> <group> <suite>: holds the suite's lock forever, inside an update; says "holding".
  let defaults = try SharedDefaults(suiteName: args[4], container: container)
  try defaults.update("held") { _ in
    FileHandle.standardOutput.write(Data("holding\n".utf8))
    while true { sleep(60) }
  }

case "defaults-observe":
  // defaults-observe <root> <group> <suite>: prints "change <key> <old> <new> <pid>" per change.
  let defaults = try SharedDefaults(suiteName: args[4], container: container)
  let observation = defaults.observe { change in
    let describe: (PropertyListValue?) -> String = { $0.map { "\($0.intValue ?? -1)" } ?? "nil" }
    let line =
      "change \(change.key) \(describe(change.oldValue)) \(describe(change.newValue)) \(change.originProcessID.map(String.init) ?? "-")"
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
  }
  say("ready \(getpid())")
  while true { sleep(60) }
  _ = observation

case "url-handler":
  // url-handler <root> <group> <scheme> [launch-url]: handles <scheme> URLs, answering true unless the URL's
  // host is "refuse"; prints "opened <url>" per URL. Started by open(_:) it gets the URL as last argument.
  let scheme = args[4]
  try container.onOpenURL(schemes: [scheme]) { url in
    FileHandle.standardOutput.write(Data("opened \(url.absoluteString)\n".utf8))
    return url.host != "refuse"
  }
  say("ready \(getpid())\(args.count > 5 ? " launched-with " + args[5] : "")")
  while true { sleep(60) }

case _ where presenterModes.contains(command):
  try runPresenterMode(command, args, container)
case "swap", "relink", "pause-write", "exchange", "plant-link", "remake":
  try runPathAttack(args, container: container)
case "pressure-cgroup", "pressure-budget", "pressure-listen", "pressure-defaults", "pressure-disk":  // MemoryPressure.swift
  try runMemoryPressure(args, container: container)
case _ where lockCachingModes.contains(command):  // LockCaching.swift
  try runLockCachingMode(command, args, container)
case "torn-writer":  // ScaleModes.swift
  try tornWriter(container, root: args[2], item: item(args[4]), bytes: Int(args[5])!)

case "torn-reader":  // ScaleModes.swift
  try tornReader(container, root: args[2], item: item(args[4]), coordinated: args[5] == "coordinated")

case _ where activityModes.contains(command):  // LiveActivitiesModes.swift
  try await runActivityMode(command, args, container)

case _ where downloadSessionModes.contains(command):  // DownloadSessions.swift
  try await runDownloadSessionMode(command, args, container)

case _ where imageCacheModes.contains(command):  // ImageCacheModes.swift
  try runImageCacheMode(command, args, container)

case "seq-writer", "seq-reader":  // InvariantHelpers.swift
  try runInvariantMode(command, args, container)

case "domain-reader":  // PersistentDomainHelper.swift
  try runDomainReader(args, container)

case "defaults-script":  // DefaultsScript.swift
  try runDefaultsScript(args, container)

case "descriptors":  // Descriptors.swift
  runDescriptors(args)

case _ where intentModes.contains(command):  // IntentModes.swift
  try await runIntentMode(command, args, container)

case "widget-timeline":  // WidgetModes.swift
  try await runWidgetTimeline(args, container)

case "today-widget":  // WidgetModes.swift
  try await runTodayWidget(args, container)

default:
  FileHandle.standardError.write(Data("unknown command \(command)\n".utf8))
  exit(2)
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
