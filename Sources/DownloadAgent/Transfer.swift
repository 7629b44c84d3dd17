import AsyncHTTPClient
import BackgroundDownloads
import Crypto
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import NIOCore
import NIOSSL
import Synchronization
import SystemLayer

/// How hard one download tries, and how often it reports.
package struct TransferPolicy: Sendable {
  /// Attempts that end in a network error or a stall before the download fails; each resumes where the last one
  /// stopped. Between them: `initialBackoff` doubling up to `maxBackoff`, with jitter.
  package var maxAttempts = 6
  /// No body byte for this long is a stall (a watchdog, not only AsyncHTTPClient's read timeout).
  package var stallTimeout: Duration = .seconds(30)
  package var connectTimeout: Duration = .seconds(15)
  /// A checkpoint (an fdatasync of the partial, then a report whose `durableBytes` a reboot may trust) is taken
  /// when this many bytes arrived since the last one...
  package var checkpointBytes: Int64 = 64 << 20
  /// ...or this long after it, whichever comes first. It runs on a thread of its own, one at a time, while the
  /// body goes on streaming: a kill loses nothing by it (the partial's bytes are trusted up to the last report),
  /// only a power cut falls back to it.
  package var checkpointInterval: Duration = .seconds(2)
  /// Every this many bytes the kernel is asked to start writing them out (`SystemFD.startWriteback`), so that
  /// checkpoints and the publisher's fsync find little left to write.
  package var writebackBytes: Int64 = 8 << 20
  package var progressInterval: Duration = .milliseconds(250)
  /// The first wait after a failed attempt (added to the brief's fields so tests need not wait 0.5 s per retry).
  package var initialBackoff: Duration = .milliseconds(500)
  package var maxBackoff: Duration = .seconds(30)

  package init() {}
}

/// How one download ended.
package enum TransferOutcome: Sendable, Equatable {
  /// The file is verified, fsynced and at `request.destination`.
  case published(ResumeState, httpStatus: Int)
  /// Nothing at the destination; the partial is kept (and `ResumeState` describes it) only when resumable.
  case failed(DownloadError, ResumeState, httpStatus: Int?)
  /// The Swift task was cancelled (suspend, cancel, shutdown): the partial is kept and fsynced, and the state is
  /// exact for a later resume.
  case stopped(ResumeState)
}

