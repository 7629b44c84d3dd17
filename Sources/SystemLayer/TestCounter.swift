import Synchronization

/// A count of events only tests read (which path ran, how often a file was loaded). A test hook: with the package's
/// `TestHooks` trait (`make test`) an atomic; without it — every dependent's build — `add` is empty and `value` 0.
package final class TestCounter: Sendable {
  #if GROUPCONTAINER_TEST_HOOKS
    private let count = Atomic<Int>(0)
  #endif

  package init() {}

  @inline(__always)
  package func add() {
    #if GROUPCONTAINER_TEST_HOOKS
      count.add(1, ordering: .relaxed)
    #endif
  }

  package var value: Int {
    #if GROUPCONTAINER_TEST_HOOKS
      count.load(ordering: .relaxed)
    #else
      0
    #endif
  }
}
