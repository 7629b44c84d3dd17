import ArgumentParser
import Foundation
import GroupContainer

struct Open: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "open",
    abstract: "Open a URL in the app that registered its scheme in the container (started if not running).",
    discussion: "Prints what the app's handler answered (true or false); exits 1 when it answered false.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "The URL, e.g. simpletimer://finished.") var url: String
  @Option(help: "Seconds to wait for the app to start and answer.") var timeout: Double = 10

  func run() async throws {
    // A malformed URL is a usage error (64), found before anything is opened or created.
    do { try GroupContainer.validateURL(url) } catch { throw ValidationError("\(error)") }
    guard let parsed = URL(string: url) else {
      throw ValidationError("'\(url)' is not a URL (percent-encode characters outside RFC 3986)")
    }
    let group = try container.open()
    let opened = try await group.open(parsed, timeout: .milliseconds(Int(timeout * 1000)))
    Output.line(opened ? "true" : "false")
    if !opened { throw ExitCode(1) }
  }
}
