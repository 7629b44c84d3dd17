import CSystemShims
import Foundation
import Glibc
import SystemPackage

/// Starting processes that must outlive their starter (the download agent, a relaunched app).
package enum ProcessSpawn {
  /// Starts `executable` detached: its own session (neither the terminal's signals nor the starter's exit reach it),
  /// stdin from /dev/null, stdout and stderr to `output`, and no other descriptor of ours (a child holding a test
  /// runner's pipe would keep it waiting). A thread reaps it when it exits. Returns its pid. The corresponding C
  /// function is `posix_spawn` with `POSIX_SPAWN_SETSID`.
  package static func detached(
    executable: String, arguments: [String], environment: [String: String], output: SystemFD
  ) throws(FileSystemError) -> Int32 {
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for p in argv { free(p) }
      for p in envp { free(p) }
    }
    var pid: Int32 = 0
    let rc = gc_spawn_detached(executable, argv, envp, output.rawValue, &pid)
    guard rc == 0 else { throw FileSystemError("posix_spawn", executable, Errno(rawValue: rc)) }
    let child = pid
    let thread = Thread { _ = try? valueOrErrno({ waitpid(child, nil, 0) }).get("waitpid", executable) }
    thread.name = "reap \(child)"
    thread.start()
    return pid
  }

  /// Whether `path` names a file we may execute. The corresponding C function is `access(X_OK)`.
  package static func isExecutable(_ path: String) -> Bool {
    var st = stat()
    return access(path, X_OK) == 0 && stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
  }

  /// The absolute path of this process's executable (`/proc/self/exe`).
  package static func currentExecutable() -> String? {
    try? FileSystem.readLink("/proc/self/exe")
  }
}