/// Runs one download to its end: attempts with `Range`/`If-Range`, retries, verification, publishing.
///
/// ## Behavior
/// - The body streams into the partial file (opened beneath the container's descriptor, never following a
///   symlink), written before AsyncHTTPClient reads more: memory does not grow with the file.
/// - Resume (RFC 9110): `Range: bytes=<received>-` with `If-Range` (strong ETag, else Last-Modified; with neither
///   the download restarts from 0). 206 continuing the partial → append; 200 → truncate, start over with the new
///   entity; 416 → done if the partial holds the whole entity, else start over once; a 206 that contradicts the
///   request or carries other validators → start over once, then `.protocolViolation`.
/// - Only 2xx becomes a file: another status fails at once with `.httpStatus`, the partial removed.
/// - Network errors and stalls (no byte for `stallTimeout`) are retried with backoff, `maxAttempts` in all.
/// - The partial is trusted on entry as far as it can be: after a reboot only `durableBytes`; after a process
///   kill `min(file size, receivedBytes)`.
/// - Verification: length (the request's `expectedLength`, else the server's), then SHA-256 if asked (hashed
///   while writing when the file was written from 0 in this run, else read once at the end). A mismatch fails,
///   the partial removed.
/// - Publishing (`Publisher`): fsync, a coordinated write of the destination in which the
///   partial is renamed into place, fsync of the directory.
package final class TransferEngine: Sendable {
  let container: GroupContainer
  let client: HTTPClient
  let policy: TransferPolicy
  let logger: Logger

  package init(container: GroupContainer, client: HTTPClient, policy: TransferPolicy, logger: Logger) {
    self.container = container
    self.client = client
    self.policy = policy
    self.logger = logger
  }

  /// An HTTP client of `clientConfiguration` on the process-wide event loops (the agent's own client, which it
  /// shuts down when idle, is `IdleClient`'s).
  package static func makeClient(
    maxConnectionsPerHost: Int, policy: TransferPolicy,
    caFile: String? = Environment.value(TrustRoots.caFileEnvironmentKey)
  ) -> HTTPClient {
    HTTPClient(
      eventLoopGroup: HTTPClient.defaultEventLoopGroup,
      configuration: clientConfiguration(maxConnectionsPerHost: maxConnectionsPerHost, policy: policy, caFile: caFile))
  }

  /// The configuration of the agent's HTTP client: no decompression (byte offsets are offsets of the stored bytes),
  /// up to 5 redirects, `maxConnectionsPerHost` HTTP/1.1 connections per host (HTTP/2 when the server offers it by
  /// ALPN), the policy's connect timeout and its stall timeout as read timeout (the engine's watchdog covers what
  /// that misses), and TLS trusting the system's roots plus those of `caFile` (`$GROUPCONTAINER_DOWNLOAD_CA_FILE` by
  /// default; see `TrustRoots`). Made once per agent: a CA file's problem is reported once, not by every client.
  package static func clientConfiguration(
    maxConnectionsPerHost: Int, policy: TransferPolicy,
    caFile: String? = Environment.value(TrustRoots.caFileEnvironmentKey)
  ) -> HTTPClient.Configuration {
    var configuration = HTTPClient.Configuration()
    configuration.redirectConfiguration = .follow(max: 5, allowCycles: false)
    configuration.timeout = .init(
      connect: .nanoseconds(Int64(policy.connectTimeout.nanoseconds)),
      read: .nanoseconds(Int64(policy.stallTimeout.nanoseconds)))
    configuration.connectionPool = .init(
      idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, maxConnectionsPerHost))
    configuration.decompression = .disabled
    configuration.httpVersion = .automatic
    configuration.tlsConfiguration = TrustRoots.clientConfiguration(
      caFile: caFile, logger: Logger(label: "GroupContainer.DownloadAgent"))
    // A failed connect or TLS handshake fails the attempt at once: the engine's attempts and backoff are the retry
    // policy. With AsyncHTTPClient's own retries every attempt retried the handshake until the 15 s connect
    // deadline: a task to a server with an untrusted certificate was still running after 50 s (about 15 s now).
    configuration.connectionPool.retryConnectionEstablishment = false
    return configuration
  }

  /// Runs one download to its end (see the type's discussion). `partial` is the container-relative path of the
  /// partial file; `progress` is called at most every `progressInterval`, at every checkpoint and when an attempt
  /// starts, and must not block.
  package func run(
    _ request: TaskRequest, resume: ResumeState, partial: String,
    progress: @escaping @Sendable (_ state: ResumeState, _ attempts: Int, _ httpStatus: Int?) -> Void
  ) async -> TransferOutcome {
    guard let url = URL(string: request.url), let scheme = url.scheme?.lowercased(),
      scheme == "http" || scheme == "https", url.host?.isEmpty == false
    else { return .failed(.unsupportedURL(request.url), resume, httpStatus: nil) }
    // The path rule first (no `..`, not absolute, not `.coordination`): nothing is fetched for a refused
    // destination. Links on the way are judged when publishing, from the container's descriptor.
    do {
      if try ContainerPath(request.destination).isRoot {
        return .failed(
          .invalidDestination(request.destination, rule: "it is the container itself"), resume,
          httpStatus: nil)
      }
    } catch {
      return .failed(.invalidDestination(request.destination, rule: "\(error)"), resume, httpStatus: nil)
    }
    let root: ContainerDirectory
    do { root = try container.directory() } catch { return .failed(.container(error), resume, httpStatus: nil) }

    // In a box: offloaded hashing uses it from another thread.
    let file: DescriptorBox
    var state: ResumeState
    do throws(FileSystemError) {
      (file, state) = try openPartial(partial, root: root, resume: resume)
    } catch {
      return .failed(
        error.errno == .noSpace ? .diskFull(path: root.path + "/" + partial) : .system(error), resume,
        httpStatus: nil)
    }
    func discardPartial() {
      try? root.removeFile(partial)  // the descriptor closes on return
    }

    var run = Run(state: state, wantsHash: request.expectedSHA256 != nil)
    attempts: while true {
      if Task.isCancelled { return .stopped(await sync(file.fd, &run.state)) }
      run.attempts += 1
      progress(run.state, run.attempts, run.httpStatus)
      let receivedBefore = run.state.receivedBytes
      let end = await attempt(url: url, file: file.fd, run: &run, progress: progress)
      switch end {
      case .finished:
        if let total = run.state.expectedBytes, run.state.receivedBytes < total {
          // A server that sends ranges in pieces: ask for the rest; a piece with nothing in it counts as a failure.
          if run.state.receivedBytes == receivedBefore {
            run.failures += 1
            if run.failures >= policy.maxAttempts {
              return .failed(
                .protocolViolation("the server ended its answers at byte \(run.state.receivedBytes) of \(total)"),
                await sync(file.fd, &run.state), httpStatus: run.httpStatus)
            }
          }
          continue attempts
        }
        break attempts
      case .complete:
        break attempts
      case .restart(let reason):
        run.restarts += 1
        logger.info("download restarts from 0", metadata: ["url": "\(request.url)", "reason": "\(reason)"])
        if run.restarts > 1 {
          discardPartial()
          return .failed(.protocolViolation(reason), ResumeState(bootID: run.state.bootID), httpStatus: run.httpStatus)
        }
        do throws(FileSystemError) { try file.fd.truncate(to: 0) } catch {
          return .failed(.system(error), run.state, httpStatus: run.httpStatus)
        }
        run.state = ResumeState(bootID: run.state.bootID)
        run.resetHash()
      case .httpError(let status):
        discardPartial()
        return .failed(.httpStatus(status), ResumeState(bootID: run.state.bootID), httpStatus: status)
      case .network(let reason), .stalled(let reason):
        run.failures += 1
        var error = DownloadError.network(reason)
        if case .stalled = end {
          error = .stalled(seconds: Int((Double(policy.stallTimeout.nanoseconds) / 1e9).rounded(.up)))
        }
        logger.info(
          "download attempt failed",
          metadata: ["url": "\(request.url)", "attempt": "\(run.attempts)", "error": "\(reason)"])
        if run.failures >= policy.maxAttempts {
          return .failed(error, await sync(file.fd, &run.state), httpStatus: run.httpStatus)
        }
        do { try await Task.sleep(for: backoff(failures: run.failures)) } catch {
          return .stopped(await sync(file.fd, &run.state))
        }
      case .cancelled:
        return .stopped(await sync(file.fd, &run.state))
      case .fatal(let error):
        return .failed(error, await sync(file.fd, &run.state), httpStatus: run.httpStatus)
      case .writeFailed(let error):
        if error.errno == .noSpace {
          discardPartial()
          return .failed(.diskFull(path: error.path), ResumeState(bootID: run.state.bootID), httpStatus: run.httpStatus)
        }
        return .failed(.system(error), await sync(file.fd, &run.state), httpStatus: run.httpStatus)
      }
    }

    // Verification: nothing that fails it is published, and its partial is not kept (it would fail again).
    let status = run.httpStatus ?? 200
    if let expected = request.expectedLength ?? run.state.expectedBytes, expected != run.state.receivedBytes {
      discardPartial()
      return .failed(
        .lengthMismatch(expected: expected, actual: run.state.receivedBytes), ResumeState(bootID: run.state.bootID),
        httpStatus: status)
    }
    if let expected = request.expectedSHA256 {
      let actual: String
      if let hasher = run.hasher, run.hashedUpTo == run.state.receivedBytes {
        actual = hex(hasher.sha.finalize())
      } else {
        let length = run.state.receivedBytes
        do throws(FileSystemError) {
          actual = try await offload { [self] () throws(FileSystemError) in try hashFile(file.fd, length: length) }
        } catch {
          return .failed(.system(error), run.state, httpStatus: status)
        }
      }
      guard actual == expected.lowercased() else {
        discardPartial()
        return .failed(
          .checksumMismatch(expected: expected, actual: actual), ResumeState(bootID: run.state.bootID),
          httpStatus: status)
      }
    }
    do throws(DownloadError) {
      try await Publisher.publish(
        file: file.fd, partial: partial, length: run.state.receivedBytes, destination: request.destination,
        container: container, root: root, logger: logger)
    } catch {
      switch error.code {
      case .cancelled:
        return .stopped(await sync(file.fd, &run.state))
      case .diskFull, .invalidDestination:
        // Nothing was published; a full disk or a refused destination will not heal by resuming this partial.
        discardPartial()
        return .failed(error, ResumeState(bootID: run.state.bootID), httpStatus: status)
      default:
        return .failed(error, await sync(file.fd, &run.state), httpStatus: status)
      }
    }
    run.state.durableBytes = run.state.receivedBytes
    return .published(run.state, httpStatus: status)
  }

  // MARK: The partial file

  /// Opens (creating) the partial beneath the container and decides how much of it to trust: after a reboot
  /// only what was fsynced, after a process kill what the file holds up to what the state says (bytes beyond
  /// were written but never reported: at most one progress interval, fetched again). Without a validator a
  /// range cannot be asked for, so the partial starts over.
  func openPartial(_ partial: String, root: ContainerDirectory, resume: ResumeState) throws(FileSystemError)
    -> (DescriptorBox, ResumeState)
  {
    let mode = container.sharing.fileMode
    let file: SystemFD
    do { file = try root.openFile(partial, [.readWrite, .create], mode: mode) } catch {
      guard error.errno == .noSuchFileOrDirectory else { throw error }
      // The directories of the partial (`.coordination/downloads/tasks` for the agent) may not exist yet.
      let components = partial.split(separator: "/").dropLast()
      for end in components.indices {
        try root.makeDirectory(components[...end].joined(separator: "/"), mode: container.sharing.directoryMode)
      }
      file = try root.openFile(partial, [.readWrite, .create], mode: mode)
    }
    do {
      let st = try file.status()
      guard st.kind == .regular else { throw FileSystemError("open (not a regular file)", file.path, .invalidArgument) }
      // In a group container the partial may be another member's (an agent run by another user): fchmod would be
      // refused there, and its creator already gave it the mode.
      if st.mode & 0o7777 != mode { try file.setPermissions(mode) }
      var state = resume
      let boot = BootIdentity.current
      let sameBoot = boot != nil && resume.bootID == boot
      var trusted = min(st.size, sameBoot ? resume.receivedBytes : resume.durableBytes)
      if trusted > 0 && resume.ifRangeValidator == nil { trusted = 0 }
      if st.size != trusted { try file.truncate(to: trusted) }
      if trusted == 0 { state = ResumeState() }
      state.receivedBytes = trusted
      state.durableBytes = min(resume.durableBytes, trusted)
      state.bootID = boot
      return (DescriptorBox(file), state)
    }
  }

  /// fsyncs the partial (off the cooperative pool) so the state's bytes are durable; on failure the durable count
  /// stays what it was.
  private func sync(_ file: borrowing SystemFD, _ state: inout ResumeState) async -> ResumeState {
    let view = file.borrowedView  // `file` stays open until this returns
    if await offload({ (try? view.dataSync()) != nil }) { state.durableBytes = state.receivedBytes }
    return state
  }

  // MARK: One attempt

  /// Where a download stands across its attempts in one run.
  struct Run {
    var state: ResumeState
    let wantsHash: Bool
    var attempts = 0
    var failures = 0
    var restarts = 0
    var httpStatus: Int?
    var hasher: StreamHash?
    var hashedUpTo: Int64 = 0

    init(state: ResumeState, wantsHash: Bool) {
      self.state = state
      self.wantsHash = wantsHash
      resetHash()
      if state.receivedBytes > 0 { hasher = nil }
    }

    mutating func resetHash() {
      hasher = wantsHash ? StreamHash() : nil
      hashedUpTo = 0
    }
  }

  enum AttemptEnd {
    case finished
    case complete
    case restart(String)
    case httpError(Int)
    case network(String)
    case stalled(String)
    case cancelled
    case writeFailed(FileSystemError)
    /// An error that no retry can cure: the task fails at once, its partial kept.
    case fatal(DownloadError)
  }

  private func attempt(
    url: URL, file: borrowing SystemFD, run: inout Run, progress: @escaping @Sendable (ResumeState, Int, Int?) -> Void
  ) async -> AttemptEnd {
    let from = ResumePolicy.requestStart(run.state)
    if from == 0 && run.state.receivedBytes > 0 {
      // No validator to resume with: start over.
      run.state = ResumeState(bootID: run.state.bootID)
      run.resetHash()
    }
    let request: HTTPClient.Request
    do {
      request = try HTTPClient.Request(url: url, method: .GET)
    } catch {
      return .network("\(error)")
    }
    var req = request
    for (name, value) in ResumePolicy.requestHeaders(run.state) { req.headers.add(name: name, value: value) }
    let delegate = TransferDelegate(
      file: file, requestedFrom: from, resume: run.state, hasher: run.hasher, hashedUpTo: run.hashedUpTo,
      wantsHash: run.wantsHash, policy: policy, attempts: run.attempts, progress: progress)
    // The delegate writes each body part synchronously, so it should run on the thread that reads the socket: on
    // another loop every body part crosses threads (1 GiB took 1.6 s, 1.45 s of CPU, instead of 1.0 s, 0.95 s).
    // The agent's client has one loop (`IdleClient`), so its delegates always run on their connection's loop.
    // Not `.delegateAndChannel(on:)`: AsyncHTTPClient closes a connection bound to a loop as soon as no request
    // for that loop waits — between two transfers of a burst — so 55 % of the requests of 200 small files opened
    // a connection of their own (a TCP and TLS handshake each, on a real network) instead of reusing the 16.
    let task = client.execute(
      request: req, delegate: delegate, eventLoop: .delegate(on: client.eventLoopGroup.next()), logger: logger)
    let stalled = Atomic<Bool>(false)
    let cancelled = Atomic<Bool>(false)
    let stallTimeout = policy.stallTimeout.nanoseconds
    // The watchdog: AsyncHTTPClient's deadline covers only the head, its read timeout only an idle socket. It also
    // reports the bytes of the last burst before a pause (reports otherwise come only with data).
    let watchdog = Task {
      let tick = Duration.nanoseconds(
        Int64(max(min(stallTimeout / 4, policy.progressInterval.nanoseconds), 10_000_000)))
      while !Task.isCancelled {
        try? await Task.sleep(for: tick)
        delegate.flushProgress()
        if TransferDelegate.now() &- delegate.lastActivity.load(ordering: .relaxed) >= stallTimeout {
          stalled.store(true, ordering: .relaxed)
          task.cancel()
          return
        }
      }
    }
    let result: Result<Void, any Error> = await withTaskCancellationHandler {
      do { return .success(try await task.futureResult.get()) } catch { return .failure(error) }
    } onCancel: {
      cancelled.store(true, ordering: .relaxed)
      task.cancel()
    }
    watchdog.cancel()
    let s = await delegate.finish()
    run.state = s.resume
    run.hasher = s.hasher
    run.hashedUpTo = s.hashedUpTo
    if let status = s.httpStatus { run.httpStatus = status }
    if let error = s.writeError { return .writeFailed(error) }
    switch s.decision {
    case .complete?: return .complete
    case .restart(let reason)?: return .restart(reason)
    case .httpError(let status)?: return .httpError(status)
    default: break
    }
    if cancelled.load(ordering: .relaxed) { return .cancelled }
    if stalled.load(ordering: .relaxed) { return .stalled("no data for \(policy.stallTimeout)") }
    switch result {
    case .success:
      return s.decision == nil ? .network("the connection ended without an answer") : .finished
    case .failure(let error):
      if let error = error as? HTTPClientError {
        if error == .readTimeout { return .stalled("read timeout: \(error)") }
        // Redirects that can never succeed: trying again would only repeat them.
        if error == .redirectLimitReached || error == .redirectCycleDetected || error == .invalidURL {
          return .fatal(.protocolViolation("the redirects of '\(url.absoluteString)' cannot be followed: \(error)"))
        }
      }
      if let error = error as? NIOSSLError, case .handshakeFailed = error {
        // An untrusted or invalid certificate does not heal in a minute: fail now, and say what to do.
        return .fatal(
          .network(
            "the TLS handshake with \(url.host ?? "the server") failed (\(error)); if the server's certificate comes "
              + "from an authority of your own, name its PEM file in \(TrustRoots.caFileEnvironmentKey) for the agent"))
      }
      return .network("\(error)")
    }
  }

  /// `initialBackoff` doubling with each failure up to `maxBackoff`, ±25 % jitter (downloads that failed
  /// together do not all come back at once).
  func backoff(failures: Int) -> Duration {
    let base = Double(policy.initialBackoff.nanoseconds) * pow(2, Double(max(0, failures - 1)))
    let capped = min(base, Double(policy.maxBackoff.nanoseconds))
    return .nanoseconds(Int64(capped * Double.random(in: 0.75...1.25)))
  }

  // MARK: Hashing

  /// SHA-256 of the first `length` bytes of `file`, read once through a 1 MiB buffer.
  func hashFile(_ file: borrowing SystemFD, length: Int64) throws(FileSystemError) -> String {
    var hasher = SHA256()
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    var offset: Int64 = 0
    while offset < length {
      let want = Int(min(Int64(buffer.count), length - offset))
      let n = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
      guard n > 0 else { throw FileSystemError("pread (partial shorter than \(length) bytes)", file.path, .ioError) }
      hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
      offset += Int64(n)
    }
    return hex(hasher.finalize())
  }

  func hex(_ digest: SHA256.Digest) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(64)
    for byte in digest {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
  }
}
