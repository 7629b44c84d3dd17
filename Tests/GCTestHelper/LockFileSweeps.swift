// Helper modes for LockFileSweepTests: writers that count under a lock whose file a sweep removes, a process that
// makes many lock files, a sweeper a test kills mid-removal.
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SystemLayer

/// Runs `.lockCounter`, `.lockChurn` and `.lockSweep` (HelperCommand.swift says what they print).
@MainActor func runLockFileSweepMode(_ command: HelperCommand, _ container: GroupContainer) throws {
  let coordinator = FileCoordinator()
  switch command {
  case .lockCounter(let path, let count):
    let url = container.url.appendingPathComponent(path)
    for index in 0..<count {
      try coordinator.coordinate(writingItemAt: url) { url in
        let text = (try? String(contentsOf: url, encoding: .utf8)) ?? "0"
        guard let value = Int(text) else { throw CocoaError(.fileReadCorruptFile) }
        // Rewritten in place, widened first: a reader outside the lock could see it torn, which is the point.
        let fd = try SystemFD.open(url.path, [.writeOnly, .create], mode: 0o600)
        try fd.writeAll(Array(String(value + 1).utf8))
        try fd.truncate(to: Int64(String(value + 1).utf8.count))
        fd.close()
      }
      if index % 2 == 1 { FileCoordinator.closeIdleLockFiles() }
    }
    say("done")
  case .lockChurn(let prefix, let items, let threshold):
    GroupContainer.setLockFileSweepThreshold(threshold)
    for index in 0..<items {
      try coordinator.coordinate(writingItemAt: container.url.appendingPathComponent("\(prefix)-\(index)")) { _ in }
    }
    say("done")
    while true { sleep(60) }
  case .lockSweep:
    say("swept \(container.removeUnusedLockFiles(keepingOpen: false))")
  default:
    FileHandle.standardError.write(Data("not a lock file sweep command: \(command)\n".utf8))
    exit(2)
  }
}
