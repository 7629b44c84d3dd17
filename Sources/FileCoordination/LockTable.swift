import Foundation
import SystemLayer

/// Who holds a lock inside this process: a coordinator instance. Accesses of one owner never block each other
/// (Apple: the same instance never blocks itself); a nested access by another coordinator made with the same
/// presenter borrows the outer access's owner (FileCoordinator.swift, `nestingOwners`).
enum LockOwner: Hashable, Sendable {
  case coordinator(UInt64)
}

/// The in-process table on top of flock.
///
/// flock belongs to the open file description, so two threads of one process using one descriptor would both
/// "hold" it. This table keeps one descriptor per lock file and reader/writer counts per owner, and takes the
/// flock itself only on the first hold and drops it on the last release.
final class LockTable: @unchecked Sendable {  // every field is guarded by `condition`
  /// A class, so an access updates it in place: one dictionary lookup per lock and no copy of `holders`.
  private final class Entry {
    var fd: SystemFD?
    var osMode: FlockMode?
    var holders: [LockOwner: (mode: FlockMode, count: Int)] = [:]
    /// A thread is taking the flock for this entry; others wait for it to finish.
    var busy = false
  }

  /// `.coordination/locks`, opened beneath the container once (again after the container was removed: `rebind`):
  /// lock files are created relative to it. Guarded by `condition`.
  private var directory: SystemFD
  private let fileMode: mode_t
  private let condition = NSCondition()
  private var entries: [LockOrder.Key: Entry] = [:]
  /// Idle descriptors beyond this many are closed (an idle lock file holds no lock, so closing is safe).
  private let idleDescriptorLimit = 256

  init(directory: SystemFD, fileMode: mode_t) {
    self.directory = directory
    self.fileMode = fileMode
  }

  /// Takes every lock of `plan` (already in lock order) for `owner`; on failure releases what it took.
  func acquire(
    _ plan: [LockOrder.Request], owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) -> [LockOrder.Request] {
    var taken: [LockOrder.Request] = []
    do {
      for request in plan {
        try acquire(request, owner: owner, isCancelled: isCancelled)
        taken.append(request)
      }
    } catch {
      release(taken, owner: owner)
      throw error
    }
    return taken
  }

  func release(_ held: [LockOrder.Request], owner: LockOwner) {
    condition.lock()
    defer {
      condition.broadcast()
      condition.unlock()
    }
    for request in held.reversed() {
      guard let entry = entries[request.key], var hold = entry.holders[owner] else { continue }
      hold.count -= 1
      entry.holders[owner] = hold.count > 0 ? hold : nil
      if entry.holders.isEmpty, entry.osMode != nil {
        entry.fd?.unlock()
        entry.osMode = nil
      }
    }
    trimIdleDescriptors()
  }

  private func acquire(
    _ request: LockOrder.Request, owner: LockOwner, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) {
    let key = request.key
    let mode = request.mode
    condition.lock()
    while true {
      if isCancelled() {
        condition.unlock()
        throw .cancelled
      }
      let entry: Entry
      if let known = entries[key] {
        entry = known
      } else {
        entry = Entry()
        entries[key] = entry
      }
      if entry.busy {
        _ = condition.wait(until: Date(timeIntervalSinceNow: 0.05))
        continue
      }
      if let held = entry.holders[owner] {
        guard held.mode == .exclusive || mode == .shared else {
          condition.unlock()
          throw .lockUpgrade(key.path.string)
        }
        entry.holders[owner] = (held.mode, held.count + 1)
        condition.unlock()
        return
      }
      let conflict =
        mode == .exclusive ? !entry.holders.isEmpty : entry.holders.values.contains { $0.mode == .exclusive }
      if conflict {
        _ = condition.wait(until: Date(timeIntervalSinceNow: 0.05))
        continue
      }
      if let os = entry.osMode, os == .exclusive || mode == .shared {
        entry.holders[owner] = (mode, 1)
        condition.unlock()
        return
      }
      // Nobody in this process holds it: take the flock, outside the table's lock.
      // `busy` keeps the entry in the table (trimming skips it) and everyone else off it until we are back.
      entry.busy = true
      var fd = entry.fd  // read under the lock: `entry` is shared
      condition.unlock()
      let result: Result<SystemFD, FileCoordinatorError>
      do {
        if fd == nil { fd = try openLockFile(key) }
        try Self.flock(fd!, mode, isCancelled: isCancelled)
        result = .success(fd!)
      } catch {
        result = .failure(error)
      }
      condition.lock()
      entry.busy = false
      entry.fd = fd
      switch result {
      case .success:
        entry.osMode = mode
        entry.holders[owner] = (mode, 1)
        condition.broadcast()
        condition.unlock()
        return
      case .failure(let error):
        condition.broadcast()
        condition.unlock()
        throw error
      }
    }
  }

