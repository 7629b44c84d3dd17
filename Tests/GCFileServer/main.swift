// gc-file-server: the local HTTP file server of tests, benchmarks and the demo (issue #11, item 8).
//
//   gc-file-server [--port N] [--root DIR] [--tls DIR [--http1-only]] [--verbose] [--help]
//
// Binds 127.0.0.1:N (0: any free port), prints `listening <port>` on stdout once bound, serves HTTP/1.1 with
// keep-alive until SIGTERM/SIGINT, or until stdin reaches EOF when stdin is a pipe, a socket or a terminal (the
// parent closed it or died; Ctrl-D), then exits 0. Started with stdin from /dev/null or a file (a background job of
// a script, nohup), it serves until a signal: that EOF says nothing about a parent.
//
// --tls DIR: HTTPS instead. At start the server makes a new certificate authority and a leaf certificate for
// 127.0.0.1 and localhost (TLS.swift: generated in memory, no key on disk, no openssl), writes the CA certificate as
// PEM to DIR/ca.pem before printing `listening`, and offers h2 and http/1.1 by ALPN (HTTP/2 when the client
// offers it); --http1-only offers http/1.1 alone. Every resource and fault below is served on both protocols.
// Over HTTP/2: drop=N resets the stream after N body bytes (RST_STREAM; the connection and its other streams go
// on); stall, rate, delay, status, norange, faults, the validator switches and chunked (no Content-Length) work as
// over HTTP/1.1; length=L claims L, and the HTTP/2 stack resets a stream whose body does not match it (L larger:
// after the real body; L smaller: before the client gets any of it); there is no Connection header.
//
// Resources (GET, HEAD):
//   /gen/<size>?seed=S  size deterministic bytes (GeneratedContent.swift), generated a chunk at a time;
//                       ETag "g-<size>-<seed>", a Last-Modified derived from the seed
//   /files/<name>       a regular file directly in --root (no links, no subdirectories, no ..); ETag from inode,
//                       size and mtime
//   /redirect/<n>?to=L  302 to /redirect/<n-1>?to=L while n > 1, to L (percent-decoded; any URL, relative or not)
//                       when n is 1: n redirects in all; code=C (301, 302, 303, 307, 308) for another status
//   /redirect/loop      302 to itself (the same target, query included)
//   /stats              JSON: {"<target>": {"requests": n, "bodyBytes": n, "ranges": [...], "versions": [...]}} per
//                       request target as received (bodyBytes: body bytes written to the socket; versions: the
//                       protocol of each request, "HTTP/1.1" or "HTTP/2.0"); /stats and /stats/reset themselves
//                       are not counted
//   /stats/reset        clears the counts (and the per-target request numbers faults go by)
// Range: one range (bytes=a-, a-b, -n) → 206; several → 200; start ≥ size → 416 (Content-Range: bytes */size);
// If-Range with an ETag (strong comparison) or the exact Last-Modified date, else 200.
// Every resource's answer carries Date (the server's clock); a Last-Modified later than it is sent as it (RFC 9110
// §8.8.2.1), so a file modified in the current second has a Last-Modified that is no strong validator.
//
// Faults (query parameters, combinable, part of the target):
//   faults=K     only the first K requests of this target get the faults below (all of them otherwise)
//   drop=N       close the connection once N body bytes are written (when N < the body's length)
//   stall=N      after N body bytes send nothing more; the connection stays open until the client closes it
//   rate=BPS     throttle the body to BPS bytes per second (10 ms ticks)
//   norange=1    ignore Range and If-Range: 200 with the whole body
//   etag=rotate  request k of the target sees entity k: ETag "g-<size>-<seed>-r<k>", content of seed+k, its own
//                Last-Modified; with faults=K, requests after the K-th see the plain entity (rotation stops)
//   weak=1       weak ETag (W/"…");  noetag=1, nolm=1: no ETag / no Last-Modified
//   ifrange=ignore  serve a Range whatever its If-Range says (a server breaking RFC 9110 §13.1.5)
//   bare206=1    a 206 carries no ETag and no Last-Modified
//                (these two are how the server behaves: faults=K does not end them)
//   status=C     answer C with the body "C <reason>\n" instead of the resource
//   delay=MS     wait MS ms before sending the head
//   chunked=1    Transfer-Encoding: chunked, no Content-Length
//   length=L     claim Content-Length L, send the real body, then close the connection
//
// Commands on stdin (for the test handle, which needs no HTTP client for them): `stats <id>` prints
// `stats <id> <json>`, `connections <id>` prints `connections <id> <n>` (TCP connections accepted), `reset <id>`
// clears the counts and prints `reset <id>`.
import Dispatch
import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix

