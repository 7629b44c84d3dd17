import Foundation
import GroupContainer

// getting-started watch     in one terminal: prints every change of "counter", until Ctrl-C
// getting-started set 42    in another: sets it
func show(_ line: String) { print(line); fflush(nil) }  // at once, also into a pipe

// An error ends the program with its message and status 1 (a top-level `try` would crash with a stack dump).
do {
  // The container: $GROUP_CONTAINER_ROOT/group.com.example.hello (else ~/.local/share/group-containers/…).
  let container = try GroupContainer(identifier: "group.com.example.hello")
  let defaults = try SharedDefaults(container: container)  // UserDefaults(suiteName:) shared by the group
  let me = ProcessInfo.processInfo.processIdentifier

  switch Array(CommandLine.arguments.dropFirst()) {
  case ["watch"]:
    let changes = defaults.changes(forKeys: ["counter"])  // listening from here on
    show("counter is \(defaults.integer(forKey: "counter")); watching from process \(me)")
    for await change in changes {
      show("counter is now \(change.newValue?.intValue ?? 0), set by process \(change.originProcessID ?? 0)")
    }
  case let arguments where arguments.count == 2 && arguments[0] == "set" && Int(arguments[1]) != nil:
    try defaults.set(Int(arguments[1])!, forKey: "counter")  // committed: every process reads it from now on
    show("process \(me) set counter to \(arguments[1])")
  default:
    show("usage: getting-started watch | getting-started set <number>")
    exit(64)
  }
} catch {
  FileHandle.standardError.write(Data("getting-started: \(error)\n".utf8))
  exit(1)
}
