import ArgumentParser
import BackgroundDownloads
import Foundation
import GroupContainer
import LiveActivities
import SystemLayer

/// One worker of `stress storm` (started, killed, stopped and restarted by it): loops over one kind of operation
/// until the stop file exists or its parent is gone, logging each acknowledged operation (StressStormHistory.swift).
struct StressStormWorker: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "storm-worker", abstract: "One worker of `stress storm` (started by it).", shouldDisplay: false)

  enum Kind: String, ExpressibleByArgument, CaseIterable {
    case defaults, cacheStore = "cache-store", cacheRead = "cache-read", download, activity
    case inboxSend = "inbox-send", inboxReceiver = "inbox-receiver"
  }

  @OptionGroup var container: ContainerOptions
  @Option var kind: Kind
  @Option(help: "The worker's slot: its keys, session and log are its own.") var slot: Int
  @Option(help: "How many times this slot was started before: tokens stay unique across restarts.")
  var generation: Int
  @Option var log: String
  @Option var stopFile: String
  @Option(help: "Downloads: the file server's base URL (http://127.0.0.1:<port>).") var server: String?
  @Option(help: "Downloads: the served files, `<name> <sha256>` per line.") var manifest: String?

  static let suite = "storm"
  /// The scheme the Inbox receivers handle (registered by `stress storm`, launching nothing that answers: a send
  /// while every receiver is dead fails, and is not acknowledged).
  static let inboxScheme = "storminbox"
  static let counterKey = "storm-counter"
  static let cacheName = "storm"
  /// Keys every cache storer and reader shares: stores of one key race each other and the readers.
  static let cacheKeys = 24
  /// Small, so trims run while others store and read.
  static let cacheDiskLimit = 512 * 1024

  func run() async throws {
    let group = try container.open()
    let log = StressLog(path: log)
    let parent = CurrentProcess.parentID
    let stop = { CurrentProcess.parentID != parent || FileManager.default.fileExists(atPath: stopFile) }
    if kind == .inboxSend || kind == .inboxReceiver { return try await runInbox(group, log: log, stop: stop) }
    guard kind == .activity else { return try runSynchronously(group, log: log, stop: stop) }
    // The activity `stress storm` requested: every activity worker adds to its count, atomically.
    guard let activity = try Activity<StormAttributes>.activities(in: group).first else {
      throw CommandFailure("no storm activity in \(group.identifier)")
    }
    while !stop() {
      let start = MonotonicClock.nanoseconds()
      let written = try await activity.update { $0.state.count += 1 }
      log.append("activity \(written?.state.count ?? -1) \(start) \(MonotonicClock.nanoseconds())")
    }
  }

  /// The other kinds: synchronous calls (in an async context the cache's async twins would be picked).
  private func runSynchronously(_ group: GroupContainer, log: StressLog, stop: () -> Bool) throws {
    var random = SystemRandomNumberGenerator()
    var number = 0
    switch kind {
    case .defaults:
      let defaults = try SharedDefaults(suiteName: Self.suite, container: group)
      while !stop() {
        number += 1
        // Keys come back every 500 sets of a generation: a later value of a key must never give way to an older.
        let key = "s\(slot).\(generation).\(number % 500)"
        let token = "\(slot).\(generation).\(number)"
        var start = MonotonicClock.nanoseconds()
        try defaults.set(token, forKey: key)
        log.append("set \(key) \(token) \(start) \(MonotonicClock.nanoseconds())")
        start = MonotonicClock.nanoseconds()
        let new = try defaults.update(Self.counterKey) { .integer(PropertyListInteger(($0?.intValue ?? 0) + 1)) }
        log.append("update \(new?.intValue ?? -1) \(start) \(MonotonicClock.nanoseconds())")
        // Read your writes: a counter read after update() returned is never below what it returned.
        if let new = new?.intValue, defaults.integer(forKey: Self.counterKey) < new {
          log.append("rollback \(Self.counterKey) read \(defaults.integer(forKey: Self.counterKey)) after \(new)")
        }
        if number % 4 == 0 {
          // One key per writer whose value only rises, across generations too.
          let value = generation << 32 | number
          start = MonotonicClock.nanoseconds()
          try defaults.set(value, forKey: "last-\(slot)")
          log.append("mono last-\(slot) \(value) \(start) \(MonotonicClock.nanoseconds())")
        }
      }
    case .cacheStore, .cacheRead:
      var limits = SharedImageCache.Limits()
      if kind == .cacheStore { limits.diskBytes = Self.cacheDiskLimit }
      let cache = try SharedImageCache(name: Self.cacheName, container: group, limits: limits)
      while !stop() {
        number += 1
        let key = "img\(Int.random(in: 0..<Self.cacheKeys, using: &random))"
        let start = MonotonicClock.nanoseconds()
        if kind == .cacheStore {
          let token = "\(slot).\(generation).\(number)"
          // Logged before: a store killed after its publish may still be read, and must not look torn.
          log.append("try \(key) \(token) \(start)")
          try cache.store(StormImage.bytes(key: key, token: token), forKey: key)
          log.append("store \(key) \(token) \(start) \(MonotonicClock.nanoseconds())")
        } else {
          let found = try cache.image(forKey: key).map { StormImage.token(in: $0.data, key: key) ?? "torn" } ?? "miss"
          log.append("read \(key) \(found) \(start) \(MonotonicClock.nanoseconds())")
        }
      }
    case .download:
      try runDownloads(group, log: log, stop: stop)
    case .activity, .inboxSend, .inboxReceiver:
      break  // run() does them
    }
  }

  /// A receiver logs each copy its handler is given (whole or torn); a sender hands over a file of its own token
  /// and logs the copy's name once `send` returned (the receiver answered).
  private func runInbox(_ group: GroupContainer, log: StressLog, stop: () -> Bool) async throws {
    if kind == .inboxReceiver {
      try group.onOpenURL(schemes: [Self.inboxScheme]) { url in
        let bytes = FileManager.default.contents(atPath: url.path).map { [UInt8]($0) } ?? []
        log.append("opened \(url.lastPathComponent) \(StormInboxFile.token(in: bytes) ?? "torn")")
        return true
      }
      while !stop() { try? await Task.sleep(for: .milliseconds(50)) }
      return
    }
    let source = URL(fileURLWithPath: self.log + ".source")
    defer { try? FileManager.default.removeItem(at: source) }
    var number = 0
    while !stop() {
      number += 1
      let token = "\(slot).\(generation).\(number)"
      try Data(StormInboxFile.bytes(token: token)).write(to: source)
      let start = MonotonicClock.nanoseconds()
      // A receiver killed or stopped meanwhile: no answer within the time, an error, nothing acknowledged.
      guard
        let copy = try? await group.send(file: source, toScheme: Self.inboxScheme, timeout: .seconds(2))
      else {
        try? await Task.sleep(for: .milliseconds(20))
        continue
      }
      log.append("handed \(copy.lastPathComponent) \(token) \(start) \(MonotonicClock.nanoseconds())")
    }
  }

  /// Starts a download of a served file (some through a fault), waits until it completes, logs both; again.
  private func runDownloads(_ group: GroupContainer, log: StressLog, stop: () -> Bool) throws {
    guard let server, let manifest else { throw ValidationError("a download worker needs --server and --manifest") }
    let files = try StressStorm.servedFiles(manifest)
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    let session = try DownloadSession(
      identifier: "storm-d\(slot)", container: group, configuration: configuration)
    defer { session.invalidate() }
    var random = SystemRandomNumberGenerator()
    var number = 0
    while !stop() {
      number += 1
      guard let (file, sha) = files.randomElement(using: &random) else { return }
      let (query, succeeds) = StressStorm.downloadFault(number)
      guard let url = URL(string: "\(server)/files/\(file)\(query)") else { continue }
      var start = MonotonicClock.nanoseconds()
      // Every other task gives the agent the SHA-256 to verify; the checker hashes every published file itself.
      let task = try session.download(
        from: url, to: "Downloads/storm-\(slot).\(generation).\(number)-\(file)",
        expectedSHA256: number % 2 == 0 ? sha : nil)
      log.append("start \(task.id) \(file) \(succeeds ? "ok" : "fail") \(start) \(MonotonicClock.nanoseconds())")
      start = MonotonicClock.nanoseconds()
      // The agent may be killed or stopped meanwhile: the session starts it again. Bounded: the checker waits for
      // whatever is left.
      while !stop() && MonotonicClock.nanoseconds() - start < 60_000_000_000 {
        if let done = try DownloadSession.allTasks(in: group, session: session.identifier).first(where: {
          $0.id == task.id && $0.state == .completed
        }) {
          log.append(
            "done \(task.id) \(done.succeeded ? "succeeded" : "failed") \(start) \(MonotonicClock.nanoseconds())")
          break
        }
        Thread.sleep(forTimeInterval: 0.05)
      }
    }
  }
}

/// The storm's Live Activity: one, whose count the activity workers increment with `update(using:)`.
struct StormAttributes: ActivityAttributes {
  struct ContentState: Codable, Hashable, Sendable {
    var count: Int
  }
  var run: String
}
