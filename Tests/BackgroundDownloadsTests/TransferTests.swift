import AsyncHTTPClient
import BackgroundDownloads
import Crypto
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer
import TestSupport
import Testing

/// The transfer engine against the real `gc-file-server`, in process: whole downloads, resume, restarts, error
/// statuses, stalls, verification, cancellation and the partial's trust rules.
///
/// Mutants this suite catches (each run once and seen failing):
/// - `If-Range` not sent: `rotatedETagRestartsWithTheNewEntity` (3 requests, not 2: a 206 for the other entity,
///   then a restart);
/// - every non-2xx status written like a download (`decide` → `.replace`): `errorStatusFails`;
/// - no retry after a network error or stall (fail at the first): `droppedConnectionResumesWith206`,
///   `rotatedETagRestartsWithTheNewEntity`, `stallRetriesThenFails`;
/// - the stall watchdog not failing the attempt: `stallRetriesThenFails` (the client's read timeout is set far
///   beyond it; the test hits its time limit);
/// - the partial trusted after a reboot as in the same boot: `rebootTrustsOnlyDurableBytes`;
/// - a stop without fsync (durableBytes stale): `cancellationStopsWithAnExactStateThenResumes`;
/// - the streamed hash used after a resume (`hashedUpTo` not compared): `sha256AfterResumeIsComputedFromTheFile`;
/// - no checkpoint during the body (only the final fsync): `checkpointsMakeBytesDurableWhileTheBodyStreams`;
/// - an attempt's end not waiting for the checkpoint in flight: `attemptEndWaitsForTheCheckpointInFlight`;
/// - the body kept in memory (each ByteBuffer retained): `residentMemoryDoesNotGrowWithTheFile` (for 512 MiB:
///   519 MiB growth instead of 6).
@Suite(.runSlot(.minutes(3)))
struct TransferTests {
  static let partial = ".coordination/downloads/tasks/t.partial"

  @Test func wholeDownloadEqualsTheGeneratorsBytes() async throws {
    let env = try await TransferEnvironment()
    let size = 3_000_000
    let outcome = await env.run(url: "/gen/\(size)?seed=1", destination: "Downloads/whole.bin")
    guard case .published(let state, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 200)
    #expect(state.receivedBytes == Int64(size) && state.durableBytes == Int64(size))
    #expect(state.entityTag == "\"g-\(size)-1\"")
    #expect(try env.holds("Downloads/whole.bin", FileServer.expectedBytes(size: size, seed: 1)))
    #expect(try env.root.status(Self.partial) == nil, "the partial was renamed into place")
    try await env.close()
  }

  @Test func droppedConnectionResumesWith206() async throws {
    let env = try await TransferEnvironment()
    let size = 3_000_000
    let target = "/gen/\(size)?seed=2&drop=1200000&faults=1"
    let outcome = await env.run(url: target, destination: "Downloads/drop.bin")
    guard case .published(_, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 206)
    #expect(try env.holds("Downloads/drop.bin", FileServer.expectedBytes(size: size, seed: 2)))
    let stats = try await env.server.stats(for: target)
    #expect(stats.requests == 2)
    #expect(stats.ranges.count == 1 && stats.ranges.first?.hasPrefix("bytes=") == true)
    // Bytes fetched twice: at most one checkpoint's worth (in process, none: every written byte is kept).
    #expect(stats.bodyBytes - Int64(size) <= env.policy.checkpointBytes)
    try await env.close()
  }

  @Test func serverIgnoringRangeRestartsCleanly() async throws {
    let env = try await TransferEnvironment()
    let size = 2_000_000
    // A partial of 700,000 bytes (zeros: were they kept, the file would be wrong) and a server ignoring Range.
    try env.writePartial([UInt8](repeating: 0, count: 700_000))
    let resume = ResumeState(
      receivedBytes: 700_000, expectedBytes: Int64(size), entityTag: "\"g-\(size)-3\"", durableBytes: 700_000,
      bootID: BootIdentity.current)
    let target = "/gen/\(size)?seed=3&norange=1"
    let outcome = await env.run(url: target, destination: "Downloads/norange.bin", resume: resume)
    guard case .published(let state, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 200 && state.receivedBytes == Int64(size))
    #expect(try env.holds("Downloads/norange.bin", FileServer.expectedBytes(size: size, seed: 3)))
    let stats = try await env.server.stats(for: target)
    #expect(stats.requests == 1 && stats.ranges == ["bytes=700000-"] && stats.bodyBytes == Int64(size))
    try await env.close()
  }

