import Foundation
import GroupContainerCore
import SystemLayer

/// The liveness rule: a process is alive while it holds `LOCK_SH` on `processes/<pid>.<start>.lock`.
///
/// Whoever gets `LOCK_EX|LOCK_NB` on that file knows its owner is dead (the kernel drops flocks of dead
/// processes, even after SIGKILL) and may remove its presenters, its inbox and the lock file. The start time in
/// the name means a recycled PID is a different file. Nothing ever waits for a dead process.
extension MessagingSpace {
  /// Whether `process` is alive; a dead one is reaped on the way.
  package func isAlive(_ process: ProcessName) -> Bool {
    if process == me { return true }
    let path = processLockPath(process)
    let fd: SystemFD
    do {
      fd = try SystemFD.open(path, .readOnly)
    } catch {
      if error.errno == .noSuchFileOrDirectory {
        reap(process)
        return false
      }
      // Unreadable (permissions): we cannot prove it dead, so we must not drop its registrations.
      MessagingSpace.logger.warning("cannot check liveness of process \(process): \(error)")
      return true
    }
    // A FIFO or anything else planted under a process's name is no process: drop it (a live process's lock file
    // is always a regular file it created itself).
    guard (try? fd.status())?.kind == .regular else {
      MessagingSpace.logger.error("removing '\(path)': not a regular file, so no process's liveness lock")
      try? root.removeFile(privatePath(path))
      reap(process)
      return false
    }
    guard (try? fd.lock(.exclusive, nonBlocking: true)) == true else { return true }
    reap(process)
    fd.unlock()
    return false
  }

  /// For locks that name their owner by pid and the low 32 bits of its start time (`SharedMemoryLock`): whether a
  /// registered process of that name holds its liveness lock. The flock answer holds across pid namespaces,
  /// where `/proc` may show another process or none; nil when no such process ever registered here.
  package func isAlive(pid: Int32, startTimeLow32: UInt32) -> Bool? {
    let names = (try? FileSystem.listDirectory(processesDirectory)) ?? []
    let matches = names.compactMap { name -> ProcessName? in
      guard name.hasSuffix(".lock"), let process = ProcessName(name.dropLast(5)), process.pid == pid,
        UInt32(truncatingIfNeeded: process.startTime) == startTimeLow32
      else { return nil }
      return process
    }
    guard !matches.isEmpty else { return nil }
    return matches.contains { isAlive($0) }
  }

  /// What a process's liveness lock holds since lock files are removed (Rule 3b, FileCoordination's
  /// LockFileSweep.swift). A build before that left it empty, and takes flocks on lock files without checking that
  /// they were not removed: while such a process lives, no lock file is removed (`olderBuildIsAlive`).
  package static let livenessMarker: [UInt8] = Array("lock files removed 1\n".utf8)

  /// Whether a live process of this container runs a build from before lock files were removed
  /// (`olderBuildProcesses`); true when that cannot be told.
  package func olderBuildIsAlive() -> Bool {
    guard let processes = try? root.openDirectory(CoordinationPaths.processes) else { return true }
    return Self.olderBuildProcesses(in: processes, except: me, first: true).map { !$0.isEmpty } ?? true
  }

  /// The live processes registered in `processes` (a container's `.coordination/processes`) that run a build from
  /// before lock files were removed: their liveness lock is empty (`livenessMarker`). Dead ones do not count and
  /// are not reaped here (a sweep's thread and `groupctl doctor` ask). Nil when it cannot be told: the directory
  /// unreadable, or a liveness lock this process may not open (as in `isAlive`, nothing proves it dead).
  package static func olderBuildProcesses(
    in processes: borrowing SystemFD, except me: ProcessName? = nil, first: Bool = false
  ) -> [ProcessName]? {
    guard let names = try? processes.entries() else { return nil }
    var older: [ProcessName] = []
    for (name, isDirectory) in names where !isDirectory && name.hasSuffix(".lock") {
      guard let process = ProcessName(name.dropLast(5)), process != me else { continue }
      let fd: SystemFD
      do { fd = try processes.open(name, .readOnly) } catch {
        if error.errno == .permissionDenied { return nil }
        continue  // gone since the listing, or no file a process made (a planted link)
      }
      guard let status = try? fd.status(), status.kind == .regular, status.size == 0 else { continue }
      if (try? fd.lock(.exclusive, nonBlocking: true)) == true {
        fd.unlock()  // its owner is dead
        continue
      }
      older.append(process)
      if first { break }
    }
    return older
  }

  /// Removes a dead process's inbox and lock file, then what the parts keep for it (`onReap`: its presenters, its
  /// handler markers; a sweep of its temp files). The cleanups come once the lock file is gone: one that judges
  /// liveness on another thread (the sweep) must not find it still locked by this reaper. Idempotent: several
  /// processes may reap at once.
  func reap(_ process: ProcessName) {
    try? root.removeTree(privatePath(inbox(of: process)))
    try? root.removeFile(privatePath(processLockPath(process)))
    for cleanup in reapers() { cleanup(process) }
    MessagingSpace.logger.debug("reaped dead process \(process)")
  }

  /// A path under `.coordination/` relative to the container (removals go through the container's descriptor).
  package func privatePath(_ absolute: String) -> String { root.relative(absolute) ?? absolute }

  /// Every process registered in this container, reaping the dead.
  package func liveProcesses() -> [ProcessName] {
    let names = (try? FileSystem.listDirectory(processesDirectory)) ?? []
    return names.compactMap { name -> ProcessName? in
      guard name.hasSuffix(".lock"), let process = ProcessName(name.dropLast(5)) else { return nil }
      return isAlive(process) ? process : nil
    }
  }

  /// Sweeps registrations and inboxes left by processes that died.
  package func reapDeadProcesses() {
    _ = liveProcesses()
    for name in (try? FileSystem.listDirectory(inboxDirectory)) ?? [] {
      if let process = ProcessName(name), process != me, !isAlive(process) { reap(process) }
    }
  }
}
