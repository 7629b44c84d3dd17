// gc-test-helper sub-commands for presenter semantics, robustness and environment tests (issue #8).
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SystemLayer

/// Runs `.defaultRoot` and `.noInotify` (HelperCommand.swift says what they print).
func runPresenterMode(_ command: HelperCommand, _ container: GroupContainer) throws {
  let out = FileHandle.standardOutput
  switch command {
  case .defaultRoot:
    do { out.write(Data("root \(try GroupContainer.defaultRoot())\n".utf8)) } catch {
      out.write(Data("error \(error)\n".utf8))
    }
  case .noInotify(let path, let count):
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
