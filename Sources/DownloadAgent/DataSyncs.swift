import Synchronization
import SystemLayer

/// The group commit of the fsyncs that make finished downloads' bytes durable before their names point at them:
/// files that finish while a round runs wait for the next, which flushes them together — one `syncfs` of their file
/// system when `fileSystemFrom` or more wait (what `curl --parallel` followed by `sync -f` pays), else an fsync each,
/// side by side.
///
/// Rule: `sync` returns only after a flush that *began after* the caller asked covered its file (its own fsync, or
/// a `syncfs` of its file system) — its bytes are then on the device, as with an fsync of its own. A failed flush
/// fails every caller of its round: none of their files is known to be durable.
/// A `syncfs` reports the writeback errors of its file system since the descriptor it is called on was opened, so a
/// round calls it on the descriptor opened first (`opened`): every other file of the round was written after that,
/// and a failed write-back of any of them fails the round as its own fsync would have failed. Files are grouped by
/// device: a `syncfs` covers one file system only.
/// *What if you don't*: 200 downloads finishing together paid 200 fsyncs (each a journal commit's share and a
/// device flush); a `syncfs` on a descriptor opened after a file was written could miss that file's failed
/// write-back and report it durable.
package final class DataSyncs: Sendable {
  /// The agent's: every transfer's publish shares rounds.
  static let shared = DataSyncs()

  /// How many files waiting make a round one `syncfs` (fewer: an fsync each). Above 1: a lone file does not pay for
  /// the rest of the file system's dirty pages.
  let fileSystemFrom: Int
  /// The flushes (tests put in some that wait or fail, to see who shares which round).
  private let syncFile: @Sendable (borrowing SystemFD) throws(FileSystemError) -> Void
  private let syncFileSystem: @Sendable (borrowing SystemFD) throws(FileSystemError) -> Void

  /// Rounds flushing with `syncFile` (by default `fsync`) or, from `fileSystemFrom` files on, one `syncFileSystem`
  /// (by default `syncfs`).
  package init(
    fileSystemFrom: Int = 4,
    syncFile: @escaping @Sendable (borrowing SystemFD) throws(FileSystemError) -> Void = { try $0.sync() },
    syncFileSystem: @escaping @Sendable (borrowing SystemFD) throws(FileSystemError) -> Void = {
      try $0.syncFileSystem()
    }
  ) {
    self.fileSystemFrom = max(2, fileSystemFrom)
    self.syncFile = syncFile
    self.syncFileSystem = syncFileSystem
  }

  /// A file waiting for a round: its descriptor (the caller keeps it open until `sync` returns) and when it was
  /// opened (`MonotonicClock`).
  private struct Waiter {
    var ticket: UInt64
    var rawValue: Int32
    var path: String
    var opened: UInt64
    var continuation: CheckedContinuation<Wake, Never>
  }

  /// What a waiter is woken with: its round's outcome, or the turn to run the next round (for all who wait then).
  private enum Wake {
    case covered(FileSystemError?)
    case lead
  }

  private struct Group {
    var issued: UInt64 = 0
    var running = false
    var waiting: [Waiter] = []
  }

  private let groups = Mutex<[UInt64: Group]>([:])

  /// Makes the bytes written to `file` so far durable (see the type's rule). `opened` is when `file` was opened
  /// (`MonotonicClock.nanoseconds()` taken before the open); `file` stays open until this returns.
  package func sync(_ file: borrowing SystemFD, opened: UInt64) async throws(FileSystemError) {
    let device = try file.status().device
    let rawValue = file.rawValue
    let path = file.path
    let ticket = Mutex<UInt64>(0)
    let wake = await withCheckedContinuation { (c: CheckedContinuation<Wake, Never>) in
      let leadNow = groups.withLock { g -> Bool in
        var group = g[device] ?? Group()
        defer { g[device] = group }
        group.issued += 1
        ticket.withLock { $0 = group.issued }
        group.waiting.append(
          Waiter(ticket: group.issued, rawValue: rawValue, path: path, opened: opened, continuation: c))
        guard !group.running else { return false }
        group.running = true
        return true
      }
      if leadNow { c.resume(returning: .lead) }
    }
    let mine = ticket.withLock { $0 }
    if case .covered(let error) = wake {
      if let error { throw error }
      return
    }
    // The round: everyone waiting now (the leader among them), each of whom asked before it begins.
    let round = groups.withLock { g -> [Waiter] in
      let round = g[device]!.waiting
      g[device]!.waiting = []
      return round
    }
    let failure = await flush(round)
    let next = groups.withLock { g -> CheckedContinuation<Wake, Never>? in
      // The first of those who came meanwhile leads the next round (the group stays `running`); none: it goes.
      guard let first = g[device]?.waiting.first else {
        g[device] = nil
        return nil
      }
      return first.continuation
    }
    for waiter in round where waiter.ticket != mine {
      waiter.continuation.resume(returning: .covered(failure))
    }
    next?.resume(returning: .lead)
    if let failure { throw failure }
  }

  /// One round's flush: a `syncfs` on the descriptor opened first, or an fsync of each file, side by side.
  private func flush(_ round: [Waiter]) async -> FileSystemError? {
    if round.count >= fileSystemFrom {
      let first = round.min { $0.opened < $1.opened }!
      let syncFileSystem = syncFileSystem
      do throws(FileSystemError) {
        try await offload { () throws(FileSystemError) in
          try syncFileSystem(SystemFD.view(first.rawValue, path: first.path))
        }
        return nil
      } catch { return error }
    }
    let syncFile = syncFile
    return await withTaskGroup(of: FileSystemError?.self) { group in
      for waiter in round {
        group.addTask { () -> FileSystemError? in
          do throws(FileSystemError) {
            try await offload { () throws(FileSystemError) in
              try syncFile(SystemFD.view(waiter.rawValue, path: waiter.path))
            }
            return nil
          } catch { return error }
        }
      }
      var failure: FileSystemError?
      for await error in group { failure = failure ?? error }
      return failure
    }
  }

  /// How many files wait for a round on `device` (tests).
  package func waiting(onDevice device: UInt64) -> Int {
    groups.withLock { $0[device]?.waiting.count ?? 0 }
  }
}
