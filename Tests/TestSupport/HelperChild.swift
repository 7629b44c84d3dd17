// Starting gc-test-helper with a typed command (Tests/HelperCommand/HelperCommand.swift): the command, its
// arguments and their types are checked by the compiler, not by the helper at run time.
import Foundation
@_exported import HelperCommand
import Testing

/// The helper's executable, for a library that starts it itself (a URL-scheme registration, a relaunch).
public let helperExecutable: URL = productsDirectory.appendingPathComponent("gc-test-helper")

/// The helper's arguments for `command` in the container `group` under `root` (one element, the invocation's
/// JSON): what a URL-scheme registration or a relaunch record names with `helperExecutable`. The library may
/// append more (the URL); the helper accepts them.
public func helperArguments(_ command: HelperCommand, root: String, group: String) -> [String] {
  HelperInvocation(root: root, group: group, command: command).arguments
}

extension Child {
  /// Starts gc-test-helper running `command` in the container `group` under `root`.
  public convenience init(
    _ command: HelperCommand, root: String, group: String, environment: [String: String] = [:]
  ) throws {
    try self.init(
      helperArguments(command, root: root, group: group), executable: "gc-test-helper", environment: environment)
  }

  /// For a `.present` child under `root`: returns once it has handled every event and message queued for it so
  /// far and its presenter's callbacks for them ran (it prints "drained"). What would come late — a callback twice,
  /// an uncoordinated change — is in `output` then: waited for, not given a pause that a busy machine outlasts.
  public func drained(root: String, sourceLocation: SourceLocation = #_sourceLocation) async {
    let before = output.filter { $0 == "drained" }.count
    #expect(
      FileManager.default.createFile(atPath: root + "/drain-\(pid)", contents: nil), sourceLocation: sourceLocation)
    await line(sourceLocation: sourceLocation) { [self] _ in output.filter { $0 == "drained" }.count > before }
  }
}

/// Runs gc-test-helper's `command` to its end (see `runToEnd`) with exactly `environment`, and returns its exit
/// status (nil when it ran past `timeout` seconds and was killed) and what it wrote.
public func runHelperToEnd(
  _ command: HelperCommand, root: String, group: String,
  environment: [String: String] = ProcessInfo.processInfo.environment, timeout: Double = Wait.exit,
  sourceLocation: SourceLocation = #_sourceLocation
) async throws -> (status: Int32?, output: String, errors: String) {
  try await runToEnd(
    helperExecutable.path, helperArguments(command, root: root, group: group), environment: environment,
    timeout: timeout, sourceLocation: sourceLocation)
}
