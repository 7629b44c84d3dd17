import GroupContainerCore
import SystemLayer

/// Which form a session's events are queued in, decided by what the session's reader announced: format 1, a file per
/// event; format 2, a finished download's two events in one file (the `finished` event's, holding its completion);
/// format 3, the events of the downloads one group commit finished in one *batch file* per session
/// (`DownloadRecordFormat.eventFiles(batch:format:)`), which the session removes once it handled every event in it.
///
/// Rule: the agent queues a session's events in the form of format N only when, as it writes them, the session's
/// `attach.lock` is held (a process is attached) and that process announced in it that it reads format N or later
/// (`<pid>\nevents <N>\n`). Otherwise — nobody attached (the app may come back at any version: a relaunch, the
/// user), an attached process that announces nothing (a version before 2) or anything unreadable — format 1: a file
/// per event.
/// *What if you don't*: a session process of a version before 2 reads a combined file as the `finished` event alone,
/// delivers `didFinishDownloadingTo`, removes the file, and never delivers that task's `didCompleteWithError(nil)`:
/// an app waiting for the completion waits forever. One of version 2 finds a batch file named for none of the events
/// it reads in it, removes it as damaged, and never hears of the other downloads in it.
///
/// The announcement: the attached process writes its pid and `events <version>` into `attach.lock` once it holds it,
/// and empties the file before it lets go of it (a clean detach), so a process that attaches next is never judged by
/// its predecessor's line. Versions meet as follows:
/// - an agent before this rule ignores the announcement: it reads `attach.lock` only for a pid in messages, from the
///   first line (`DownloadStore.holderPID`), and queues a file per event whatever the session reads; an agent of
///   format 2 combines for a reader of 2 or 3, and never writes a batch file;
/// - a session before this rule writes its pid alone: a newer agent queues a file per event for it;
/// - a session of any version reads the files written for it under the rule.
/// Replayed events (a power cut lost the files of a commit, `replayCommits`) are written in format 2 at most: a batch
/// file named for its first event, written again for a subset of its events, would replace one still holding others.
///
/// What the rule cannot see: events queued in a newer form while a process of that format was attached and not yet
/// handled when it went, then read by a process of an older version attaching next (the app downgraded with events
/// waiting): those events are missed. And a process killed (its line left behind) then followed by an older one:
/// between the older one's flock and its rewrite of the file (one system call), the agent could take the stale line
/// for the new holder's. Both need a downgrade with events waiting; nothing else loses a callback.
package enum EventFormatHandshake {
  /// The event format this build's sessions read: 3, batch files.
  package static let currentVersion = 3

  #if GROUPCONTAINER_TEST_HOOKS
    /// Set to "1" or "2" in a process's environment, its sessions announce and read that event format, as a session
    /// of a version before the one-file form (ignoring `completion`) or before batch files (reading a batch file's
    /// first unit alone). A test hook: read only with the `TestHooks` trait.
    package static let readVersionVariable = "GROUPCONTAINER_EVENTS_READ_VERSION"
    /// The event format this process's sessions read.
    package static var readVersion: Int {
      Environment.value(readVersionVariable).flatMap { Int($0) }.map { min(max($0, 1), currentVersion) }
        ?? currentVersion
    }
  #else
    /// The event format this process's sessions read.
    package static let readVersion = currentVersion
  #endif

  /// What an attached process writes into `attach.lock`: its pid on the first line (all an older reader takes),
  /// then the event format it reads.
  package static func announcement(pid: Int32, readVersion: Int) -> [UInt8] {
    Array("\(pid)\nevents \(readVersion)\n".utf8)
  }

  /// The event format announced in `attach.lock`'s bytes: 1 when no line says `events <n>` (an older session, an
  /// emptied file, damage).
  package static func announcedVersion(_ bytes: [UInt8]) -> Int {
    for line in String(decoding: bytes.prefix(64), as: UTF8.self).split(separator: "\n").dropFirst() {
      let words = line.split(separator: " ")
      if words.count == 2, words[0] == "events", let version = Int(words[1]), version >= 1 { return version }
    }
    return 1
  }
}

extension DownloadStore {
  /// Writes this process's announcement into the `attach.lock` it holds (EventFormatHandshake).
  package func announceAttached(_ fd: borrowing SystemFD) {
    try? fd.truncate(to: 0)
    try? fd.writeAll(
      EventFormatHandshake.announcement(pid: CurrentProcess.id, readVersion: EventFormatHandshake.readVersion))
  }

  /// Empties the `attach.lock` this process holds, before it lets go of it (EventFormatHandshake).
  func withdrawAnnouncement(_ fd: borrowing SystemFD) {
    try? fd.truncate(to: 0)
  }

  /// The event format the agent may write for session `sid` now (EventFormatHandshake): the attached process's
  /// announcement, at most this build's; 1 when nobody is attached. The lock is checked first: a holder empties the
  /// file before it lets go, so a line read after the check is the holder's own (or a killed predecessor's: see the
  /// rule).
  package func eventFormat(for sid: String) -> Int {
    let path = Self.attachLockPath(sid)
    guard isHeld(path) else { return 1 }
    return min(read(path) { EventFormatHandshake.announcedVersion($0) } ?? 1, EventFormatHandshake.currentVersion)
  }
}
