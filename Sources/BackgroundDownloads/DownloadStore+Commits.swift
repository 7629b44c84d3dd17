import FileCoordination
import GroupContainerCore
import Logging
import SystemLayer

/// The agent's group commits (`commits/<seq>.commit`, `CommitRecord`): a database's group commit for task outcomes.
///
/// Rule: nothing a session, an observer or a tool can see says "finished" before the commit that holds it is
/// durable. A commit file is written with the full power-loss sequence (fsync, rename, directory fsync) — two fsyncs
/// for a whole batch — and only then are the visible files (events, then the final status) written, without fsync.
/// A kill leaves them for the agent's next start to finish; a power cut may lose them, and the next start writes
/// them again from the commit (`replayCommits`).
/// *What if you don't*: a client told of a completion (an event, a final status) could find, after a power cut, no
/// trace of it — the event gone, the task waiting again and downloaded a second time.
///
/// A commit file stays while any task it names is in the container (the agent removes it once it forgot them all).
extension DownloadStore {
  static let commitsDirectory = directory + "/commits"

  /// Makes `record` durable: one file, fsynced, renamed into `commits/`, then the directory fsynced.
  package func commit(_ record: CommitRecord) throws(DownloadError) {
    let bytes = DownloadRecordFormat.encode(record)
    let path = Self.commitsDirectory + "/" + record.fileName
    try Self.system { () throws(FileSystemError) in
      // Mostly `commits/` is there, no link on the way: written through one directory descriptor. Otherwise it is
      // made (a link in its place refused) and the replace resolves the path itself.
      if try root.replaceFileIfNoSymbolicLink(path, with: bytes, mode: fileMode, durability: .powerLoss) { return }
      try root.makeDirectory(Self.commitsDirectory, mode: directoryMode)
      try root.replaceFile(path, with: bytes, mode: fileMode, durability: .powerLoss)
    }
  }

  /// Writes the visible files of committed finals: each task's events, then its final status (which says they were
  /// queued), without fsync (the commit is the durable copy), then wakes sessions and observers once. A session's
  /// events go in one batch file when its reader reads them (EventFormatHandshake), unless `batching` is false (a
  /// replay: see the rule).
  package func materialize(_ finals: [CommitRecord.Final], batching: Bool = true) throws(DownloadError) {
    var bySession: [String: [CommitRecord.Final]] = [:]
    for final in finals { bySession[final.session, default: []].append(final) }
    for (sid, finals) in bySession {
      // The session's directories are made only when the events directory cannot be opened with no link on the way.
      var existing: DescriptorBox?
      if let fd = root.openDirectoryIfNoSymbolicLink(Self.eventsPath(sid)) { existing = DescriptorBox(fd) }
      if existing == nil { try makeSessionDirectories(sid) }
      try Self.system { () throws(FileSystemError) in
        let events: DescriptorBox
        if let existing {
          events = existing
        } else {
          events = DescriptorBox(try root.openDirectory(Self.eventsPath(sid)))
        }
        // Asked once per session and commit: a batch's events are written within milliseconds.
        let format = batching ? eventFormat(for: sid) : min(eventFormat(for: sid), 2)
        for file in DownloadRecordFormat.eventFiles(batch: finals.map(\.events), format: format) {
          try AtomicReplace.write(file.bytes, in: events.fd, name: file.name, mode: fileMode, durability: .processCrash)
        }
      }
    }
    try Self.system { () throws(FileSystemError) in
      let tasks = try root.openDirectory(Self.tasksDirectory)
      for final in finals {
        try replacingPlantedDirectory(statusOf: final.id) { () throws(FileSystemError) in
          try AtomicReplace.write(
            DownloadRecordFormat.encode(final.status), in: tasks, name: "\(final.id).status", mode: fileMode,
            durability: .processCrash)
        }
      }
    }
    updates.post()
  }

  /// The commits in the container, oldest first; a damaged one is logged and skipped (kept for inspection).
  package func commits() -> [CommitRecord] {
    var named: [(sequence: UInt64, name: String)] = []
    for name in names(in: Self.commitsDirectory) {
      if let sequence = CommitRecord.sequence(ofFileName: name) { named.append((sequence, name)) }
    }
    named.sort { $0.sequence < $1.sequence }
    var records: [CommitRecord] = []
    for (sequence, name) in named {
      let path = Self.commitsDirectory + "/" + name
      let bytes: [UInt8]
      do { bytes = try root.readFile(path, limit: DownloadRecordFormat.maxCommitBytes).0 } catch {
        Self.logger.error("cannot read the commit '\(path)': \(error)")
        continue
      }
      do throws(DownloadRecordFormat.Invalid) {
        let record = try DownloadRecordFormat.decodeCommit(bytes)
        guard record.sequence == sequence else { throw DownloadRecordFormat.Invalid("it holds another sequence") }
        records.append(record)
      } catch {
        Self.logger.error("damaged commit '\(path)': \(error.reason)")
      }
    }
    return records
  }

  /// Removes a commit whose tasks are all forgotten.
  package func removeCommit(_ sequence: UInt64) {
    try? root.removeFile(Self.commitsDirectory + "/" + CommitRecord.fileName(sequence))
  }

  /// Writes a committed request again when its file is missing or damaged (a power cut after the session's write,
  /// which has no fsync). Returns whether it wrote.
  package func restore(_ request: TaskRequest) -> Bool {
    guard read(Self.taskPath(request.id, "task"), DownloadRecordFormat.decodeRequest) != request else { return false }
    do {
      try Self.system { () throws(FileSystemError) in
        try root.replaceFile(
          Self.taskPath(request.id, "task"), with: DownloadRecordFormat.encode(request), mode: fileMode,
          durability: .processCrash)
      }
      return true
    } catch {
      Self.logger.error("cannot restore the request of task \(request.id): \(error)")
      return false
    }
  }
}
