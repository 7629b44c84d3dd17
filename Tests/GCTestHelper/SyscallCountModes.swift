import BackgroundDownloads
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import ImageCache
import Logging
import SystemLayer
import SystemPackage
import TestImageKit

/// System calls per operation (`HelperCommand.syscallCounts`; SyscallThresholdsTests): the operation warmed up
/// unarmed, then `count` runs with `IOFaultInjection` counting only — process-wide, so a compaction, the watcher
/// thread's reads and Dispatch work are counted too, which `SyscallRecorder`'s task-local would miss. Each run's
/// `prepare` (the set a synchronize makes durable, the file an Inbox send hands over) is left out: counting is
/// armed around `run` alone and the runs' reports are added up. Left out too: the work the clock drives (the memory
/// monitor's samples, the watcher's once-a-second tick: `IOFaultInjection.clockWork`), which would make the figures
/// depend on how long the operations took — on a busy machine, a sample fell into a run of 20 stores and added
/// 0.75 opens per store.
func runSyscallCounts(_ command: HelperCommand, _ container: GroupContainer) async throws {
  guard case .syscallCounts(let operation, let count, let server) = command else { return }
  let subject = try makeSyscallSubject(operation, container, server: server)
  // Three unarmed runs: what only a process's first operation pays (lock files opened and cached, the journal and
  // the cache's directories created, the activity's record made) is not a cost per operation.
  for round in 1...3 {
    try subject.prepare(round)
    _ = try await subject.run(round)
  }
  var calls: [IOFaultInjection.Call: Int] = [:]
  for round in 4..<(4 + count) {
    try subject.prepare(round)
    IOFaultInjection.arm(nil, nth: 0, errno: .ioError, excludingClockWork: true)
    do { _ = try await subject.run(round) } catch {
      IOFaultInjection.disarm()
      throw error
    }
    calls.merge(IOFaultInjection.disarm().calls, uniquingKeysWith: +)
  }
  faultLine(
    "calls \(calls.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }.joined(separator: ","))"
  )
  faultLine("count \(count)")
}

/// The I/O-error loops' subjects where the operation is the same (IOFaultModes.swift), and the ones only counted.
func makeSyscallSubject(_ operation: HelperCommand.SyscallOperation, _ container: GroupContainer, server: String?)
  throws -> any IOFaultSubject
{
  switch operation {
  case .defaultsSet: return try DefaultsFaultSubject(operation: .defaultsSet, container: container)
  case .defaultsUpdate: return try DefaultsFaultSubject(operation: .defaultsUpdate, container: container)
  case .defaultsSynchronize: return try DefaultsFaultSubject(operation: .defaultsSynchronize, container: container)
  // The presenter of `coordinatedReplacePresented` (another process, started by the test) presents the same file.
  case .coordinatedReplace, .coordinatedReplacePresented: return try CoordinatedWriteFaultSubject(container: container)
  case .coordinatedMove: return try CoordinatedMoveFaultSubject(container: container)
  case .cacheStore: return try CacheFaultSubject(operation: .cacheStore, container: container)
  case .activityUpdate: return try ActivityFaultSubject(container: container)
  case .inboxSend: return InboxFaultSubject(container: container)
  case .coordinatedRead, .coordinatedWrite:
    return EmptyAccessSubject(container: container, read: operation == .coordinatedRead)
  case .cacheDiskHit: return try DiskHitSubject(container: container)
  case .download: return try DownloadSubject(container: container, server: server ?? "")
  }
}

/// An empty coordinated read or write (no options) of `Documents/empty.txt`: the coordination alone.
struct EmptyAccessSubject: IOFaultSubject {
  let container: GroupContainer
  let read: Bool

  func seen() -> String { "" }

  func run(_ round: Int) throws -> String {
    let url = container.documentsURL.appendingPathComponent("empty.txt")
    if read {
      try FileCoordinator().coordinate(readingItemAt: url) { _ in }
    } else {
      try FileCoordinator().coordinate(writingItemAt: url, options: []) { _ in }
    }
    return ""
  }
}

/// A disk hit of a 64×64 PNG: a cache whose memory tier holds nothing (cost limit 1 byte), the entry stored once.
struct DiskHitSubject: IOFaultSubject {
  let cache: SharedImageCache

  init(container: GroupContainer) throws {
    var limits = SharedImageCache.Limits()
    limits.memoryCost = 1  // nothing fits: every lookup reads the disk
    cache = try SharedImageCache(name: "hits", container: container, limits: limits)
    try cache.store(CacheFaultSubject.image("k1"), forKey: "k1")
  }

  func seen() -> String { "" }

  func run(_ round: Int) throws -> String {
    guard try cache.image(forKey: "k1") != nil else { throw CocoaError(.fileReadNoSuchFile) }
    return "k1"
  }
}

/// One download of 4 kB from the test's file server: its task created, then an agent run in this process until it
/// idles out — the request's commit, the transfer, the publish (fsync, coordinated rename, directory fsync) and
/// the outcome's commit of that one task. One agent run per task, so no group commit shares its cost with another
/// task: the count per download is the same in every run (many tasks in one run share commits as their timing
/// allows, which no exact threshold can hold). The session is held attached by a reader of event format 2, as an
/// app waiting for its downloads is (EventFormatHandshake: its two events go in one file); nothing reads them.
struct DownloadSubject: IOFaultSubject {
  let container: GroupContainer
  let store: DownloadStore
  let server: String
  let attached: DescriptorBox

  init(container: GroupContainer, server: String) throws {
    self.container = container
    self.server = server
    store = try DownloadStore(container: container)
    try store.makeSessionDirectories("s")
    attached = DescriptorBox(try store.openLock(DownloadStore.attachLockPath("s")))
    guard try attached.fd.lock(.exclusive, nonBlocking: true) else { throw CocoaError(.fileLocking) }
    store.announceAttached(attached.fd)
  }

  func seen() -> String { "" }

  func run(_ round: Int) async throws -> String {
    let id = DownloadRecordFormat.newTaskID()
    try store.create(
      TaskRequest(
        id: id, session: "s", taskIdentifier: round, url: server + "/gen/4096?seed=\(round)",
        destination: "Downloads/\(round)", created: Int64(Date().timeIntervalSince1970 * 1e9)))
    var settings = DownloadAgent.Settings()
    settings.idleTimeout = .milliseconds(200)
    // No report or checkpoint by the clock: a transfer slowed by load reached the 250 ms progress interval and wrote
    // its status once more (6.25 renames a download in one under-load run). A 4 kB transfer on a quiet machine
    // reaches neither, so the count is what it always was.
    settings.policy.progressInterval = .seconds(3600)
    settings.policy.checkpointInterval = .seconds(3600)
    let agent = try DownloadAgent(container: container, settings: settings, logger: Logger(label: "syscall-counts"))
    let exit = await agent.run()
    guard exit == 0, store.status(id)?.phase == .completed else {
      throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "download \(round): exit \(exit)"])
    }
    return id
  }
}
