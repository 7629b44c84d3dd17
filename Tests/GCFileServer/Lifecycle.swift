// How the server ends: SIGTERM/SIGINT, or EOF on stdin, which also carries the test handle's commands.
// (Outside main.swift: closures written at its top level are main-actor isolated, and a signal handler running on
// a dispatch queue trapped on that isolation check.)
import Dispatch
import Glibc

/// SIGTERM and SIGINT exit with status 0 (their default action would report death by signal). A plain handler
/// calling `_exit` (async-signal-safe), installed before this returns: a Dispatch signal source is armed
/// asynchronously after `resume()`, and a signal sent in between (a test signals as soon as it reads `listening`)
/// met SIG_IGN and was lost — the server then ran on (`stopsWithStatusZero` waited 20 s for it, once in a whole run).
func exitOnTerminationSignals() {
  for number in [SIGTERM, SIGINT] {
    signal(number) { _ in _exit(0) }
  }
}

/// Whether stdin's EOF means someone went away: a pipe or socket (the parent, a test handle) or a terminal (Ctrl-D).
/// /dev/null and regular files are at EOF from the start (a background job of a script gets /dev/null).
func standardInputHasAnEnd() -> Bool {
  var info = stat()
  guard fstat(0, &info) == 0 else { return false }
  let type = info.st_mode & S_IFMT
  return type == S_IFIFO || type == S_IFSOCK || isatty(0) == 1
}

/// Reads stdin until EOF — the parent closed it or died, so nobody is left to ask for anything — answering the
/// commands `stats <id>` (`stats <id> <json>`), `connections <id>` (`connections <id> <n>`: TCP connections accepted)
/// and `reset <id>` (`reset <id>`, which clears both) on stdout.
func serveStandardInput(state: ServerState) {
  var line: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let n = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress!, $0.count) }
    if n < 0 && errno == EINTR { continue }
    if n <= 0 { return }
    for byte in buffer[..<n] {
      guard byte == UInt8(ascii: "\n") else {
        line.append(byte)
        continue
      }
      let words = String(decoding: line, as: UTF8.self).split(separator: " ")
      line.removeAll()
      guard let command = words.first else { continue }
      let id = words.dropFirst().first.map(String.init) ?? "-"
      switch command {
      case "stats": standardOutput("stats \(id) \(state.json())")
      case "connections": standardOutput("connections \(id) \(state.connectionsAccepted)")
      case "reset":
        state.reset()
        standardOutput("reset \(id)")
      default:
        standardError(
          "gc-file-server: unknown stdin command \(command) (known: stats <id>, connections <id>, reset <id>)")
      }
    }
  }
}