  @Test func partialWithoutValidatorStartsOver() async throws {
    let env = try await TransferEnvironment()
    let size = 500_000
    // Bytes from an entity nothing identifies (a weak ETag, no Last-Modified): no range can be trusted.
    try env.writePartial([UInt8](repeating: 0, count: 100_000))
    let resume = ResumeState(
      receivedBytes: 100_000, expectedBytes: Int64(size), durableBytes: 100_000, bootID: BootIdentity.current)
    let target = "/gen/\(size)?seed=15&weak=1&nolm=1"
    let outcome = await env.run(url: target, destination: "Downloads/weak.bin", resume: resume)
    guard case .published(let state, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 200 && state.entityTag == nil)
    await #expect(try env.server.stats(for: target).ranges == [], "no Range without a validator")
    #expect(try env.holds("Downloads/weak.bin", FileServer.expectedBytes(size: size, seed: 15)))
    try await env.close()
  }

  @Test func rotatedETagRestartsWithTheNewEntity() async throws {
    let env = try await TransferEnvironment()
    let size = 2_000_000
    // Request 1 sees entity r1 (content of seed 5) and drops; request 2 sees the plain entity (seed 4): its ETag
    // fails the If-Range, so the server answers 200 with the whole new entity.
    let target = "/gen/\(size)?seed=4&etag=rotate&drop=600000&faults=1"
    let outcome = await env.run(url: target, destination: "Downloads/rotate.bin")
    guard case .published(let state, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 200)
    #expect(state.entityTag == "\"g-\(size)-4\"")
    #expect(try env.holds("Downloads/rotate.bin", FileServer.expectedBytes(size: size, seed: 4)))
    // With If-Range, the second request is answered 200 at once (without it: a 206 for the other entity, then
    // a third request).
    await #expect(try env.server.stats(for: target).requests == 2)
    try await env.close()
  }

  @Test(arguments: [404, 500])
  func errorStatusFails(status: Int) async throws {
    let env = try await TransferEnvironment()
    let target = "/gen/100000?seed=6&status=\(status)"
    let outcome = await env.run(url: target, destination: "Downloads/error.bin")
    guard case .failed(let error, _, let http) = outcome else {
      Issue.record("expected failed, got \(outcome)")
      return
    }
    #expect(error == .httpStatus(status) && http == status)
    #expect(try env.root.status("Downloads/error.bin") == nil, "nothing at the destination")
    #expect(try env.root.status(Self.partial) == nil, "the partial is gone")
    await #expect(try env.server.stats(for: target).requests == 1, "an error status is not retried")
    try await env.close()
  }

  @Test func stallRetriesThenFails() async throws {
    var policy = TransferEnvironment.testPolicy
    policy.stallTimeout = .milliseconds(400)
    policy.maxAttempts = 2
    // The client's read timeout far beyond the stall timeout: only the engine's watchdog can see the stall.
    var clientPolicy = policy
    clientPolicy.stallTimeout = .seconds(50)
    let env = try await TransferEnvironment(policy: policy, clientPolicy: clientPolicy)
    let target = "/gen/1000000?seed=7&stall=50000"
    let outcome = await env.run(url: target, destination: "Downloads/stall.bin")
    guard case .failed(let error, let state, _) = outcome else {
      Issue.record("expected failed, got \(outcome)")
      return
    }
    #expect(error == .stalled(seconds: 1))
    await #expect(try env.server.stats(for: target).requests == 2)
    // The partial is kept for a later resume: two attempts of 50,000 bytes each.
    #expect(state.receivedBytes == 100_000 && state.durableBytes == 100_000)
    #expect(try env.root.status(Self.partial)?.size == 100_000)
    #expect(try env.root.status("Downloads/stall.bin") == nil)
    try await env.close()
  }

