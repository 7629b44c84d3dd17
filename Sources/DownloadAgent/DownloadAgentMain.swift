import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import SystemLayer

/// The entry points of the download agent: `gc-download-agent` (started by sessions) and `groupctl downloads agent`
/// (in the foreground, for debugging).
public enum DownloadAgentMain {
  /// `gc-download-agent --identifier ID --root ROOT [--idle SECONDS] [--group-shared]`: runs until idle, then exits. Its command line
  /// is written by `AgentLauncher.arguments(for:)` only, so it is parsed here by hand.
  public static func main() async {
    // Two arenas: the agent's threads (event loops, offloaded fsyncs, the pool) otherwise each keep an arena of freed
    // memory, several MB of resident memory for a process that mostly waits.
    MemorySignals.limitMallocArenas(2)
    // Thresholds that do not rise: after a burst, an arena's free top goes back to the kernel and the large tables
    // of the burst (10,000 tasks' requests, statuses) are unmapped as they are freed or shrunk.
    MemorySignals.fixMallocThresholds(trim: 512 << 10, mmap: 256 << 10)
    // The launcher's malloc tunables (read by glibc at the start) are this process's own: the apps it relaunches
    // start without them.
    if Environment.value("GLIBC_TUNABLES") == AgentLauncher.mallocTunables { Environment.unset("GLIBC_TUNABLES") }
    var identifier: String?
    var root: String?
    var sharing = GroupContainer.Sharing.user
    var idle: Duration? = .seconds(30)
    var arguments = CommandLine.arguments.dropFirst().makeIterator()
    while let argument = arguments.next() {
      switch argument {
      case "--identifier": identifier = arguments.next()
      case "--root": root = arguments.next()
      case "--group-shared": sharing = .group
      case "--idle":
        guard let seconds = arguments.next().flatMap(Double.init), seconds >= 0, seconds < 1e6 else {
          FileHandle.standardError.write(Data("gc-download-agent: --idle takes seconds\n".utf8))
          exit(2)
        }
        idle = .milliseconds(Int(seconds * 1000))
      default:
        FileHandle.standardError.write(Data("gc-download-agent: unknown argument '\(argument)'\n".utf8))
        exit(2)
      }
    }
    guard let identifier, let root else {
      FileHandle.standardError.write(
        Data("usage: gc-download-agent --identifier ID --root ROOT [--idle SECONDS] [--group-shared]\n".utf8))
      exit(2)
    }
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = .info
      return handler
    }
    do {
      let container = try GroupContainer(
        identifier: identifier, root: URL(fileURLWithPath: root, isDirectory: true), sharing: sharing)
      exit(try await run(container: container, idleTimeout: idle))
    } catch {
      FileHandle.standardError.write(Data("gc-download-agent: \(error)\n".utf8))
      exit(1)
    }
  }

  /// Runs the agent for `container` in this process. Returns 0 after it exited idle (`idleTimeout`; nil = never
  /// idle: until SIGINT/SIGTERM), 3 when another agent already runs for the container (or took over after
  /// `agent.lock` was removed). SIGINT and SIGTERM stop the transfers (resumable) and end it with status 0.
  public static func run(container: GroupContainer, idleTimeout: Duration?) async throws(DownloadError) -> Int32 {
    var settings = DownloadAgent.Settings()
    settings.idleTimeout = idleTimeout
    let agent = try DownloadAgent(
      container: container, settings: settings, logger: Logger(label: "GroupContainer.DownloadAgent"))
    Interrupts.install()
    Interrupts.onInterrupt {
      let done = DispatchSemaphore(value: 0)
      Task {
        await agent.shutdown()
        done.signal()
      }
      _ = done.wait(timeout: .now() + .seconds(10))
    }
    return await agent.run()
  }
}
