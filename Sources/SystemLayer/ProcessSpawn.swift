import CInotifyTools
import CSystemShims
import Foundation
import Glibc
import Synchronization
import SystemPackage

/// Starting processes that must outlive their starter (the download agent, a relaunched app).
package enum ProcessSpawn {
  /// Starts `executable` detached: its own session (neither the terminal's signals nor the starter's exit reach it),
  /// stdin from /dev/null, stdout and stderr to `output`, and no other descriptor of ours (a child holding a test
  /// runner's pipe would keep it waiting). A thread reaps it when it exits, then calls `onExit`. Returns its pid.
  /// The corresponding C function is `posix_spawn` with `POSIX_SPAWN_SETSID`.
  package static func detached(
    executable: String, arguments: [String], environment: [String: String], output: borrowing SystemFD,
    onExit: (@Sendable () -> Void)? = nil
  ) throws(FileSystemError) -> Int32 {
    let child = try spawn(
      executable: executable, arguments: arguments, environment: environment, input: nil, output: output,
      error: output, detach: true)
    let thread = Thread {
      _ = try? valueOrErrno({ waitpid(child, nil, 0) }).get("waitpid", executable)
      onExit?()
    }
    thread.name = "reap \(child)"
    thread.start()
    return child
  }

  /// Starts `executable` as a child the caller reaps (`waitForExit`): stdin from `input` (nil: /dev/null), stdout
  /// and stderr to `output` and `error`, no other descriptor of ours, its own process group. The corresponding C
  /// function is `posix_spawn`.
  package static func child(
    executable: String, arguments: [String], environment: [String: String], input: borrowing SystemFD?,
    output: borrowing SystemFD,
    error: borrowing SystemFD
  ) throws(FileSystemError) -> Int32 {
    try spawn(
      executable: executable, arguments: arguments, environment: environment, input: input, output: output,
      error: error, detach: false)
  }

  private static func spawn(
    executable: String, arguments: [String], environment: [String: String], input: borrowing SystemFD?,
    output: borrowing SystemFD,
    error: borrowing SystemFD, detach: Bool
  ) throws(FileSystemError) -> Int32 {
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for p in argv { free(p) }
      for p in envp { free(p) }
    }
    var pid: Int32 = 0
    let rc = gc_spawn(
      executable, argv, envp, input.rawValueOrNone, output.rawValue, error.rawValue, detach ? 1 : 0, &pid)
    guard rc == 0 else { throw FileSystemError("posix_spawn", executable, Errno(rawValue: rc)) }
    return pid
  }

  /// A `child` reaped by a thread of its own: `termination` is nil while it runs, and `onExit` is called on that
  /// thread once it is set (so a waiter needs no polling). By default it shares the caller's
  /// stdout and stderr (a registered app started on the caller's behalf; test children pass pipes). Foundation's
  /// `Process.run` is not used because it over-reads its directory buffer while closing descriptors and crashes now
  /// and then in a process with many of them (swift-corelibs-foundation #5472).
  package final class Reaped: Sendable {
    package let pid: Int32
    private let ended = Mutex<Termination?>(nil)

    package init(
      executable: String, arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
      input: borrowing SystemFD? = nil, output: borrowing SystemFD = SystemFD.view(1, path: "stdout"),
      error: borrowing SystemFD = SystemFD.view(2, path: "stderr"),
      onExit: (@Sendable (Termination) -> Void)? = nil
    ) throws(FileSystemError) {
      pid = try ProcessSpawn.child(
        executable: executable, arguments: arguments, environment: environment, input: input, output: output,
        error: error)
      let pid = pid
      let thread = Thread { [self] in
        let termination = (try? ProcessSpawn.waitForExit(pid)) ?? .exited(-1)
        ended.withLock { $0 = termination }
        onExit?(termination)
      }
      thread.name = "reap \(pid)"
      thread.start()
    }

    package var termination: Termination? { ended.withLock { $0 } }
  }

  /// How a child ended.
  package enum Termination: Sendable, Equatable {
    case exited(Int32)
    case signaled(Int32)
  }

  /// Blocks until the child `pid` ends and reaps it. The corresponding C function is `waitpid`.
  package static func waitForExit(_ pid: Int32) throws(FileSystemError) -> Termination {
    var status: Int32 = 0
    _ = try valueOrErrno { waitpid(pid, &status, 0) }.get("waitpid", "pid \(pid)")
    // <sys/wait.h>'s WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import.
    let signal = status & 0x7f
    return signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
  }

  /// A pipe whose two ends are close-on-exec: no child inherits them unless they are handed to it as its stdin,
  /// stdout or stderr (a child holding the write end of another child's pipe keeps that pipe's reader from ever
  /// seeing end of file). The corresponding C function is `pipe2` with `O_CLOEXEC`.
  package static func pipe() throws(FileSystemError) -> Pipe {
    var fds: [Int32] = [-1, -1]
    _ = try valueOrErrno { gc_pipe2(&fds, O_CLOEXEC) }.get("pipe2", "")
    return Pipe(read: SystemFD(rawValue: fds[0], path: "pipe"), write: SystemFD(rawValue: fds[1], path: "pipe"))
  }

  /// The two ends of a pipe, each owned (and closed) on its own.
  package struct Pipe: ~Copyable {
    /// The end to read from.
    package let read: SystemFD
    /// The end to write to.
    package let write: SystemFD

    /// Both ends, each in a box of its own: for a caller that keeps them in different places.
    package consuming func split() -> (read: DescriptorBox, write: DescriptorBox) {
      (DescriptorBox(read), DescriptorBox(write))
    }
  }

  /// Whether `path` names a file we may execute. The corresponding C function is `access(X_OK)`.
  package static func isExecutable(_ path: String) -> Bool {
    executableProblem(path) == nil
  }

  /// Why `path` cannot be started as a program (it does not exist, is not a regular file, or is not executable
  /// by this process), in words for an error message; nil when it can. The corresponding C functions are `stat`
  /// and `access` (symlinks followed, as `execve` does).
  package static func executableProblem(_ path: String) -> String? {
    var st = stat()
    guard stat(path, &st) == 0 else {
      let e = Errno(rawValue: errno)
      return e == .noSuchFileOrDirectory ? "it does not exist" : "it cannot be examined: \(e) (errno \(e.rawValue))"
    }
    switch st.st_mode & S_IFMT {
    case S_IFREG: break
    case S_IFDIR: return "it is a directory, not a program"
    default: return "it is not a regular file"
    }
    guard access(path, X_OK) == 0 else {
      return "it is not executable (mode \(String(st.st_mode & 0o7777, radix: 8))): chmod +x it"
    }
    return nil
  }

  /// The absolute path of this process's executable (`/proc/self/exe`).
  package static func currentExecutable() -> String? {
    try? FileSystem.readLink("/proc/self/exe")
  }
}
