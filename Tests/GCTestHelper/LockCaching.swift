// Helper modes for LockCachingTests: a process that keeps cached tree locks (LockOrder.swift, Rule 4a) idle, or
// one whose access is in flight when another process wants the directory.
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SystemLayer

/// Runs `.cacheIdle` and `.cacheHold` (HelperCommand.swift says what they print).
@MainActor func runLockCachingMode(_ command: HelperCommand, _ container: GroupContainer) throws {
  let (path, linger, goFile): (String, UInt64, String?)
  switch command {
  case .cacheIdle(let item, let lingerMS): (path, linger, goFile) = (item, lingerMS, nil)
  case .cacheHold(let item, let lingerMS, let go): (path, linger, goFile) = (item, lingerMS, go)
  default:
    FileHandle.standardError.write(Data("not a lock caching command: \(command)\n".utf8))
    exit(2)
  }
  GroupContainer.setLockCacheLinger(milliseconds: linger)
  let url = container.url.appendingPathComponent(path)
  let coordinator = FileCoordinator()
  // What the first line says is what later lines compare with: a change in between is never missed.
  var last: [String]
  if let go = goFile {
    var released: UInt64 = 0
    // First an access that leaves the tree locks cached (and the sweeper running), so the held access below
    // runs on cached locks: the case where dropping a lock in use would break exclusion.
    try coordinator.coordinate(writingItemAt: url) { _ in }
    try coordinator.coordinate(writingItemAt: url) { _ in
      say("locked")
      while !FileManager.default.fileExists(atPath: go) { usleep(2_000) }
      released = MonotonicClock.nanoseconds()
    }
    last = container.cachedTreeLocks()
    say("released \(released) cached=\(last.joined(separator: ","))")
  } else {
    try coordinator.coordinate(writingItemAt: url) { _ in }
    last = container.cachedTreeLocks()
    say("accessed cached=\(last.joined(separator: ","))")
  }
  while !last.isEmpty {
    usleep(2_000)
    let now = container.cachedTreeLocks()
    if now != last { say("cached=\(now.joined(separator: ","))") }
    last = now
  }
  say("dropped")
  while true { sleep(60) }
}
