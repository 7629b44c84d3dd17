import BackgroundDownloads
import Synchronization
import SystemLayer

/// The agent's hold on `agent.lock`: an exclusive flock that counts only while the name `agent.lock` leads to the
/// locked file (same device and inode). Whoever removes the file (`rm`) lets the next agent create and lock a new
/// one, and both would run — two writers of every status, two transfers into one partial. So the lock is kept
/// only once the name is seen to lead to it after locking (a file removed between open and flock is given up),
/// and the holder looks again at every tick of its loop and before every status write (`DownloadAgent`): the
/// agent whose file lost its name takes the name again when nobody holds it, or stops writing and exits.
final class AgentLock: Sendable {
  private let store: DownloadStore
  /// The locked file and its identity (checked often: read once); nil while not held (before `acquire`, after
  /// `release`).
  private let held = Mutex<Held?>(nil)
  private struct Held {
    var fd: DescriptorBox
    var identity: FileIdentity
  }
  private struct FileIdentity: Equatable {
    var device: UInt64
    var inode: UInt64
  }
  private static let path = DownloadStore.agentLockPath

  init(store: DownloadStore) { self.store = store }

  /// What holding the lock looks like now.
  enum Check {
    /// Held, and the name leads to the locked file.
    case named
    /// Held, but the name leads elsewhere or nowhere: another agent may hold the file the name leads to.
    case lost
    /// Not held.
    case released
  }

  /// Takes the lock, trying for about a second (a session probing it holds it shared for a moment: only a lock held
  /// for a whole second is another agent). False when another agent holds it; throws when it cannot be opened.
  func acquire() async throws(DownloadError) -> Bool {
    var tries = 0
    while tries < 50 {
      switch try attempt() {
      case .locked: return true
      case .renamed: continue  // the file lost its name between open and flock: open the name again
      case .busy:
        tries += 1
        try? await Task.sleep(for: .milliseconds(20))
      }
    }
    return false
  }

  /// Whether the lock is held and still named `agent.lock`.
  func check() -> Check {
    held.withLock { held in
      guard let held else { return .released }
      return Self.namedIdentity(store) == held.identity ? .named : .lost
    }
  }

  /// What one try to take the name again found (`retake`).
  enum Retake {
    /// This process holds the named lock again.
    case locked
    /// Another agent holds the file the name leads to (the old file is kept locked: a moment later the caller stops).
    case heldElsewhere
    /// The name could not be opened or kept (its directory removed with the container by an `rm -rf` under way, no
    /// descriptor left, the name moved again meanwhile): nobody is known to hold it — not a deposition.
    case unavailable
  }

  /// After `.lost`: takes the name again with one try (the file the name leads to now, created if missing).
  func retake() -> Retake {
    switch try? attempt() {
    case .locked: .locked
    case .busy: .heldElsewhere
    case .renamed, nil: .unavailable
    }
  }

  /// Unlocks and closes: another agent may take it from now on.
  func release() {
    held.withLock { held in
      held?.fd.fd.unlock()
      held = nil  // closes it
    }
  }

  private enum Attempt { case locked, busy, renamed }

  /// One non-blocking try: open (creating) the name, flock it, keep it only if the name still leads to it.
  private func attempt() throws(DownloadError) -> Attempt {
    let fd = try store.openLock(Self.path)
    guard (try? fd.lock(.exclusive, nonBlocking: true)) == true else { return .busy }
    guard let mine = try? fd.status(), Self.namedIdentity(store) == FileIdentity(device: mine.device, inode: mine.inode)
    else { return .renamed }
    store.writeHolder(fd)
    let lock = Held(fd: DescriptorBox(fd), identity: FileIdentity(device: mine.device, inode: mine.inode))
    held.withLock { $0 = lock }  // closes the one it replaces
    return .locked
  }

  /// The file the name `agent.lock` leads to (a symlink at the name is another inode); nil when there is none. One
  /// `fstatat` from the container's descriptor: a check of identity, not a use, so a link on the way cannot mislead
  /// it (a file reached through one is still compared by device and inode) — no `openat2` of the directory first,
  /// which cost two more calls at each of the several checks a download makes.
  private static func namedIdentity(_ store: DownloadStore) -> FileIdentity? {
    guard let named = (try? store.root.fd.status(of: path)) ?? nil else { return nil }
    return FileIdentity(device: named.device, inode: named.inode)
  }
}
