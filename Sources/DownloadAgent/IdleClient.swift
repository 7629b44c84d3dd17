import AsyncHTTPClient
import Logging
import NIOCore
import NIOPosix
import Synchronization
import SystemLayer

/// The agent's HTTP client and the event loops it runs on: made when a transfer needs them, shut down once no
/// transfer has run for `idleDelay` (`shutDownIfIdle`), made again by the next transfer.
///
/// Rule: a transfer holds a lease on the client (`lease()`, `release()`) from its first attempt to its last, backoffs
/// included; the client is shut down only when no lease is held and the last one ended `idleDelay` ago, decided and
/// taken out under the lock a lease is taken under. A lease taken after that gets a new client.
/// *Why*: an agent that keeps 10,000 finished tasks is idle most of its life, and a client keeps its event loops'
/// threads (their stacks, and per loop NIO's array of 4,096 tasks, 192 kB, touched by a burst), the burst's pooled
/// connections (kept 60 s) and their buffers, in an agent whose budget is 32 MB (DownloadBenchmarks' `Scale: 10,000
/// tasks of 4 kB`). The process-wide event loops of AsyncHTTPClient (`HTTPClient.defaultEventLoopGroup`) can never be
/// shut down: the agent has its own. *What if you don't*: without the lease, a transfer longer than `idleDelay` has
/// its client shut under it (its attempts, which keep the client they were given, all fail with
/// `HTTPClientError.alreadyShutdown`: `AgentIdleClientTests`); deciding outside the lock lets a transfer lease a
/// client that is being shut down.
package final class IdleClient: Sendable {
  private struct Current {
    var client: HTTPClient
    var group: MultiThreadedEventLoopGroup
  }

  private struct State {
    var current: Current?
    var leases = 0
    /// When the last lease ended, or the client was made (monotonic ns).
    var lastUse: UInt64 = 0
  }

  /// How long the client may go without a transfer before it is shut down (ns).
  package let idleDelay: UInt64
  private let configuration: HTTPClient.Configuration
  private let state = Mutex(State())
  private let logger: Logger

  /// The default `idleDelay`: a burst's connections stay ready this long for the next task, and the memory of the
  /// client goes well before the agent's memory is read settled (its late trim comes 10 s after a burst).
  package static let defaultIdleDelay: UInt64 = 5_000_000_000

  /// Set to a number of milliseconds in the agent's environment, it replaces `defaultIdleDelay`: a test sees the
  /// client shut down and made again within its time limit. A test hook: read only in a build with the `TestHooks`
  /// trait.
  #if GROUPCONTAINER_TEST_HOOKS
    package static let idleDelayVariable = "GROUP_CONTAINER_AGENT_CLIENT_IDLE_MS"
    package static var configuredIdleDelay: UInt64 {
      Environment.value(idleDelayVariable).flatMap(UInt64.init).map { $0 * 1_000_000 } ?? defaultIdleDelay
    }
  #else
    package static var configuredIdleDelay: UInt64 { defaultIdleDelay }
  #endif

  package init(configuration: HTTPClient.Configuration, idleDelay: UInt64 = configuredIdleDelay, logger: Logger) {
    self.configuration = configuration
    self.idleDelay = idleDelay
    self.logger = logger
  }

  /// The client, made now if there is none; the caller holds a lease on it until `release()`.
  package func lease() -> HTTPClient {
    let (client, made) = state.withLock { s -> (HTTPClient, Bool) in
      s.leases += 1
      if let current = s.current { return (current.client, false) }
      // One loop: every request then runs its delegate on the loop of whichever pooled connection serves it
      // (`TransferEngine.attempt`), so connections are kept and reused (see there). One thread reads every socket
      // and writes every body, as curl and aria2c do; the transfers' other work runs on the agent's other threads.
      let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
      let client = HTTPClient(eventLoopGroup: group, configuration: configuration)
      s.current = Current(client: client, group: group)
      return (client, true)
    }
    if made { logger.debug("HTTP client made") }
    return client
  }

  /// Ends a lease taken with `lease()`.
  package func release() {
    let now = MonotonicClock.nanoseconds()
    state.withLock { s in
      s.leases -= 1
      s.lastUse = now
    }
  }

  /// Whether a client is made now (tests).
  package var isRunning: Bool { state.withLock { $0.current != nil } }

  /// Shuts the client down when no lease is held and none ended in the last `idleDelay` (from `now`, monotonic ns);
  /// returns whether it did. Its connections are closed and its event loops' threads end before it returns.
  package func shutDownIfIdle(now: UInt64) async -> Bool {
    let idle = state.withLock { s -> Current? in
      guard s.leases == 0, now &- s.lastUse >= idleDelay, let current = s.current else { return nil }
      s.current = nil
      return current
    }
    guard let idle else { return false }
    await Self.shutDown(idle)
    logger.info("HTTP client shut down: no transfer for \(idleDelay / 1_000_000) ms")
    return true
  }

  /// Shuts the client down whatever its leases (the agent's exit, after its transfers stopped).
  package func shutDown() async {
    let current = state.withLock { s -> Current? in
      defer { s.current = nil }
      return s.current
    }
    if let current { await Self.shutDown(current) }
  }

  private static func shutDown(_ current: Current) async {
    try? await current.client.shutdown()
    try? await current.group.shutdownGracefully()
  }
}
