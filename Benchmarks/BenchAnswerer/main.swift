// The other side of "Baseline: 64 processes answer from an OperationQueue" (ScaleBenchmarks.swift): the least a
// process that presents an item must do when a writer asks it to relinquish, written without the framework.
//
//   gc-bench-answerer <index> --root <directory>
//
// Binds the datagram socket <directory>/a<index>.sock and connects to <directory>/writer.sock. A thread of its own
// polls the socket (the framework's watcher thread); each datagram is a token and a kind byte. A prepare (kind 1)
// is answered from an `OperationQueue` of one operation at a time, the hop Apple's API requires of a presenter
// (`presentedItemOperationQueue`): the token goes back to the writer's socket. A finish (kind 2) prints
// {"event":"reacquire"} from that queue, the line the framework's benchmark presenters print. Runs until killed.
import BenchmarkSupport
import Foundation

#if canImport(Glibc)
  import Glibc
#endif

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("gc-bench-answerer: \(message)\n".utf8))
  exit(1)
}

let arguments = CommandLine.arguments
guard arguments.count == 4, arguments[2] == "--root", let index = Int(arguments[1]) else {
  fail("usage: gc-bench-answerer <index> --root <directory>")
}
let directory = arguments[3]
let inbox = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
let reply = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
guard inbox >= 0, reply >= 0 else { fail("socket: errno \(errno)") }
guard withUnixSocketAddress(directory + "/a\(index).sock", { bind(inbox, $0, $1) }) == 0 else {
  fail("bind: errno \(errno)")
}
guard withUnixSocketAddress(directory + "/writer.sock", { connect(reply, $0, $1) }) == 0 else {
  fail("connect: errno \(errno)")
}

let queue = OperationQueue()
queue.maxConcurrentOperationCount = 1
let receiver = Thread {
  var buffer = [UInt8](repeating: 0, count: 16)
  var entry = pollfd(fd: inbox, events: Int16(POLLIN), revents: 0)
  while true {
    entry.revents = 0
    guard poll(&entry, 1, 1000) > 0 else { continue }
    let count = buffer.withUnsafeMutableBytes { recv(inbox, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
    guard count == 9 else { continue }
    let token = buffer.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
    if buffer[8] == 1 {
      queue.addOperation {
        var answer = token
        _ = send(reply, &answer, 8, 0)
      }
    } else {
      queue.addOperation {
        let line = Array("{\"event\":\"reacquire\"}\n".utf8)
        _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
      }
    }
  }
}
receiver.name = "gc-bench-answerer receiver"
receiver.start()
let ready = Array("{\"event\":\"ready\",\"pid\":\(getpid())}\n".utf8)
_ = ready.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
while true { sleep(3600) }
