import Glibc
import Logging

extension SystemFD {
  private static let logger = Logger(label: "GroupContainer.SystemFD")

  /// Closes a descriptor this process owns; the one place that calls `close` on one.
  ///
  /// `EBADF` means the number was not open: someone closed it already, and a second close could as well have closed
  /// whoever got the number since — another thread's file, or a lock file whose flock silently goes. That is a
  /// programming error: it traps in debug builds (as swift-nio does) and is logged in release builds, where the
  /// descriptor is gone either way. `EINTR` is not retried: on Linux the descriptor is already released. The
  /// corresponding C function is `close`.
  static func closeOwned(_ rawValue: Int32, path: @autoclosure () -> String) {
    guard Glibc.close(rawValue) != 0 else { return }
    let failure = errno
    guard failure == EBADF else { return }
    assertionFailure("close(\(rawValue)) of '\(path())' failed with EBADF: the descriptor was closed elsewhere")
    logger.error(
      "close failed with EBADF: the descriptor was closed elsewhere",
      metadata: ["descriptor": "\(rawValue)", "path": "\(path())"])
  }
}

/// An owned descriptor where a Copyable value is needed (an Array, a Dictionary, a Mutex's list): it closes when
/// the last reference goes.
package final class DescriptorBox: Sendable {
  /// The descriptor, owned by the box.
  package let fd: SystemFD

  /// Takes ownership of `fd`.
  package init(_ fd: consuming SystemFD) { self.fd = fd }
}

extension Optional where Wrapped == SystemFD {
  /// The raw descriptor, or -1 for none (what `posix_spawn`'s file actions take), read without consuming: optional
  /// chaining on a borrowed noncopyable optional would.
  package var rawValueOrNone: Int32 {
    switch self {
    case .some(let fd): fd.rawValue
    case .none: -1
    }
  }

  /// A view of the descriptor, if any (see `SystemFD.borrowedView`).
  package var borrowedView: SystemFD? {
    switch self {
    case .some(let fd): fd.borrowedView
    case .none: nil
    }
  }
}
