import GroupContainerCore
import Messaging
import SystemLayer

extension GroupContainer {
  /// Whether the writer named in a temp file's name (`AtomicReplace.writer(ofTemporary:)`, `<pid>.<start>`) is
  /// dead by the liveness rule, so its temp file will never be renamed and may be removed. Modules that sweep
  /// their own directories (the image cache's trim) use the same verdict as the container's sweep.
  package func temporaryWriterIsDead(_ writer: Substring) -> Bool {
    guard let space = try? coordinationSpace(), let process = ProcessName(writer), process != space.me else {
      return false
    }
    return !space.isAlive(process)
  }
}

/// Temp files of atomic replaces left by dead writers, judged by the liveness rule (Liveness.swift, Messaging).
extension CoordinationSpace {
  /// How many entries a sweep looks at, at most: opening a container with millions of files stays cheap (the
  /// walk is depth-first from the root, so deep leftovers in a huge container may wait for a smaller one).
  static let sweepBudget = 20_000

  /// Removes temp files of atomic replaces whose writer died before its rename. Temp names carry the writer's
  /// `<pid>.<start>`, judged by the liveness rule. The staging directory, where most are, comes first (whatever the
  /// budget). `processes/` is skipped: a process publishes its liveness lock
  /// there by renaming a temp file, and until then it has no lock to prove it alive. `presenters/` too: its records
  /// are replaced through the staging directory, and its thousands of bucket directories (PresenterRegistry) would
  /// make every process's start walk them.
  func sweepAbandonedTemporaries() {
    var verdicts: [Substring: Bool] = [:]
    let skipped: Set<String> = [CoordinationPaths.processes, CoordinationPaths.presenters]
    let removed = root.sweepTemporaries(first: Self.stagingDirectory, skipping: skipped, budget: Self.sweepBudget) {
      writer in
      if let known = verdicts[writer] { return known }
      guard let process = ProcessName(writer), process != me else { return false }
      let dead = !isAlive(process)
      verdicts[writer] = dead
      return dead
    }
    if removed > 0 { CoordinationSpace.logger.info("removed \(removed) temp files left by dead writers") }
  }
}
