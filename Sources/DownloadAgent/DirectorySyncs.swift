import BackgroundDownloads
import Synchronization
import SystemLayer

/// The group commit of the directory fsyncs that make published names durable: files renamed into one directory
/// while an fsync of it runs share the next one, as a database's commits share a log flush.
///
/// Rule: `sync` returns only after an fsync of the directory that *began after* the caller's rename ended — the
/// name then survives a power cut, as with an fsync of its own. An fsync already running when a rename ends may have
/// missed it: the caller waits for the next round, which one of the waiters runs (the leader) for every rename made
/// before it began. A failed fsync fails every caller of its round (their names are not known to be durable).
/// Directories are told apart by device and inode, never by path: a directory replaced under the same name is
/// another directory, and an fsync of the old one makes nothing in the new one durable.
/// *What if you don't*: with an fsync per file, 200 downloads into one directory paid 200 directory fsyncs (most
/// of them waiting for the one before); a round shared without the "began after" rule would report a name durable
/// that an fsync begun just before its rename did not cover.
package final class DirectorySyncs: Sendable {
  /// The agent's: publishes into one directory from any transfer share rounds.
  static let shared = DirectorySyncs()

  /// The fsync of a round (tests put one in that waits, to see who shares which round).
  private let flush: @Sendable (DescriptorBox) throws(FileSystemError) -> Void

  /// Rounds that run `flush` on the directory (by default its fsync, `SystemFD.sync`).
  package init(flush: @escaping @Sendable (DescriptorBox) throws(FileSystemError) -> Void = { try $0.fd.sync() }) {
    self.flush = flush
  }

  private struct Key: Hashable {
    var device: UInt64
    var inode: UInt64
  }

  /// What a waiter is woken with: its round's outcome, or the turn to run the next round.
  private enum Wake {
    case covered(FileSystemError?)
    case lead
  }

  private struct Group {
    /// Tickets handed out (one per rename that asked), whether a round runs, and who waits for one.
    var issued: UInt64 = 0
    var running = false
    var waiters: [(ticket: UInt64, continuation: CheckedContinuation<Wake, Never>)] = []
  }

  private let groups = Mutex<[Key: Group]>([:])

  /// Makes the names renamed into `directory` so far durable (see the type's rule). `directory` stays open until
  /// this returns (it may run the fsync for others too).
  package func sync(_ directory: DescriptorBox) async throws(FileSystemError) {
    let st = try directory.fd.status()
    let key = Key(device: st.device, inode: st.inode)
    // The ticket is taken after the caller's rename, so a round that begins later covers it; with no round running
    // the caller leads one at once.
    let wake = await withCheckedContinuation { (c: CheckedContinuation<Wake, Never>) in
      let leadNow = groups.withLock { g -> Bool in
        var group = g[key] ?? Group()
        group.issued += 1
        defer { g[key] = group }
        guard !group.running else {
          group.waiters.append((group.issued, c))
          return false
        }
        group.running = true
        return true
      }
      if leadNow { c.resume(returning: .lead) }
    }
    if case .covered(let error) = wake {
      if let error { throw error }
      return
    }
    // This round covers every ticket issued until now: each of those renames had ended when it took its ticket.
    let covers = groups.withLock { $0[key]!.issued }
    var failure: FileSystemError?
    let flush = flush
    do { try await offload { () throws(FileSystemError) in try flush(directory) } } catch { failure = error }
    let (covered, next) = groups.withLock {
      g -> ([CheckedContinuation<Wake, Never>], CheckedContinuation<Wake, Never>?) in
      var group = g[key]!
      let covered = group.waiters.filter { $0.ticket <= covers }.map(\.continuation)
      group.waiters.removeAll { $0.ticket <= covers }
      // The first caller left leads the next round (the group stays `running`); with none left the group goes.
      let next = group.waiters.isEmpty ? nil : group.waiters.removeFirst().continuation
      g[key] = next == nil ? nil : group
      return (covered, next)
    }
    for continuation in covered { continuation.resume(returning: .covered(failure)) }
    next?.resume(returning: .lead)
    if let failure { throw failure }
  }

  /// How many callers wait for a round of the directory `directory` (tests).
  package func waiting(in directory: DescriptorBox) -> Int {
    guard let st = try? directory.fd.status() else { return 0 }
    return groups.withLock { $0[Key(device: st.device, inode: st.inode)]?.waiters.count ?? 0 }
  }
}
