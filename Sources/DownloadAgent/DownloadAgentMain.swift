import Foundation

/// The entry point of `gc-download-agent` (filled in by the agent's loop).
public enum DownloadAgentMain {
  public static func main() async {}
}
