import Glibc

/// Named places where a test makes this process die at once (SIGKILL to itself), to check what the other processes
/// recover from a process killed at exactly that point — the windows between two stores that random kills almost
/// never hit. Armed by `GROUPCONTAINER_FAULT_POINT=<name>` in the environment; unset, a point costs one load and one
/// comparison with nil.
package enum FaultPoint {
  private static let armed: String? = getenv("GROUPCONTAINER_FAULT_POINT").map { String(cString: $0) }

  /// Dies here when `name` is the armed point.
  @inline(__always)
  package static func reach(_ name: StaticString) {
    guard let armed else { return }
    if armed == name.description { kill(getpid(), SIGKILL) }
  }
}
