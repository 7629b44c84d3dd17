import Foundation
import Glibc
import Synchronization

/// The write end of the self-pipe; set once in `install()`, before any handler can run.
nonisolated(unsafe) private var interruptPipe: Int32 = -1

/// SIGINT and SIGTERM through the self-pipe trick: the handler only writes the signal number to a pipe (async-signal
/// safe, whichever thread the kernel picks), and one thread reads it, runs the registered cleanup and exits.
/// (A Dispatch signal source was not reliable here: a signal caught by libdispatch's handler sometimes never reached
/// the source, and the process stayed up; blocking + sigwait fails too, as new threads start with an empty mask.)
package enum Interrupts {
  private static let cleanup = Mutex<(@Sendable () -> Void)?>(nil)

  package static func install() {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return }
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    interruptPipe = fds[1]
    let handler: @convention(c) (Int32) -> Void = { signo in
      var byte = UInt8(truncatingIfNeeded: signo)
      _ = write(interruptPipe, &byte, 1)
    }
    // A parent may have blocked or ignored them (a script's background job ignores SIGINT).
    var unblock = sigset_t()
    sigemptyset(&unblock)
    sigaddset(&unblock, SIGINT)
    sigaddset(&unblock, SIGTERM)
    pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    signal(SIGINT, handler)
    signal(SIGTERM, handler)
    let reader = fds[0]
    Thread.detachNewThread {
      var byte: UInt8 = 0
      while read(reader, &byte, 1) < 0 && errno == EINTR {}
      if let stop = cleanup.withLock({ $0 }) {
        stop()
        exit(0)  // the command's normal end ("until interrupted")
      }
      exit(128 + Int32(byte))
    }
  }

  /// For commands that run until interrupted: `stop` runs on SIGINT/SIGTERM, then the process exits 0.
  package static func onInterrupt(_ stop: @escaping @Sendable () -> Void) {
    cleanup.withLock { $0 = stop }
  }
}
