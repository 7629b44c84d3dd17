import Glibc
import Synchronization

/// Named places where a test makes this process die at once (SIGKILL to itself), to check what the other processes
/// recover from a process killed at exactly that point — the windows between two stores that random kills almost
/// never hit. Armed by `GROUPCONTAINER_FAULT_POINT=<name>` in the environment; unset, a point costs one load and one
/// comparison with nil.
///
/// A test hook: compiled only with the package's `TestHooks` trait (`make test`). Without it — every dependent's
/// build — a point is an empty inline function and the environment is never read.
package enum FaultPoint {
  #if GROUPCONTAINER_TEST_HOOKS
    private static let armed: String? = getenv("GROUPCONTAINER_FAULT_POINT").map { String(cString: $0) }
    private static let paused: String? = getenv("GROUPCONTAINER_PAUSE_POINT").map { String(cString: $0) }
    private static let pauseDirectory: String? = getenv("GROUPCONTAINER_PAUSE_DIR").map { String(cString: $0) }
    private static let pausedOnce = Atomic<Bool>(false)
  #endif

  /// Dies here when `name` is the armed point.
  @inline(__always)
  package static func reach(_ name: StaticString) {
    #if GROUPCONTAINER_TEST_HOOKS
      guard let armed else { return }
      if armed == name.description { kill(getpid(), SIGKILL) }
    #endif
  }

  /// Stops here while a test acts, the first time this process reaches the point armed by
  /// `GROUPCONTAINER_PAUSE_POINT` (the directory `GROUPCONTAINER_PAUSE_DIR`): creates the file `<dir>/<name>` and
  /// waits until the test removes it (at most 60 s). For the windows a test must act inside, such as a tool writing
  /// while a file is replaced. Later passes do not stop: the test arranged the one window it watches.
  @inline(__always)
  package static func pause(_ name: StaticString) {
    #if GROUPCONTAINER_TEST_HOOKS
      guard let paused, paused == name.description, let pauseDirectory,
        !pausedOnce.exchange(true, ordering: .relaxed)
      else { return }
      let path = pauseDirectory + "/" + paused
      close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600))
      for _ in 0..<6000 where access(path, F_OK) == 0 { usleep(10_000) }
    #endif
  }

  /// Whether this build has the test hooks (the `TestHooks` trait).
  package static var compiledIn: Bool {
    #if GROUPCONTAINER_TEST_HOOKS
      true
    #else
      false
    #endif
  }
}
