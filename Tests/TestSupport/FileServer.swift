import Foundation
import Synchronization
import SystemLayer

/// `gc-file-server`, the project's local HTTP server (Tests/GCFileServer/main.swift lists its resources and
/// faults), running as a child of the test process on a free port of 127.0.0.1.
///
/// ```swift
/// let server = try await FileServer.start()
/// let url = server.url("/gen/1048576?seed=7&drop=1000&faults=1")
/// // … download it …
/// #expect(try server.stats(for: "/gen/1048576?seed=7&drop=1000&faults=1").requests == 2)
/// #expect(FileServer.mismatch(bytes, size: 1_048_576, seed: 7) == nil)
/// ```
///
/// The server lives until `stop()` or the handle's deinit; it also exits by itself when the test process dies
/// (its stdin, a pipe held only by this handle, reaches EOF), so no test leaves one behind.
///
/// With `transport: .https` it serves HTTPS (HTTP/2 to clients that offer it by ALPN, else HTTP/1.1) with a
/// certificate authority made at its start; `caFile` is that CA's certificate, which a client must trust.
public final class FileServer: Sendable {
  /// What the server speaks.
  public enum Transport: Sendable {
    /// Plain HTTP/1.1.
    case http
    /// HTTPS offering h2 and http/1.1 by ALPN.
    case https
    /// HTTPS offering http/1.1 alone.
    case httpsHTTP1Only
  }

  /// What the server counted for one request target.
  public struct Stats: Sendable, Decodable, Equatable {
    public var requests: Int
    /// Body bytes written to the socket (not merely queued).
    public var bodyBytes: Int64
    /// The Range headers received, in order.
    public var ranges: [String]
    /// The protocol of each request, in order: "HTTP/1.1" or "HTTP/2.0".
    public var versions: [String]

    public init(requests: Int = 0, bodyBytes: Int64 = 0, ranges: [String] = [], versions: [String] = []) {
      self.requests = requests
      self.bodyBytes = bodyBytes
      self.ranges = ranges
      self.versions = versions
    }
  }

  public struct Failure: Error, CustomStringConvertible {
    public var description: String
  }

  public let process: SpawnedProcess
  public let transport: Transport
  /// The PEM certificate of the server's certificate authority (HTTPS only; made fresh at every start).
  public let caFile: String?
  /// Where `caFile` is: a temp directory of this handle, removed with it.
  private let tlsDirectory: URL?
  /// The write end of the server's stdin (nil once closed); closing it stops the server.
  private let input: Mutex<DescriptorBox?>
  private let lines = LineCollector()
  private let stderrText = SharedText()
  private let nextID = Mutex<Int>(0)
  private let listeningPort = Latch<Int>()

  /// Starts the server and waits (at most `startupTimeout` seconds) until it listens.
  /// - Parameters:
  ///   - root: the directory `/files/<name>` serves.
  ///   - verbose: the server logs one line per request to stderr (`errors`).
  ///   - transport: plain HTTP (the default) or HTTPS.
  public static func start(
    root: String? = nil, verbose: Bool = false, transport: Transport = .http, startupTimeout: Double = Wait.line
  ) async throws -> FileServer {
    let server = try FileServer(spawning: root, verbose: verbose, transport: transport)
    // Resolved by the stdout reader: the port, or 0 when the output ended (the server exited) before it.
    switch await server.listeningPort.wait(seconds: startupTimeout) {
    case let port? where port > 0: return server
    case _?:
      _ = await server.process.exited(within: 10)
      await server.process.output()
      throw Failure(
        description:
          "gc-file-server exited (status \(server.process.terminationStatus)) before listening; stderr: \(server.errors)"
      )
    case nil:
      server.kill()
      throw Failure(
        description:
          "gc-file-server did not print `listening <port>` within \(startupTimeout) s; stderr: \(server.errors)")
    }
  }

