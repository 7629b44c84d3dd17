import GroupContainerCore
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
