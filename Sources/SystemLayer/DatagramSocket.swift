import CSystemShims
import Glibc
import SystemPackage

/// A Unix datagram socket: how a process's inbox takes coordination messages without a file per message
/// (MessageProtocol.swift). One datagram is one message, delivered whole and in send order; the kernel queues at
/// most `net.unix.max_dgram_qlen` of them per receiver (10 by default), so a full queue is an answer the sender
/// must handle (`send` says so), never a block.
///
/// The receiver binds one in its inbox directory; a sender sends to that socket file (`send(_:toSocketFile:)`) or
/// connects to it, opened beneath the container without following any link (`ContainerDirectory.openSocketFile`).
/// Closed when the last reference goes: a sender may still be sending on a socket another thread dropped from its
/// cache.
package final class DatagramSocket: Sendable {
  package let fd: Int32
  /// What it is bound at or connected to, for errors.
  package let path: String

  private init(fd: Int32, path: String) {
    self.fd = fd
    self.path = path
  }

  deinit { _ = Glibc.close(fd) }

  /// Binds a new socket at `name` in `directory`, readable and writable by `mode` (a stale socket file there is
  /// replaced). The corresponding C functions are `socket`, `bind` and `chmod`.
  package static func bind(_ name: String, in directory: borrowing SystemFD, mode: mode_t) throws(FileSystemError)
    -> DatagramSocket
  {
    let fd = try name.withCString { name in valueOrErrno { gc_dgram_bind(directory.rawValue, name, mode) } }
      .get("bind", directory.path + "/" + name)
    return DatagramSocket(fd: fd, path: directory.path + "/" + name)
  }

  /// Connects a new socket to the socket file `file` (an `O_PATH` descriptor; `ENOTSOCK` when it is something
  /// else). The corresponding C function is `connect`.
  package static func connect(to file: borrowing SystemFD) throws(FileSystemError) -> DatagramSocket {
    let fd = try valueOrErrno { gc_dgram_connect(file.rawValue) }.get("connect", file.path)
    return DatagramSocket(fd: fd, path: file.path)
  }

  /// A new socket connected to nothing: it sends each datagram to a socket file named with it
  /// (`send(_:toSocketFile:)`). The corresponding C function is `socket`.
  package static func unconnected() throws(FileSystemError) -> DatagramSocket {
    let fd = try valueOrErrno { gc_dgram_unconnected() }.get("socket", "an unconnected datagram socket")
    return DatagramSocket(fd: fd, path: "an unconnected datagram socket")
  }

  /// Sends `bytes` as one datagram to the socket file `file` (an `O_PATH` descriptor, as `connect(to:)` takes),
  /// without waiting: false when the receiver's queue is full (nothing was sent). Other failures throw:
  /// `ECONNREFUSED` when nobody receives there or `file` is no socket, `EPIPE` when the receiver shut its socket
  /// down. The corresponding C function is `sendto`.
  package func send(_ bytes: [UInt8], toSocketFile file: borrowing SystemFD) throws(FileSystemError) -> Bool {
    let result = bytes.withUnsafeBytes { buffer in
      valueOrErrno(.send) { gc_dgram_send_to(fd, file.rawValue, buffer.baseAddress, UInt(buffer.count)) }
    }
    switch result {
    case .success: return true
    case .failure(let e) where e == .resourceTemporarilyUnavailable: return false
    case .failure(let e): throw FileSystemError("sendto", file.path, e)
    }
  }

  /// Sends `bytes` as one datagram. When the receiver's queue is full, waits up to `waitMilliseconds` for room;
  /// false when there is still none (nothing was sent). Other failures throw: `ECONNREFUSED` when nobody receives
  /// on the socket any more, `EMSGSIZE` when `bytes` is too large. The corresponding C function is `send`.
  package func send(_ bytes: [UInt8], waitMilliseconds: Int32) throws(FileSystemError) -> Bool {
    var waited = false
    while true {
      let result = bytes.withUnsafeBytes { buffer in
        valueOrErrno(.send) { gc_dgram_send(fd, buffer.baseAddress, UInt(buffer.count)) }
      }
      switch result {
      case .success: return true
      case .failure(let e) where e == .resourceTemporarilyUnavailable:
        if waited { return false }
        waited = true
        var one = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        _ = valueOrErrno { Glibc.poll(&one, 1, waitMilliseconds) }
      case .failure(let e):
        throw FileSystemError("send", path, e)
      }
    }
  }

  /// The next waiting datagram, copied into `buffer`: its real length (over `buffer.count`: it was truncated), or
  /// nil when none is waiting. The corresponding C function is `recv`.
  package func receive(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
    switch valueOrErrno({ gc_dgram_receive(fd, buffer.baseAddress, UInt(buffer.count)) }) {
    case .success(let count): return count
    case .failure: return nil
    }
  }

  /// Refuses new datagrams (senders get `EPIPE`) and makes the socket readable for good, so whoever polls it wakes
  /// and drains what it still holds. The corresponding C function is `shutdown`.
  package func shutDown() {
    _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
  }
}

extension ContainerDirectory {
  /// Opens the socket file `relative` beneath the container as an `O_PATH` handle for `DatagramSocket.connect`,
  /// refusing any symbolic link on the way, the last component included (`openat2` with `RESOLVE_BENEATH |
  /// RESOLVE_NO_SYMLINKS`; `ENOSYS` without it: the caller then sends files). The corresponding C function is
  /// `openat2`.
  package func openSocketFile(_ relative: String) throws(FileSystemError) -> SystemFD {
    let opened = try relative.withCString { relative in
      valueOrErrno(.open) { gc_openat_beneath_no_symlinks(fd.rawValue, relative, 3) }
    }.get("openat2", path + "/" + relative)
    return SystemFD(rawValue: opened, in: path, relative: relative)
  }
}
