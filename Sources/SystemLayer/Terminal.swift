import Glibc
import SystemPackage

/// Whether a descriptor is a terminal, and its size: what a command line tool needs to choose between redrawn
/// progress bars and plain lines for a pipe.
package enum Terminal {
  /// Whether `fd` refers to a terminal (not a pipe, file or socket). Any failure (`ENOTTY`, `EBADF`) is "no".
  ///
  /// The corresponding C function is `isatty`.
  package static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

  /// The terminal's width in columns, nil when `fd` is not a terminal or the terminal does not say (0 columns, as
  /// some serial consoles answer).
  ///
  /// The corresponding C function is `ioctl` with `TIOCGWINSZ`.
  package static func columns(_ fd: Int32) -> Int? {
    var size = winsize()
    guard (try? valueOrErrno({ ioctl(fd, UInt(TIOCGWINSZ), &size) }).get("ioctl(TIOCGWINSZ)", "")) != nil,
      size.ws_col > 0
    else { return nil }
    return Int(size.ws_col)
  }
}