/// Writes a line to stderr unbuffered (one write: lines of concurrent connections do not interleave).
func standardError(_ line: String) { writeAll(2, line + "\n") }

func standardOutput(_ line: String) { writeAll(1, line + "\n") }

private func writeAll(_ fd: Int32, _ text: String) {
  var bytes = Array(text.utf8)
  var done = 0
  while done < bytes.count {
    let n = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
    if n < 0 && errno == EINTR { continue }
    if n <= 0 { return }
    done += n
  }
}

let usage = "usage: gc-file-server [--port N] [--root DIR] [--tls DIR [--http1-only]] [--verbose] [--help]"

func usageError(_ message: String) -> Never {
  standardError("gc-file-server: \(message)\n\(usage)")
  exit(2)
}

let help = """
  gc-file-server: the local HTTP file server of GroupContainer's tests, benchmarks and demo.
  \(usage)

    --port N        listen on 127.0.0.1:N (default 0: a free port); prints `listening <port>` once bound
    --root DIR      serve the regular files directly in DIR as /files/<name>
    --tls DIR       HTTPS (h2 and http/1.1) with a certificate authority made at start, written to DIR/ca.pem
    --http1-only    with --tls: offer http/1.1 alone
    --verbose       one line per request on stderr

  Resources: /gen/<size>?seed=S (deterministic bytes), /files/<name>, /redirect/<n>?to=URL, /stats, /stats/reset;
  faults as query parameters (drop=N, stall=N, rate=BPS, status=C, delay=MS, …: see Tests/GCFileServer/main.swift).
  Ends on SIGINT/SIGTERM, or at EOF of stdin when stdin is a pipe, a socket or a terminal.
  """

var port = 0
var root: String?
var verbose = false
var tlsDirectory: String?
var http1Only = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
  switch argument {
  case "--port":
    guard let text = arguments.popFirst(), let value = Int(text), (0...65535).contains(value) else {
      usageError("--port needs a port number (0 to 65535; 0 picks a free one)")
    }
    port = value
  case "--root":
    guard let path = arguments.popFirst() else { usageError("--root needs a directory") }
    var info = stat()
    guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
      usageError("--root \(path) is not a directory")
    }
    root = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
  case "--tls":
    guard let path = arguments.popFirst() else { usageError("--tls needs the directory to write ca.pem in") }
    var info = stat()
    guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
      usageError("--tls \(path) is not a directory")
    }
    tlsDirectory = path
  case "--http1-only":
    http1Only = true
  case "--verbose":
    verbose = true
  case "--help", "-h":
    standardOutput(help)
    exit(0)
  default:
    usageError("unknown argument \(argument)")
  }
}

if http1Only && tlsDirectory == nil { usageError("--http1-only applies to --tls (plain HTTP is always HTTP/1.1)") }

// Writes to a client that went away must fail with EPIPE, not kill the server.
signal(SIGPIPE, SIG_IGN)
let state = ServerState(root: root, verbose: verbose)
let tlsContext = tlsDirectory.map { makeTLSContext(directory: $0, http1Only: http1Only) }
let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
let bootstrap = ServerBootstrap(group: group)
  .serverChannelOption(.backlog, value: 256)
  .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
  .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
  .childChannelInitializer { channel in
    state.connectionAccepted()
    if let tlsContext { return configureTLS(channel, context: tlsContext, state: state) }
    return channel.eventLoop.makeCompletedFuture { try configureHTTP1(channel, state: state) }
  }

let server: Channel
do {
  server = try bootstrap.bind(host: "127.0.0.1", port: port).wait()
} catch {
  standardError("gc-file-server: cannot listen on 127.0.0.1:\(port): \(error)")
  exit(1)
}
// Before "listening": a test signals the server as soon as it reads that line.
exitOnTerminationSignals()
standardOutput("listening \(server.localAddress?.port ?? port)")

if standardInputHasAnEnd() {
  serveStandardInput(state: state)
  exit(0)
}
// /dev/null or a file: its EOF is no parent going away. Serve until a signal (handled above).
while true { pause() }
