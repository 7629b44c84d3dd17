import FileCoordination
import Foundation
import Logging
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

  /// Starts the agent for the store's container unless one holds the agent lock.
  package static func ensureRunning(store: DownloadStore, executable: URL?, idleTimeout: Duration) throws(DownloadError)
  {
    guard !store.isHeld(DownloadStore.agentLockPath) else { return }
    let path = try locate(executable)
    let log = try DownloadStore.system { () throws(FileSystemError) in
      let files = try store.root.openDirectory(DownloadStore.directory)
      defer { files.close() }
      let log = try files.open("agent.log", [.writeOnly, .create, .append], mode: store.fileMode)
      if let size = try? log.status().size, size > maxLogBytes { try? log.truncate(to: 0) }
      return log
    }
    defer { log.close() }
    var environment = ProcessInfo.processInfo.environment
    // The agent must never be taken for a relaunched app.
    environment[DownloadSession.relaunchEnvironmentKey] = nil
    do {
      let pid = try ProcessSpawn.detached(
        executable: path, arguments: arguments(for: store.container, idleTimeout: idleTimeout),
        environment: environment, output: log)
      logger.debug("started the download agent \(path) as pid \(pid)")
    } catch {
      throw .agentUnavailable(reason: "\(error)")
    }
  }
}
