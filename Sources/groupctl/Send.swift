import ArgumentParser
import Foundation
import GroupContainer

struct Send: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "send",
    abstract: "Hand a file over to the app that registered a scheme: copy it into Documents/Inbox and open it there.",
    discussion: """
      The copy is atomic and never replaces a file in the Inbox (a taken name gets -1, -2…). The app registered \
      for the scheme gets the copy's file URL (started if not running). Prints the copy's path.
      """)

  @OptionGroup var container: ContainerOptions
  @Argument(help: "The file to send (a regular file).") var file: String
  @Argument(help: "The receiving app's URL scheme, e.g. simpletimer.") var scheme: String
  @Option(help: "Seconds to wait for the app to start and answer.") var timeout: Double = 10

  func run() async throws {
    let group = try container.open()
    do {
      let copy = try await group.send(
        file: URL(fileURLWithPath: file), toScheme: scheme, timeout: .milliseconds(Int(timeout * 1000)))
      Output.line(copy.path)
    } catch let error as FileHandOverError {
      throw CommandFailure(error.description)
    } catch let error as OpenURLError {
      throw CommandFailure(error.description)
    }
  }
}

struct IntentCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "intent",
    abstract: "Ask the app that registered a scheme to perform an intent in its process (started if not running).",
    discussion: "Prints the result's value (JSON) or nothing, then its dialog if any; exits 1 with the reason when "
      + "the intent was not performed.")

  @OptionGroup var container: ContainerOptions
  @Argument(help: "The app's URL scheme.") var scheme: String
  @Argument(help: "The intent's identifier (by default its type name), e.g. LikeIntent.") var type: String
  @Option(help: "The intent's parameters as JSON, e.g. '{\"team\":\"home\"}'.") var json: String = "{}"
  @Option(help: "Seconds to wait for the app to start and answer.") var timeout: Double = 10

  func run() async throws {
    guard (try? JSONSerialization.jsonObject(with: Data(json.utf8))) is [String: Any] else {
      throw ValidationError("--json must be a JSON object, e.g. '{\"team\":\"home\"}'")
    }
    let group = try container.open()
    do {
      let response = try await group.performIntent(
        withIdentifier: type, parameters: Data(json.utf8), inAppWithScheme: scheme,
        timeout: .milliseconds(Int(timeout * 1000)))
      if let value = response.encodedValue { Output.line(String(decoding: value, as: UTF8.self)) }
      if let dialog = response.dialog { Output.line(dialog) }
    } catch {
      throw CommandFailure(error.description)
    }
  }
}