  /// Polls with LOCK_NB and a growing pause, so `cancel()` can stop a waiting access (a blocking flock cannot
  /// be interrupted). The pause stays ≤ 1 ms: a released lock is noticed quickly.
  private static func flock(
    _ fd: SystemFD, _ mode: FlockMode, isCancelled: @Sendable () -> Bool
  ) throws(FileCoordinatorError) {
    var pause: UInt64 = 20_000
    var spins = 0
    while true {
      let got = try FileCoordinatorError.wrap { () throws(FileSystemError) in try fd.lock(mode, nonBlocking: true) }
      if got { return }
      if isCancelled() { throw .cancelled }
      if spins < 10 {
        spins += 1
        sched_yield()
        continue
      }
      MonotonicClock.sleep(nanoseconds: pause)
      pause = min(pause * 2, 1_000_000)
    }
  }

  /// After the container was removed and made again: lock files are created in the new `locks` directory, and the
  /// idle descriptors of deleted lock files are dropped (a flock on a deleted file excludes no one). Locks held now
  /// stay on their old files until released.
  func rebind(directory fresh: SystemFD) {
    condition.lock()
    defer { condition.unlock() }
    let old = directory
    directory = fresh
    for (key, entry) in entries where entry.holders.isEmpty && !entry.busy {
      entry.fd?.close()
      entries[key] = nil
    }
    // A thread may be opening a lock file through the old descriptor right now (outside `condition`): keep it.
    _ = old
  }

  private func openLockFile(_ key: LockOrder.Key) throws(FileCoordinatorError) -> SystemFD {
    let name = key.fileName
    let directory = condition.withLock { self.directory }
    return try FileCoordinatorError.wrap { () throws(FileSystemError) -> SystemFD in
      do throws(FileSystemError) {
        let fd = try directory.open(name, [.readWrite, .exclusiveCreate], mode: fileMode)
        try fd.setPermissions(fileMode)
        // The path inside is for `groupctl status` (lock files are named by hash).
        try fd.writeAll(Array("\(key.kind == .tree ? "tree" : "item") \(key.path.string)\n".utf8))
        return fd
      } catch {
        guard error.errno == .fileExists else { throw error }
        let fd = try directory.open(name, .readWrite)
        // A planted FIFO or device is not ours to lock, nor to delete (another process may hold it already).
        guard (try? fd.status())?.kind == .regular else {
          fd.close()
          throw FileSystemError(
            "open lock file of '\(key.path)' (it is not a regular file: remove it)", fd.path, .invalidArgument)
        }
        return fd
      }
    }
  }

  /// Called with `condition` held.
  private func trimIdleDescriptors() {
    guard entries.count > idleDescriptorLimit else { return }
    for (key, entry) in entries where entry.holders.isEmpty && !entry.busy {
      entry.fd?.close()
      entries[key] = nil
      if entries.count <= idleDescriptorLimit / 2 { break }
    }
  }

  /// What this process holds, for status and tests.
  func held() -> [(path: ContainerPath, kind: LockOrder.Kind, mode: FlockMode)] {
    condition.lock()
    defer { condition.unlock() }
    return entries.compactMap { key, entry in entry.osMode.map { (key.path, key.kind, $0) } }
  }
}
