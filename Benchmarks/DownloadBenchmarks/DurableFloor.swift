// The durable floor of the small-files rows (issue #37, item 1): the same files fetched by a program that keeps the
// agent's durability rule and nothing else — what any AsyncHTTPClient downloader that publishes each file durably
// pays on this machine, measured in the same iteration as the agent and the tools.
//
// Per file, as the agent: a partial written from the body on the connection's event loop (one loop, 16 connections,
// requests not bound to it: DownloadAgent's IdleClient), then, off the loop, fsync of the partial, a rename onto
// its name and an fsync of the directory shared by the files renamed before it began (DirectorySyncs' rule). No
// task, request, status, event, commit, lock file or coordination, no second process.
//
// Written for this row only, with Glibc calls of its own (the library's SystemLayer is not a product).

import AsyncHTTPClient
import Dispatch
import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

struct FloorError: Error, CustomStringConvertible {
  let description: String
  /// A failed call on `name`, with the error it set.
  init(_ call: String, _ name: String, _ code: Int32 = errno) {
    description = "durable floor: \(call) '\(name)': \(String(cString: strerror(code)))"
  }
  init(_ message: String) { description = "durable floor: " + message }
}

/// Writes a response's body into its partial, on the connection's loop (as the agent's delegate does).
private final class PartialWriter: HTTPClientResponseDelegate, @unchecked Sendable {
  typealias Response = Void
  // Touched only on the request's event loop, one callback at a time.
  let fd: Int32
  let name: String
  var offset: off_t = 0

  init(fd: Int32, name: String) {
    self.fd = fd
    self.name = name
  }

  func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
    guard head.status == .ok else {
      return task.eventLoop.makeFailedFuture(FloorError("'\(name)': the server answered \(head.status.code)"))
    }
    return task.eventLoop.makeSucceededVoidFuture()
  }

  func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
    let failed = buffer.withUnsafeReadableBytes { bytes -> Bool in
      var done = 0
      while done < bytes.count {
        let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, offset)
        if n < 0 {
          if errno == EINTR { continue }
          return true
        }
        done += n
        offset += off_t(n)
      }
      return false
    }
    if failed { return task.eventLoop.makeFailedFuture(FloorError("pwrite", name)) }
    return task.eventLoop.makeSucceededVoidFuture()
  }

  func didFinishRequest(task: HTTPClient.Task<Void>) throws {}
}

/// The files of a run renamed whose directory fsync is still to come.
private final class Renamed: Sendable {
  let waiting = Mutex<[CheckedContinuation<Void, any Error>]>([])
}

/// One client for the process's runs (connections kept between iterations, as the agent keeps its own).
final class DurableFloor: Sendable {
  static let shared = DurableFloor()

  private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
  private let client: HTTPClient
  /// Directory fsyncs, one at a time: each covers every rename that ended before it began.
  private let directorySyncs = DispatchQueue(label: "durable-floor.directory")

  private init() {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool = .init(
      idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
    client = HTTPClient(eventLoopGroupProvider: .shared(group), configuration: configuration)
  }

  /// Fetches `urls` into the directory `directory` as files `0`, `1`, …; returns once every one is durable.
  func fetch(_ urls: [String], into directory: String) async throws {
    let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard directoryFD >= 0 else { throw FloorError("open", directory) }
    defer { close(directoryFD) }
    let renamed = Renamed()
    try await withThrowingTaskGroup(of: Void.self) { tasks in
      for (i, url) in urls.enumerated() {
        tasks.addTask { [self] in
          let partial = ".\(i).partial"
          let fd = openat(directoryFD, partial, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
          guard fd >= 0 else { throw FloorError("openat", partial) }
          let writer = PartialWriter(fd: fd, name: partial)
          do {
            let request = try HTTPClient.Request(url: url)
            try await client.execute(request: request, delegate: writer, eventLoop: .delegate(on: group.next()))
              .futureResult.get()
          } catch {
            close(fd)
            throw error
          }
          try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            // fsync and rename off the event loop, on a serial queue of the file's own: Dispatch gives a busy serial
            // queue a thread of its own, so fsyncs in flight do not wait for each other and share journal commits
            // (a concurrent queue gets about one thread per core) — as the agent's `offload` does.
            DispatchQueue(label: "durable-floor.\(i)").async { [self] in
              let synced = fsync(fd) == 0 ? nil : FloorError("fsync", partial)
              close(fd)
              if let synced { return done.resume(throwing: synced) }
              guard renameat(directoryFD, partial, directoryFD, "\(i)") == 0 else {
                return done.resume(throwing: FloorError("renameat", partial))
              }
              renamed.waiting.withLock { $0.append(done) }
              directorySyncs.async {
                let round = renamed.waiting.withLock { waiting -> [CheckedContinuation<Void, any Error>] in
                  defer { waiting = [] }
                  return waiting
                }
                guard !round.isEmpty else { return }  // an earlier round covered this rename
                let failure = fsync(directoryFD) == 0 ? nil : FloorError("fsync", directory)
                for waiter in round {
                  if let failure { waiter.resume(throwing: failure) } else { waiter.resume() }
                }
              }
            }
          }
        }
      }
      try await tasks.waitForAll()
    }
  }
}