  @Test func sha256MatchAndMismatch() async throws {
    let env = try await TransferEnvironment()
    let size = 1_500_000
    let good = hexSHA256(FileServer.expectedBytes(size: size, seed: 8))
    let ok = await env.run(url: "/gen/\(size)?seed=8", destination: "Downloads/sha.bin", sha256: good)
    guard case .published = ok else {
      Issue.record("expected published, got \(ok)")
      return
    }
    let bad = String(repeating: "0", count: 64)
    let wrong = await env.run(url: "/gen/\(size)?seed=8", destination: "Downloads/sha-bad.bin", sha256: bad)
    #expect(
      wrong
        == .failed(
          .checksumMismatch(expected: bad, actual: good), ResumeState(bootID: BootIdentity.current), httpStatus: 200))
    #expect(try env.root.status("Downloads/sha-bad.bin") == nil)
    #expect(try env.root.status(Self.partial) == nil)
    try await env.close()
  }

  @Test func sha256AfterResumeIsComputedFromTheFile() async throws {
    let env = try await TransferEnvironment()
    let size = 1_000_000
    let expected = FileServer.expectedBytes(size: size, seed: 9)
    // A partial from an earlier run (same boot): the first 300,000 bytes. The hash of this run's stream covers
    // only the rest, so the digest must come from the whole file.
    try env.writePartial(Array(expected[0..<300_000]))
    let resume = ResumeState(
      receivedBytes: 300_000, expectedBytes: Int64(size), entityTag: "\"g-\(size)-9\"", durableBytes: 300_000,
      bootID: BootIdentity.current)
    let outcome = await env.run(
      url: "/gen/\(size)?seed=9", destination: "Downloads/resumed.bin", sha256: hexSHA256(expected), resume: resume)
    guard case .published(_, let status) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(status == 206)
    await #expect(try env.server.stats(for: "/gen/\(size)?seed=9").ranges == ["bytes=300000-"])
    #expect(try env.holds("Downloads/resumed.bin", expected))
    try await env.close()
  }

  @Test func expectedLengthMismatchFails() async throws {
    let env = try await TransferEnvironment()
    let outcome = await env.run(url: "/gen/500000?seed=10", destination: "Downloads/len.bin", length: 500_001)
    guard case .failed(let error, _, _) = outcome else {
      Issue.record("expected failed, got \(outcome)")
      return
    }
    #expect(error == .lengthMismatch(expected: 500_001, actual: 500_000))
    #expect(try env.root.status("Downloads/len.bin") == nil)
    #expect(try env.root.status(Self.partial) == nil)
    try await env.close()
  }

  @Test func cancellationStopsWithAnExactStateThenResumes() async throws {
    let env = try await TransferEnvironment()
    let size = 4_000_000
    // Throttled on the first request only (faults=1), so the second run goes at full speed.
    let target = "/gen/\(size)?seed=11&rate=400000&faults=1"
    let seen = Atomic<Int64>(0)
    let task = Task {
      await env.run(url: target, destination: "Downloads/cancel.bin") { state, _, _ in
        seen.store(state.receivedBytes, ordering: .relaxed)
      }
    }
    while seen.load(ordering: .relaxed) < 200_000 { try await Task.sleep(for: .milliseconds(20)) }
    task.cancel()
    let first = await task.value
    guard case .stopped(let state) = first else {
      Issue.record("expected stopped, got \(first)")
      return
    }
    #expect(state.receivedBytes > 0 && state.receivedBytes < Int64(size))
    #expect(state.durableBytes == state.receivedBytes, "a stop fsyncs the partial")
    #expect(try env.root.status(Self.partial)?.size == state.receivedBytes, "the state is exactly the file")
    #expect(try env.root.status("Downloads/cancel.bin") == nil)

    let second = await env.run(url: target, destination: "Downloads/cancel.bin", resume: state)
    guard case .published(_, let status) = second else {
      Issue.record("expected published, got \(second)")
      return
    }
    #expect(status == 206)
    await #expect(try env.server.stats(for: target).ranges == ["bytes=\(state.receivedBytes)-"])
    #expect(try env.holds("Downloads/cancel.bin", FileServer.expectedBytes(size: size, seed: 11)))
    try await env.close()
  }

  @Test func wholePartialAnsweredWith416IsPublished() async throws {
    let env = try await TransferEnvironment()
    let size = 200_000
    let bytes = FileServer.expectedBytes(size: size, seed: 12)
    try env.writePartial(bytes)
    let resume = ResumeState(
      receivedBytes: Int64(size), expectedBytes: Int64(size), entityTag: "\"g-\(size)-12\"",
      durableBytes: Int64(size), bootID: BootIdentity.current)
    let outcome = await env.run(url: "/gen/\(size)?seed=12", destination: "Downloads/416.bin", resume: resume)
    guard case .published(let state, _) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(state.receivedBytes == Int64(size))
    let stats = try await env.server.stats(for: "/gen/\(size)?seed=12")
    #expect(stats.ranges == ["bytes=\(size)-"] && stats.bodyBytes < 200, "nothing fetched again (416's text only)")
    #expect(try env.holds("Downloads/416.bin", bytes))
    try await env.close()
  }

  @Test func rebootTrustsOnlyDurableBytes() async throws {
    let env = try await TransferEnvironment()
    let size = 300_000
    let bytes = FileServer.expectedBytes(size: size, seed: 13)
    // 100,000 bytes in the file, 60,000 of them fsynced, in a boot that is not this one.
    try env.writePartial(Array(bytes[0..<100_000]))
    let resume = ResumeState(
      receivedBytes: 100_000, expectedBytes: Int64(size), entityTag: "\"g-\(size)-13\"", durableBytes: 60_000,
      bootID: "00000000-0000-0000-0000-000000000000")
    let outcome = await env.run(url: "/gen/\(size)?seed=13", destination: "Downloads/reboot.bin", resume: resume)
    guard case .published = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    await #expect(try env.server.stats(for: "/gen/\(size)?seed=13").ranges == ["bytes=60000-"])
    #expect(try env.holds("Downloads/reboot.bin", bytes))
    try await env.close()
  }

  @Test func killedAgentTrustsTheFileUpToTheState() async throws {
    let env = try await TransferEnvironment()
    let size = 300_000
    let bytes = FileServer.expectedBytes(size: size, seed: 14)
    // The agent wrote 120,000 bytes but reported 100,000 before it was killed (same boot).
    try env.writePartial(Array(bytes[0..<120_000]))
    let resume = ResumeState(
      receivedBytes: 100_000, expectedBytes: Int64(size), entityTag: "\"g-\(size)-14\"", durableBytes: 50_000,
      bootID: BootIdentity.current)
    let outcome = await env.run(url: "/gen/\(size)?seed=14", destination: "Downloads/killed.bin", resume: resume)
    guard case .published = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    await #expect(try env.server.stats(for: "/gen/\(size)?seed=14").ranges == ["bytes=100000-"])
    #expect(try env.holds("Downloads/killed.bin", bytes))
    try await env.close()
  }

  @Test func residentMemoryDoesNotGrowWithTheFile() async throws {
    var policy = TransferEnvironment.testPolicy
    policy.checkpointBytes = 32 << 20
    policy.checkpointInterval = .seconds(10)
    // The container on a tmpfs: 256 MiB written to the shared disk would slow every fsync of the other tests.
    let testRoot = try TestRoot()
    guard let disk = try SmallDisk.mount(in: testRoot, size: "300m") else { return }
    let env = try await TransferEnvironment(
      policy: policy, testRoot: testRoot, containerRoot: URL(fileURLWithPath: disk.path))
    let size = 256 << 20
    let before = residentBytes()
    let peak = Atomic<Int64>(before)
    let outcome = await env.run(url: "/gen/\(size)?seed=16", destination: "Downloads/big.bin") { _, _, _ in
      let now = residentBytes()
      var seen = peak.load(ordering: .relaxed)
      while now > seen {
        let (done, current) = peak.compareExchange(expected: seen, desired: now, ordering: .relaxed)
        if done { break }
        seen = current
      }
    }
    guard case .published(let state, _) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(state.receivedBytes == Int64(size))
    #expect(try env.root.status("Downloads/big.bin")?.size == Int64(size))
    // Streamed to the file: the process grows by buffers, not by the 256 MiB body (other tests share the process).
    let growth = peak.load(ordering: .relaxed) - before
    #expect(growth < 128 << 20, "resident memory grew by \(growth >> 20) MiB during a 256 MiB download")
    try env.root.removeFile("Downloads/big.bin")
    try await env.close()
    _ = disk
  }

  /// Checkpoints run beside the body (on their own queue): durable bytes advance while it streams, and a report
  /// never calls durable more than was written before the fsync began.
  ///
  /// The body waits for a checkpoint instead of for a clock: the report of the first body part past 512 KB (128 ms
  /// into the body at 4 MB/s, so a part after the 50 ms interval has started a checkpoint by then) holds the event
  /// loop until a checkpoint reports. A body streaming 0.5 s at a fixed rate saw none on a busy machine: the
  /// checkpoint's report came after the attempt had closed. Mutant: no checkpoint during the body (the hold ends
  /// at its time limit with none reported).
  @Test func checkpointsMakeBytesDurableWhileTheBodyStreams() async throws {
    var policy = TransferEnvironment.testPolicy
    policy.checkpointBytes = 1 << 40  // by time only
    policy.checkpointInterval = .milliseconds(50)
    policy.progressInterval = .zero  // a report per body part: the hold comes at the first one past 512 KB
    let env = try await TransferEnvironment(policy: policy)
    let size = 2_000_000
    let reports = Mutex<[ResumeState]>([])
    let checkpointed = DispatchSemaphore(value: 0)
    let held = Atomic<Bool>(false)
    let outcome = await env.run(url: "/gen/\(size)?seed=31&rate=4000000", destination: "Downloads/checkpoints.bin") {
      state, _, _ in
      reports.withLock { $0.append(state) }
      if state.durableBytes > 0 && state.durableBytes < Int64(size) {
        checkpointed.signal()  // a checkpoint's report, on its own queue (or a body part's after it)
      } else if state.receivedBytes >= 512 << 10 && state.receivedBytes < Int64(size),
        !held.exchange(true, ordering: .relaxed)
      {
        _ = checkpointed.wait(timeout: .now() + Wait.condition)  // on the event loop: no body part meanwhile
      }
    }
    guard case .published(let state, _) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(state.durableBytes == Int64(size))
    let seen = reports.withLock { $0 }
    #expect(seen.allSatisfy { $0.durableBytes <= $0.receivedBytes }, "durable beyond received: \(seen)")
    #expect(
      seen.contains { $0.durableBytes > 0 && $0.durableBytes < Int64(size) },
      "no checkpoint while the body streamed (\(seen.count) reports)")
    #expect(try env.holds("Downloads/checkpoints.bin", FileServer.expectedBytes(size: size, seed: 31)))
    try await env.close()
  }

  /// An attempt that ends while a checkpoint runs waits for it (`TransferDelegate.finish`): the partial is not
  /// renamed under its fsync, and the checkpoint's report comes before the outcome, never after. The report holds
  /// the checkpoint's queue until the whole body is in the partial, then for 0.5 s unless the run returned: it must
  /// not return meanwhile. Mutant: `finish` never waits (the run returned while the report still held).
  @Test func attemptEndWaitsForTheCheckpointInFlight() async throws {
    var policy = TransferEnvironment.testPolicy
    policy.checkpointBytes = 1 << 40  // by time only
    policy.checkpointInterval = .milliseconds(20)
    policy.progressInterval = .seconds(3600)  // no body part reports: a report with durable bytes is a checkpoint's
    let env = try await TransferEnvironment(policy: policy)
    let size = 400_000
    let root = env.root
    let held = Atomic<Bool>(false)
    let returned = Atomic<Bool>(false)
    let heldReportEnded = Atomic<Bool>(false)
    let outcome = await env.run(url: "/gen/\(size)?seed=32&rate=2000000", destination: "Downloads/held.bin") {
      state, _, _ in
      guard state.durableBytes > 0, state.durableBytes < Int64(size), !held.exchange(true, ordering: .relaxed)
      else { return }
      let limit = ContinuousClock.now + .seconds(Wait.condition)
      while let written = try? root.status(Self.partial)?.size, written < Int64(size), ContinuousClock.now < limit {
        usleep(2_000)
      }
      let hold = ContinuousClock.now + .milliseconds(500)
      while !returned.load(ordering: .relaxed), ContinuousClock.now < hold { usleep(2_000) }
      heldReportEnded.store(true, ordering: .relaxed)
    }
    returned.store(true, ordering: .relaxed)
    let reportEndedFirst = heldReportEnded.load(ordering: .relaxed)
    let checkpointed = held.load(ordering: .relaxed)
    guard case .published(let state, _) = outcome else {
      Issue.record("expected published, got \(outcome)")
      return
    }
    #expect(checkpointed, "no checkpoint ran while the body streamed")
    #expect(reportEndedFirst, "the attempt ended while its checkpoint was still running")
    #expect(state.durableBytes == Int64(size))
    #expect(try env.holds("Downloads/held.bin", FileServer.expectedBytes(size: size, seed: 32)))
    try await env.close()
  }

  @Test func unsupportedSchemeIsRefused() async throws {
    let env = try await TransferEnvironment()
    let request = TaskRequest(
      id: String(repeating: "a", count: 32), session: "s", taskIdentifier: 1, url: "ftp://127.0.0.1/x",
      destination: "Downloads/x", created: 0)
    let outcome = await env.engine.run(request, resume: ResumeState(), partial: Self.partial) { _, _, _ in }
    #expect(outcome == .failed(.unsupportedURL("ftp://127.0.0.1/x"), ResumeState(), httpStatus: nil))
    try await env.close()
  }
}

