// How the server ends: SIGTERM/SIGINT, or EOF on stdin, which also carries the test handle's commands.
// (Outside main.swift: closures written at its top level are main-actor isolated, and a signal handler running on
// a dispatch queue trapped on that isolation check.)
import Dispatch
import Glibc

/// SIGTERM and SIGINT exit with status 0 (their default action would report death by signal). Keep the sources.
func exitOnTerminationSignals() -> [any DispatchSourceSignal] {
  let queue = DispatchQueue(label: "gc-file-server.signals")
  return [SIGTERM, SIGINT].map { number in
    signal(number, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
    source.setEventHandler { exit(0) }
    source.resume()
    return source
  }
}

/// Reads stdin until EOF — the parent closed it or died, so nobody is left to ask for anything — answering the
/// commands `stats <id>` (`stats <id> <json>`) and `reset <id>` (`reset <id>`) on stdout.
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
      case "reset":
        state.reset()
        standardOutput("reset \(id)")
      default: standardError("gc-file-server: unknown stdin command \(command) (known: stats <id>, reset <id>)")
      }
    }
  }
}
