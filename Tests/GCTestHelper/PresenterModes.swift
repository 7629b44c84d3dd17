// gc-test-helper sub-commands for presenter semantics, robustness and environment tests (issue #8).
import FileCoordination
import Foundation
import SystemLayer

/// The sub-commands this file handles.
let presenterModes: Set<String> = ["default-root", "no-inotify"]

func runPresenterMode(_ command: String, _ args: [String], _ container: GroupContainer) throws {
  let out = FileHandle.standardOutput
  switch command {
  case "default-root":
    // default-root <root> <group>: prints "root <GroupContainer.defaultRoot()>" or "error <description>".
    do { out.write(Data("root \(try GroupContainer.defaultRoot())\n".utf8)) } catch {
      out.write(Data("error \(error)\n".utf8))
    }
  case "no-inotify":
    // no-inotify <root> <group> <item> <count>, run with GROUP_CONTAINER_SIMULATE_NO_INOTIFY=1: <count> coordinated
    // increments of the integer in <item> (a presenter that does not ack within 20 s fails them), then tries to
    // add a presenter. Prints "incremented <count>", then "presenter-error <description>" or "presenter-added".
    let (path, count) = (args[4], Int(args[5])!)
    let url = container.url.appendingPathComponent(path)
    let coordinator = FileCoordinator()
    coordinator.presenterTimeout = .seconds(20)
    coordinator.presenterTimeoutPolicy = .fail
    for _ in 0..<count {
      try coordinator.coordinate(writingItemAt: url) { url in
        let value = Int(String(decoding: try container.contents(of: url), as: UTF8.self)) ?? -1_000_000
        try container.write(Data("\(value + 1)".utf8), to: url)
      }
    }
    out.write(Data("incremented \(count)\n".utf8))
    final class Quiet: FilePresenter, @unchecked Sendable {  // immutable
      let presentedItemURL: URL?
      let presentedItemOperationQueue = OperationQueue()
      init(_ url: URL) { presentedItemURL = url }
    }
    do {
      try FileCoordinator.addFilePresenter(Quiet(url))
      out.write(Data("presenter-added\n".utf8))
    } catch {
      out.write(Data("presenter-error \(error)\n".utf8))
    }
  default:
    break
  }
}