/// This process's resident set (VmRSS of /proc/self/status), in bytes.
func residentBytes() -> Int64 {
  guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
    let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
  else { return 0 }
  return (Int64(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
}

func hexSHA256(_ bytes: [UInt8]) -> String {
  SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}

/// A container, a file server and an engine for one test.
final class TransferEnvironment: Sendable {
  static var testPolicy: TransferPolicy {
    var policy = TransferPolicy()
    policy.initialBackoff = .milliseconds(20)
    policy.maxBackoff = .milliseconds(100)
    policy.checkpointBytes = 1 << 20
    policy.progressInterval = .milliseconds(20)
    return policy
  }

  let testRoot: TestRoot
  let container: GroupContainer
  let root: ContainerDirectory
  let server: FileServer
  let client: HTTPClient
  let engine: TransferEngine
  let policy: TransferPolicy

  init(
    policy: TransferPolicy = TransferEnvironment.testPolicy, clientPolicy: TransferPolicy? = nil,
    testRoot: TestRoot? = nil, containerRoot: URL? = nil
  ) async throws {
    self.testRoot = try testRoot ?? TestRoot()
    container = try GroupContainer(identifier: "group.com.example.downloads", root: containerRoot ?? self.testRoot.url)
    root = try container.directory()
    server = try await FileServer.start()
    client = TransferEngine.makeClient(maxConnectionsPerHost: 4, policy: clientPolicy ?? policy)
    engine = TransferEngine(
      container: container, client: client, policy: policy, logger: Logger(label: "transfer-test"))
    self.policy = policy
  }

  func run(
    url: String, destination: String, sha256: String? = nil, length: Int64? = nil, resume: ResumeState = ResumeState(),
    progress: @escaping @Sendable (ResumeState, Int, Int?) -> Void = { _, _, _ in }
  ) async -> TransferOutcome {
    let request = TaskRequest(
      id: String(repeating: "b", count: 32), session: "tests", taskIdentifier: 1, url: server.url(url).absoluteString,
      destination: destination, created: 0, expectedSHA256: sha256, expectedLength: length)
    return await engine.run(request, resume: resume, partial: TransferTests.partial, progress: progress)
  }

  /// The bytes at `relative` in the container.
  func published(_ relative: String) throws -> [UInt8] {
    try root.readFile(relative, limit: 64 << 20).bytes
  }

  /// Whether the file at `relative` holds exactly `expected` (a Bool: Swift Testing would diff two arrays of
  /// megabytes for minutes when they differ), recording where they first differ.
  func holds(_ relative: String, _ expected: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> Bool
  {
    let actual = try published(relative)
    guard actual != expected else { return true }
    let first =
      zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
      ?? min(actual.count, expected.count)
    Issue.record(
      "\(relative): \(actual.count) bytes, expected \(expected.count); first difference at byte \(first)",
      sourceLocation: sourceLocation)
    return false
  }

  /// Leaves `bytes` as the partial of an earlier run.
  func writePartial(_ bytes: [UInt8]) throws {
    try root.makeDirectory(".coordination/downloads", mode: 0o700)
    try root.makeDirectory(".coordination/downloads/tasks", mode: 0o700)
    try root.replaceFile(TransferTests.partial, with: bytes, mode: 0o600)
  }

  private let closed = Atomic<Bool>(false)

  func close() async throws {
    guard !closed.exchange(true, ordering: .relaxed) else { return }
    try await client.shutdown()
    await server.stop()
  }

  // A test that returned early (a failed expectation) did not call `close()`: a client dropped unshut traps.
  deinit {
    if !closed.load(ordering: .relaxed) { try? client.syncShutdown() }
  }
}
