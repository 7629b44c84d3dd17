import Foundation
import GroupContainer

/// The alarm sound the host downloads in the background — a background `URLSession` whose shared container is the
/// group — so that it lands in `Downloads/` for the host and the widget alike, even when the host has gone away.
public enum AlarmSound {
  /// The background session's identifier (the host's; a widget would use its own).
  public static let sessionIdentifier = "com.example.simpletimer.assets"
  /// Where the sound lands in the container.
  public static let destination = "Downloads/alarm.sound"
  /// Where it is downloaded from: `$SIMPLETIMER_ASSET_URL` (`make demo` points it at its local `gc-file-server`);
  /// nil: no download.
  public static var sourceURL: URL? {
    ProcessInfo.processInfo.environment["SIMPLETIMER_ASSET_URL"].flatMap { URL(string: $0) }
  }

  /// The host's session: when events wait and the host is gone, the agent starts the host again with `arguments`
  /// (as iOS relaunches an app for `handleEventsForBackgroundURLSession`).
  public static func session(in container: GroupContainer, relaunchArguments: [String]) throws -> DownloadSession {
    var configuration = DownloadSession.Configuration()
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
      configuration.relaunch = .executable(URL(fileURLWithPath: exe), arguments: relaunchArguments)
    }
    configuration.agentIdleTimeout = .seconds(5)
    return try DownloadSession(identifier: sessionIdentifier, container: container, configuration: configuration)
  }
}

extension DownloadSession {
  /// Downloads `url` to `destination` unless a task of this session is still under way (an app started again
  /// finds its earlier download going on): the new task, or nil.
  public func downloadUnlessUnderWay(from url: URL, to destination: String) throws -> DownloadTask? {
    guard !allTasks().contains(where: { $0.state != .completed }) else { return nil }
    return try download(from: url, to: destination)
  }
}