  private init(spawning root: String?, verbose: Bool, transport: Transport) throws {
    self.transport = transport
    var tlsArguments: [String] = []
    if transport == .http {
      tlsDirectory = nil
      caFile = nil
    } else {
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gc-tls-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
      tlsDirectory = directory
      caFile = directory.appendingPathComponent("ca.pem").path
      tlsArguments = ["--tls", directory.path] + (transport == .httpsHTTP1Only ? ["--http1-only"] : [])
    }
    let (stdinRead, stdinWrite) = try ProcessSpawn.pipe().split()
    let lines = lines, port = listeningPort
    do {
      process = try SpawnedProcess(
        executable: productsDirectory.appendingPathComponent("gc-file-server").path,
        arguments: (root.map { ["--root", $0] } ?? []) + tlsArguments + (verbose ? ["--verbose"] : []),
        input: stdinRead.fd.borrowedView,
        output: .pipe { bytes in
          for line in lines.append(bytes) where line.hasPrefix("listening ") {
            if let number = Int(line.dropFirst("listening ".count)) { port.resolve(number) }
          }
        } end: {
          lines.finish()
          port.resolve(0)
        }, error: .pipe { [stderrText] in stderrText.append($0) })
    }
    // Only the server may hold the read end: our copy would keep its stdin open after we close the write end. Closed
    // here, after the spawn (a use after it, so the box outlives the view the spawn was given).
    _ = consume stdinRead
    input = Mutex(stdinWrite)
  }

  /// The port on 127.0.0.1 the server listens on.
  public var port: Int { listeningPort.value ?? 0 }
  public var pid: Int32 { process.processIdentifier }
  /// What the server wrote to stderr so far (its request log with `verbose`).
  public var errors: String { stderrText.text }

  /// Closes our end of the server's stdin, once (a second close could hit a descriptor that reused the number).
  private func closeInput() {
    input.withLock { $0 = nil }
  }

  /// `http://127.0.0.1:<port>` (`https://` for HTTPS) followed by `pathAndQuery` (which starts with `/`).
  public func url(_ pathAndQuery: String) -> URL {
    URL(string: "\(transport == .http ? "http" : "https")://127.0.0.1:\(port)\(pathAndQuery)")!
  }

  /// The counts per request target (exactly as sent, query included) since start or `resetStats()`.
  public func stats(timeout: Double = Wait.line) async throws -> [String: Stats] {
    let reply = try await command("stats", timeout: timeout)
    do {
      return try JSONDecoder().decode([String: Stats].self, from: Data(reply.utf8))
    } catch {
      throw Failure(description: "gc-file-server's stats are not the JSON expected (\(error)): \(reply)")
    }
  }

  /// The counts of one target (zeros when it was never requested).
  public func stats(for target: String, timeout: Double = Wait.line) async throws -> Stats {
    try await stats(timeout: timeout)[target] ?? Stats()
  }

  /// The TCP connections the server accepted since start or `resetStats()` (each TLS connection is one too).
  public func connectionsAccepted(timeout: Double = Wait.line) async throws -> Int {
    let reply = try await command("connections", timeout: timeout)
    guard let count = Int(reply) else {
      throw Failure(description: "gc-file-server's connection count is not a number: \(reply)")
    }
    return count
  }

  /// Clears the counts (connections included) and the per-target request numbers that `faults=K` and
  /// `etag=rotate` go by.
  public func resetStats(timeout: Double = Wait.line) async throws {
    _ = try await command("reset", timeout: timeout)
  }

  /// Sends `<verb> <id>` on the server's stdin and returns what follows `<verb> <id> ` in its answer line.
  private func command(_ verb: String, timeout: Double) async throws -> String {
    let id = nextID.withLock { id in
      id += 1
      return id
    }
    let prefix = "\(verb) \(id)"
    do {
      try input.withLock { fd throws(FileSystemError) in
        guard let fd else {
          throw FileSystemError("write", "gc-file-server's stdin (closed by stop())", .badFileDescriptor)
        }
        try fd.fd.writeAll(Array("\(prefix)\n".utf8))
      }
    } catch {
      throw Failure(
        description:
          "cannot send `\(verb)` to gc-file-server (stopped? status \(status.map(String.init) ?? "running")): \(error)")
    }
    let answer = Latch<String?>()
    let reader = Task { [lines] in
      for await line in lines.stream() where line == prefix || line.hasPrefix(prefix + " ") {
        answer.resolve(String(line.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces))
        return
      }
      answer.resolve(nil)  // the server's output ended
    }
    defer { reader.cancel() }
    if case let reply?? = await answer.wait(seconds: timeout) { return reply }
    throw Failure(description: "gc-file-server did not answer `\(verb)` within \(timeout) s; stderr: \(errors)")
  }

