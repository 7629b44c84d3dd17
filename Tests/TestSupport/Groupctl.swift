import Foundation

/// Runs the built `groupctl` with `arguments` (through `ToolRun`) until it exits, for the CLI tests that compare
/// stdout, stderr and the exit status. `status` is nil when it ran past `Wait.exit` (a hang) and was killed.
/// `environment` is added to this process's.
public func groupctl(
  _ arguments: [String], environment: [String: String] = [:]
) async throws -> (status: Int32?, out: String, err: String) {
  guard
    let run = try ToolRun(
      productsDirectory.appendingPathComponent("groupctl").path, arguments, environment: environment)
  else {
    throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: "groupctl (not built?)"])
  }
  let status = await run.exit()
  return (status, run.output, run.errors)
}
