// Helper sub-commands for the watcher's backend (WatcherBackendTests): a watcher started late, stopped, and renames
// into a watched directory by this process.
import Foundation
import Glibc
import HelperCommand
import Synchronization
import SystemLayer

/// Runs `.watchAfterDescriptors`, `.watchThenStop`, `.renameInto`, `.consumeRenames` and `.spin` (HelperCommand.swift
/// says what they
/// print), and exits: before anything opens the container, whose coordination starts the watcher.
func runWatcherMode(_ command: HelperCommand) throws -> Never {
  switch command {
  case .watchAfterDescriptors(let directory, let open, let freeSlot):
    // Descriptors up to number `open` - 1, all in use (copies of /dev/null): the watcher has not started yet.
    var limit = rlimit()
    if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(open + 64) {
      limit.rlim_cur = min(limit.rlim_max, rlim_t(open + 64))
      _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
    }
    let null = try SystemFD.open("/dev/null", [.readOnly, .followSymlink])
    var highest = null.rawValue
    while highest < Int32(open) - 1 {
      highest = dup(null.rawValue)
      guard highest >= 0 else {
        tell("dup failed: errno \(errno)")
        exit(1)
      }
    }
    // Holes a descriptor closed meanwhile by another thread of this process left (seen: one below 1,024), filled.
    while true {
      let fd = dup(null.rawValue)
      guard fd >= 0, fd < Int32(open) else {
        if fd >= 0 { close(fd) }
        break
      }
    }
    if let freeSlot { close(Int32(freeSlot)) }
    let lowestFree = dup(null.rawValue)
    close(lowestFree)
    tell("descriptors \(highest + 1) lowest free \(lowestFree)")
    do {
      try Watcher.shared.start()
    } catch {
      tell("unavailable \(Watcher.shared.unavailableReason ?? "\(error)")")
      exit(0)
    }
    let heard = DispatchSemaphore(value: 0)
    _ = try Watcher.shared.watch(directory) { event in
      if event.name == "created" { heard.signal() }
    }
    tell("watching")
    guard heard.wait(timeout: .now() + 60) == .success else { exit(1) }
    tell("heard created")
    exit(0)

  case .watchThenStop(let directory):
    _ = try Watcher.shared.watch(directory) { _ in }
    tell("watching")
    // No tick handler in this process: the thread waits in `poll` without a timeout, and only its wake-up ends it.
    Watcher.shared.stop()
    tell("stopped")
    do {
      _ = try Watcher.shared.watch(directory) { _ in }
      tell("watched after stop")
    } catch {
      tell("refused after stop")
    }
    exit(0)

  case .renameInto(let directory, let name, let count, let acknowledgements):
    // The temp files are made beside the directory, in a directory nobody watches, and renamed into it.
    let staging = (directory as NSString).deletingLastPathComponent + "/rename-staging-\(getpid())"
    try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
    for i in 0..<count {
      let temp = staging + "/\(i)"
      guard FileManager.default.createFile(atPath: temp, contents: Data("\(i)".utf8)) else { exit(1) }
      guard rename(temp, directory + "/" + name) == 0 else { exit(1) }
      tell("renamed \(i)")
      guard let acknowledgements else { continue }
      // The next rename only once the consumer has seen this one's event (a file it makes), for at most 60 s.
      let deadline = MonotonicClock.nanoseconds() + 60_000_000_000
      while access(acknowledgements + "/\(i)", F_OK) != 0 {
        guard MonotonicClock.nanoseconds() < deadline else {
          tell("no acknowledgement of \(i)")
          exit(1)
        }
        usleep(1_000)
      }
    }
    tell("done")
    exit(0)

  case .consumeRenames(let directory, let name, let count, let acknowledgements):
    try Watcher.shared.start()
    let seen = Mutex(0)
    let finished = DispatchSemaphore(value: 0)
    _ = try Watcher.shared.watch(directory, mask: Watcher.movedTo) { event in
      guard event.name == name else { return }
      let n = seen.withLock { s in
        defer { s += 1 }
        return s
      }
      FileManager.default.createFile(atPath: acknowledgements + "/\(n)", contents: nil)
      if n + 1 == count { finished.signal() }
    }
    tell("watching")
    finished.wait()  // the test's wait for "consumed" is the hang limit; the test kills this process after it
    tell("consumed \(seen.withLock { $0 })")
    exit(0)

  case .spin(let seconds):
    // A busy loop, bounded in time: load for the other processes of a test.
    let end = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
    var x: UInt64 = 0
    while MonotonicClock.nanoseconds() < end { x &+= 1 }
    exit(x == 0 ? 1 : 0)

  default:
    fatalError("not a watcher mode: \(command)")
  }
}

private func tell(_ text: String) {
  FileHandle.standardOutput.write(Data((text + "\n").utf8))
}
