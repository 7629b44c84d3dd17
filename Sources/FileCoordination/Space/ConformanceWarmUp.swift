import Dispatch
import GroupContainerCore
import Messaging

/// The Swift runtime finds a type's `Hashable` conformance by scanning every conformance record the process loaded
/// (~9,800 in `groupctl`), once per type, the first time a dictionary keyed by it grows: its storage type is made
/// from a mangled name, and the name's key must be proven `Hashable`. Three of the framework's key types met that
/// in a new process's first coordinated access — a widget's or a tool's one write — about 0.6 ms of its CPU with 64
/// presenter processes (perf, #37 item 5). They are looked up on a background thread when the process opens its
/// first container, so the access finds them cached; the CPU is the same, spent while the opening goes on.
enum ConformanceWarmUp {
  /// Starts the lookups once per process.
  static func start() { _ = started }

  private static let started: Void = {
    DispatchQueue.global(qos: .utility).async {
      for type in [LockOrder.Key.self, ContainerPath.self, ProcessName.self] as [Any.Type] { _ = isHashable(type) }
    }
  }()

  /// A dynamic cast, which the runtime answers from the conformance cache it fills (not folded away: opaque here).
  @inline(never) private static func isHashable(_ type: Any.Type) -> Bool { type is any Hashable.Type }
}
