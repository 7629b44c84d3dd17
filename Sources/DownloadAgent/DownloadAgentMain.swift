import BackgroundDownloads
import FileCoordination
import Foundation

/// The entry points of the download agent: `gc-download-agent` (started by sessions) and `groupctl downloads agent`
/// (in the foreground, for debugging).
public enum DownloadAgentMain {
  /// `gc-download-agent --identifier ID --root ROOT [--group-shared]`: runs until idle, then exits.
  public static func main() async {}

  /// Runs the agent for `container` in this process. Returns 0 after it exited idle (`idleTimeout`; nil = never
  /// idle: until SIGINT/SIGTERM), 3 when another agent already runs for the container.
  public static func run(container: GroupContainer, idleTimeout: Duration?) async throws(DownloadError) -> Int32 { 0 }
}