  /// The exit status once the server has exited, nil while it runs.
  public var status: Int32? { process.isRunning ? nil : process.terminationStatus }

  /// Closes the server's stdin and waits for it to exit (SIGKILL after `timeout` s); returns its exit status
  /// (0 when it stopped as asked).
  @discardableResult
  public func stop(timeout: Double = Wait.line) async -> Int32 {
    closeInput()
    if await !process.exited(within: timeout) { kill() }
    return process.terminationStatus
  }

  /// Sends `signal`; for SIGKILL, returns once the server has been reaped.
  public func kill(_ signal: Int32 = SIGKILL) {
    process.signal(signal)
    if signal == SIGKILL { process.waitForReapAfterKill() }
  }

  deinit {
    closeInput()  // the server exits at end of its stdin; `process` kills it if it is still running
    if let tlsDirectory { try? FileManager.default.removeItem(at: tlsDirectory) }
  }

  /// The bytes `/gen/<size>?seed=<seed>` serves (its `range`, or all of it), computed here by the same generator
  /// as the server's.
  /// nil when `bytes` is exactly the entity (or its `range`), else where it differs. Compare with this, not with
  /// `#expect(bytes == expectedBytes(…))`: on a failure Swift Testing diffs the two arrays, which takes minutes of
  /// CPU for a megabyte and starves every other test.
  public static func mismatch(_ bytes: [UInt8]?, size: Int, seed: UInt64, range: Range<Int>? = nil) -> String? {
    guard let bytes else { return "no file" }
    let expected = expectedBytes(size: size, seed: seed, range: range)
    if bytes == expected { return nil }
    let first = zip(bytes, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
    return "\(bytes.count) bytes where \(expected.count) were expected; first difference at byte "
      + "\(first.map(String.init) ?? "\(min(bytes.count, expected.count)) (one is a prefix of the other)")"
  }

  public static func expectedBytes(size: Int, seed: UInt64, range: Range<Int>? = nil) -> [UInt8] {
    let range = (range ?? 0..<size).clamped(to: 0..<size)
    var bytes = [UInt8](repeating: 0, count: range.count)
    bytes.withUnsafeMutableBytes { GeneratedContent.fill($0, seed: seed, from: UInt64(range.lowerBound)) }
    return bytes
  }
}

/// A tool (curl, sh…), its stdout and stderr captured in temp files (no pipe to drain while it runs).
public final class ToolRun: Sendable {
  public let process: SpawnedProcess
  private let outURL: URL
  private let errURL: URL

  /// Starts `tool`, an absolute path or a name looked up in /usr/bin and /bin; nil when it is not installed.
  /// `environment` is added to this process's.
  public init?(_ tool: String, _ arguments: [String], environment: [String: String] = [:]) throws {
    let candidates = tool.hasPrefix("/") ? [tool] : ["/usr/bin/" + tool, "/bin/" + tool, "/usr/local/bin/" + tool]
    guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else { return nil }
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("gc-tool-\(UUID().uuidString)")
    outURL = base.appendingPathExtension("out")
    errURL = base.appendingPathExtension("err")
    let out = try SystemFD.open(outURL.path, [.writeOnly, .create, .truncate])
    let err = try SystemFD.open(errURL.path, [.writeOnly, .create, .truncate])
    let env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    process = try SpawnedProcess(
      executable: path, arguments: arguments, environment: env, output: .file(out.rawValue), error: .file(err.rawValue))
  }

  public var pid: Int32 { process.processIdentifier }
  public var output: String { (try? String(contentsOf: outURL, encoding: .utf8)) ?? "" }
  public var errors: String { (try? String(contentsOf: errURL, encoding: .utf8)) ?? "" }

  /// Waits for the tool to exit and returns its status; nil, after killing it, when it runs longer than `timeout`
  /// seconds (a hang detector, not a performance check).
  public func exit(timeout: Double = Wait.exit) async -> Int32? {
    guard await process.exited(within: timeout) else {
      process.signal(SIGKILL)
      process.waitForReapAfterKill()
      return nil
    }
    return process.terminationStatus
  }

  deinit {
    // `process` kills the tool if it still runs.
    try? FileManager.default.removeItem(at: outURL)
    try? FileManager.default.removeItem(at: errURL)
  }
}
