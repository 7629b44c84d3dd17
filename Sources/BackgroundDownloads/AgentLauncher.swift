import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import Synchronization
import SystemLayer

/// Finding and starting the download agent (`gc-download-agent`), and the command line it understands.
///
/// The agent is a singleton per container by its flock on `agent.lock`: starting one while another runs is harmless
/// (the newcomer exits), so sessions start it whenever they see the lock free and work waiting.
package enum AgentLauncher {
  package static let executableName = "gc-download-agent"
  /// Overrides where the agent is looked for.
  package static let executableEnvironmentKey = "GROUPCONTAINER_DOWNLOAD_AGENT"
  /// The agent's log is cut when it is larger than this at a start.
  static let maxLogBytes: Int64 = 1 << 20
  private static let logger = Logger(label: "GroupContainer.BackgroundDownloads")

  /// The agent's arguments for `container`: `--identifier ID --root ROOT --idle SECONDS [--group-shared]`.
  package static func arguments(for container: GroupContainer, idleTimeout: Duration) -> [String] {
    let idle = Double(idleTimeout.components.seconds) + Double(idleTimeout.components.attoseconds) / 1e18
    return [
      "--identifier", container.identifier, "--root", container.url.deletingLastPathComponent().path,
      "--idle", String(idle),
    ] + (container.sharing == .user ? [] : ["--group-shared"])
  }

  /// Where the agent's executable is: the configured one, `$GROUPCONTAINER_DOWNLOAD_AGENT`, beside this process's
  /// executable, or on `$PATH`.
  package static func locate(_ configured: URL?) throws(DownloadError) -> String {
    var tried: [String] = []
    var candidates: [String] = []
    if let configured { candidates.append(configured.path) }
    if let env = Environment.value(executableEnvironmentKey), !env.isEmpty { candidates.append(env) }
    if let exe = ProcessSpawn.currentExecutable() {
      candidates.append(
        URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent(executableName).path)
    }
    for dir in (Environment.value("PATH") ?? "").split(separator: ":") where !dir.isEmpty {
      candidates.append(String(dir) + "/" + executableName)
    }
    for candidate in candidates {
      if ProcessSpawn.isExecutable(candidate) { return candidate }
      tried.append(candidate)
    }
    throw .agentUnavailable(
      reason: "no executable '\(executableName)' (looked at: \(tried.joined(separator: ", "))); build it with the "
        + "package, put it on PATH or beside your executable, or set \(executableEnvironmentKey)")
  }

  /// The agent's output: `agent.log`, or `/dev/null` when that is not a regular file this process can append to
  /// (anyone who can write the container can put a FIFO, a directory, a link or an immutable file there). The log
  /// is a convenience: a download must not fail to start for it (a planted FIFO or directory did stop every
  /// `download(from:)` with an error, its task written and no agent started — HostileContainerTests).
  static func openLog(_ store: DownloadStore) throws(DownloadError) -> SystemFD {
    do {
      return try DownloadStore.system { () throws(FileSystemError) in
        let files = try store.root.openDirectory(DownloadStore.directory)
        let log = try files.open("agent.log", [.writeOnly, .create, .append], mode: store.fileMode)
        do throws(FileSystemError) {
          let status = try log.status()
          // A FIFO with a reader, a socket: the agent would write into someone else's pipe, or block on it.
          guard status.kind == .regular else {
            throw FileSystemError("open (not a regular file)", log.path, .invalidArgument)
          }
          if status.size > maxLogBytes { try? log.truncate(to: 0) }
        } catch {
          log.close()
          throw error
        }
        return log
      }
    } catch {
      // /dev/null is outside the container: nobody who can only write the container can plant anything there.
      guard let null = try? SystemFD.open("/dev/null", .writeOnly) else { throw error }
      logger.warning("the download agent starts with its output discarded: its log cannot be used (\(error))")
      return null
    }
  }

  /// glibc's tunables the agent starts with (`GLIBC_TUNABLES`, which glibc reads when a program starts only): no
  /// per-thread caches of freed blocks. After a burst of 10,000 tasks the caches of the agent's threads, which live
  /// on, held about 1,200 small blocks, strewn over pages nothing else kept; `malloc_trim` gives back free blocks,
  /// not cached ones, and the settled agent kept about 1 MB more (issue #37; DownloadBenchmarks'
  /// `Scale: 10,000 tasks of 4 kB`). The agent removes them from its environment at once (`DownloadAgentMain`).
  package static let mallocTunables = "glibc.malloc.tcache_count=0"

  /// An agent this process started that may still be on its way to the agent lock: its start (a number of this
  /// process's) and until when (monotonic ns) another start for its container waits for it.
  private struct Starting {
    var serial: UInt64
    var until: UInt64
  }

  /// Agents this process started, by container path, until they exit or their `Starting.until` passed.
  private static let starting = Mutex<(serial: UInt64, byContainer: [String: Starting])>((0, [:]))

  /// How long an agent this process started is waited for before another start (ns): one takes its lock in
  /// milliseconds; past this it may be stopped, and another start is harmless (the later one exits 3).
  static let startingWindow: UInt64 = 2_000_000_000

  /// Starts the agent for the store's container unless one holds the agent lock, or one this process started is
  /// still on its way to it.
  ///
  /// *Why the second*: a burst of `download()` calls (200 at once) found the lock free until the first agent had
  /// started and taken it, and started an agent each — 7 to 56 agents per 200 downloads, each exiting 3 after 15–35
  /// ms of CPU (DownloadBenchmarks' `200 files of 64 kB`, the agent's own work 1.7–2.0 s). Waiting for the one
  /// started cannot strand a task: it is alive (the thread that reaps it says when it is not), and an agent exits
  /// for idleness only `idleTimeout` after its first pass, so within `min(idleTimeout, startingWindow)` of its start
  /// it either takes the lock and sees the task, or exits 3 because another agent holds the lock (that one runs it).
  ///
  /// It returns only once an agent was started, by this call or by another thread's: the check and the spawn are one
  /// step under `launching`. *Why*: a thread that found another's start pending returned at once, and a process
  /// that exited next (`groupctl downloads start`, whose session's first poll was starting the agent for an earlier
  /// task) took the pending start with it — no agent ran, and the task waited (HostileContainerTests' template, CI).
  package static func ensureRunning(store: DownloadStore, executable: URL?, idleTimeout: Duration) throws(DownloadError)
  {
    guard !store.isHeld(DownloadStore.agentLockPath) else { return }
    try launching.withLock { _ throws(DownloadError) in
      let key = store.container.url.path
      let now = MonotonicClock.nanoseconds()
      let idle = idleTimeout.nanoseconds
      let serial = starting.withLock { s -> UInt64? in
        if let pending = s.byContainer[key], now < pending.until { return nil }
        s.serial += 1
        s.byContainer[key] = Starting(serial: s.serial, until: now &+ min(idle, startingWindow))
        return s.serial
      }
      guard let serial else { return }
      let forget: @Sendable () -> Void = {
        starting.withLock { s in
          if s.byContainer[key]?.serial == serial { s.byContainer[key] = nil }
        }
      }
      FaultPoint.pause("agents.launch")  // a test holds a start here, between its decision and its spawn
      do throws(DownloadError) {
        try start(store: store, executable: executable, idleTimeout: idleTimeout, onExit: forget)
      } catch {
        forget()
        throw error
      }
    }
  }

  /// Held by a start from its decision to its spawn (`ensureRunning`).
  private static let launching = Mutex<Void>(())

  private static func start(
    store: DownloadStore, executable: URL?, idleTimeout: Duration, onExit: @escaping @Sendable () -> Void
  ) throws(DownloadError) {
    let path = try locate(executable)
    let log = try openLog(store)
    var environment = ProcessInfo.processInfo.environment
    // The agent must never be taken for a relaunched app.
    environment[DownloadSession.relaunchEnvironmentKey] = nil
    // Tunables the user set win.
    if environment["GLIBC_TUNABLES"] == nil { environment["GLIBC_TUNABLES"] = mallocTunables }
    do {
      let pid = try ProcessSpawn.detached(
        executable: path, arguments: arguments(for: store.container, idleTimeout: idleTimeout),
        environment: environment, output: log, onExit: onExit)
      logger.debug("started the download agent \(path) as pid \(pid)")
    } catch {
      throw .agentUnavailable(reason: "\(error)")
    }
  }
}
