import Synchronization
import SystemLayer

/// The container directory a process holds open, reached without the coordination machinery.
///
/// Every module reaches its files beneath the container's descriptor, which the process's share of `.coordination/`
/// holds open for its lifetime (`CoordinationSpace.root`, FileCoordination). Opening that share is FileCoordination's,
/// above this module: it installs `opener` when its initializers first run, and every `GroupContainer` value comes
/// from them, so a module that only needs the container's files (MemoryWarnings) gets the same descriptor without
/// importing the coordinator.
extension GroupContainer {
  /// Opens (once per process) the container's share of `.coordination/` and returns its directory; set by
  /// FileCoordination's initializers.
  ///
  /// The function is held in a class, never as the Mutex's value itself: `withLock` hands its value `inout`, and a
  /// typed-throws function read that way was written back wrapped in two more reabstraction thunks at every call
  /// (Swift 6.3). After 10,000 downloads the agent called it through 13,000 nested frames — 5 MB of stack on each
  /// of its threads, and a cost that grew with every call — and a million calls overflowed the stack
  /// (`ContainerDirectoryTests`).
  package static let opener = Mutex<Opener?>(nil)

  /// How ``directory()`` opens the container: installed once by FileCoordination.
  package final class Opener: Sendable {
    let open: @Sendable (GroupContainer) throws(GroupContainerError) -> ContainerDirectory
    package init(_ open: @escaping @Sendable (GroupContainer) throws(GroupContainerError) -> ContainerDirectory) {
      self.open = open
    }
  }

  /// The container directory, held open by this process: reach container files beneath it (SharedDefaults does).
  package func directory() throws(GroupContainerError) -> ContainerDirectory {
    do {
      if let opener = Self.opener.withLock({ $0 }) { return try opener.open(self) }
    } catch let error
      where error.fileSystemError?.errno == .readOnlyFileSystem || error.fileSystemError?.errno == .permissionDenied
    {
      // A container this process may only read has no coordination space here; its files are still read
      // beneath its descriptor.
    }
    return try GroupContainerError.wrap { () throws(FileSystemError) in try ContainerDirectory(path: path) }
  }
}
