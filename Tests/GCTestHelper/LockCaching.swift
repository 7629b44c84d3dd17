// Helper modes for LockCachingTests: a process that keeps cached tree locks (LockOrder.swift, Rule 4a) idle, or
// one whose access is in flight when another process wants the directory.
import FileCoordination
import Foundation
import SystemLayer

let lockCachingModes: Set<String> = ["cache-idle", "cache-hold"]

/// cache-idle <root> <group> <item> <linger-ms>: one coordinated write of <item>, then "accessed cached=<dirs>"
/// (the directories whose tree locks it keeps cached, comma-separated, the root as "."); "cached=<dirs>" at each
/// change, and "dropped" once none is left (revoked or lingered out); then waits to be killed.
///
/// cache-hold <root> <group> <item> <linger-ms> <go-file>: a coordinated write of <item>, then another that says
/// "locked" and holds until <go-file> exists, then "released <monotonic ns> cached=<dirs>", then as cache-idle.
@MainActor func runLockCachingMode(_ command: String, _ args: [String], _ container: GroupContainer) throws {
  GroupContainer.setLockCacheLinger(milliseconds: UInt64(args[5])!)
  let url = container.url.appendingPathComponent(args[4])
  let coordinator = FileCoordinator()
  // What the first line says is what later lines compare with: a change in between is never missed.
  var last: [String]
  if command == "cache-idle" {
    try coordinator.coordinate(writingItemAt: url) { _ in }
    last = container.cachedTreeLocks()
    say("accessed cached=\(last.joined(separator: ","))")
  } else {
    let go = args[6]
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
