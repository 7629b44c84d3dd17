import BackgroundDownloads
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import Logging
import NIOSSL
import TestSupport
import Testing

/// HTTPS (HTTP/2 and HTTP/1.1), the agent's extra certificate authority, and redirects, across real processes:
/// every download is started by a `gc-test-helper` child (`.dlStart`) whose session starts the agent with the
/// child's environment — the only way `GROUPCONTAINER_DOWNLOAD_CA_FILE` reaches an agent, as in an app — and is
/// served by `gc-file-server` (`--tls`: a CA made at its start, ALPN h2 + http/1.1), whose stats prove the
/// protocol each request came on.
///
/// Mutants this suite catches (each made once, the test named failed, then restored):
/// - `makeClient` ignoring the CA file (no `tlsConfiguration`) → `httpsOverHTTP2`, `httpsOverHTTP1`,
///   `resumeOverHTTP2` fail (certificate errors); `untrustedServerFails` still passes
/// - `makeClient` forcing `httpVersion = .http1Only` → `httpsOverHTTP2` and `resumeOverHTTP2` (the stats say
///   HTTP/1.1)
/// - the CA file put in place of the system roots (`trustRoots = .certificates(…)`) →
///   `extraRootsAreAddedToTheSystemRoots`
/// - an unusable CA file not logged → `unusableCAFileIsReportedOnce`
/// - the check for a certificate block removed (NIOSSL then says only `failedToLoadCertificate`) →
///   `unusableCAFilesAreRefused`
/// - the redirect limit raised to 6 → `redirectChains` (6 redirects complete)
/// - makeClient calling `clientConfiguration` twice (the error logged twice per agent) →
///   `unusableCAFileIsReportedOnce`
/// - AsyncHTTPClient's own connect retries left on (`retryConnectionEstablishment = true`) → `untrustedServerFails`
///   (the task still runs after 50 s: every attempt retries the handshake until the 15 s connect deadline)
/// - the server's drop over HTTP/2 ending the stream cleanly instead of resetting it → `serverProtocols` (curl
///   exits 18, not 92; the agent's resume still passes: a short body is an error to it either way)
/// - a failed TLS handshake retried like a network error (not `.fatal`) → `unusableCAFileIsReportedOnce` (6
///   attempts, and the error does not name the variable)
///
/// Serialized, and the 8 MB bodies throttled: its debug-built agents and TLS servers load the machine, and the
/// timing-sensitive suites that run beside it (BackgroundSessionTests) failed in most whole-target runs without.
@Suite("Secure transport and redirects", .serialized, .runSlot(.minutes(3)))
struct SecureTransportTests {
  /// A download started by a helper process (killed once it printed the task id: the agent carries on).
  struct Started {
    var id: String
    var store: DownloadStore
    var container: GroupContainer
  }

  /// Starts a download of `url` to `destination` from a child process; `caFile` goes into its environment (and so
  /// into the agent's).
  static func start(_ url: URL, to destination: String, in root: TestRoot, caFile: String? = nil) async throws
    -> Started
  {
    let container = try root.container()
    let environment = caFile.map { [TrustRoots.caFileEnvironmentKey: $0] } ?? [:]
    let starter = try Child(
      .dlStart(session: "app", url: url, destination: destination), root: root.path, group: container.identifier,
      environment: environment)
    let line = await starter.line { $0.hasPrefix("task ") }
    starter.kill()
    return Started(
      id: String(try #require(line).dropFirst(5)), store: try DownloadStore(container: container),
      container: container)
  }

  /// Waits until the task reached a final state, and returns it.
  static func finished(_ started: Started) async -> DownloadTask? {
    _ = await eventually { started.store.task(started.id)?.state == .completed }
    return started.store.task(started.id)
  }

  static func content(_ started: Started, _ path: String) -> [UInt8]? {
    BackgroundSessionTests.content(started.container, path)
  }

  static func exists(_ started: Started, _ path: String) -> Bool {
    FileManager.default.fileExists(atPath: started.container.url.appendingPathComponent(path).path)
  }

  static func partialExists(_ started: Started) -> Bool {
    exists(started, DownloadStore.taskPath(started.id, "partial"))
  }

  // MARK: HTTPS

  /// The 8 MB bodies are throttled to 4 MB/s: at full speed the debug-built server and agent take both cores for a
  /// second or two, and the timing-sensitive suites that run beside this one (BackgroundSessionTests' polls of
  /// 0.3 s windows) missed their windows in most whole-target runs.
  static let rate = 4_000_000

  @Test("8 MB over HTTPS with HTTP/2, bytes verified; the server saw HTTP/2")
  func httpsOverHTTP2() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start(transport: .https)
    let size = 8 << 20
    let target = "/gen/\(size)?seed=41&rate=\(Self.rate)"
    let started = try await Self.start(server.url(target), to: "Downloads/h2.bin", in: root, caFile: server.caFile)
    let task = await Self.finished(started)
    #expect(task?.succeeded == true, "\(String(describing: task))")
    #expect(FileServer.mismatch(Self.content(started, "Downloads/h2.bin"), size: size, seed: 41) == nil)
    let stats = try await server.stats(for: target)
    #expect(stats.requests >= 1)
    #expect(!stats.versions.isEmpty && stats.versions.allSatisfy { $0 == "HTTP/2.0" }, "\(stats.versions)")
  }

  @Test("8 MB over HTTPS from a server that offers only HTTP/1.1")
  func httpsOverHTTP1() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start(transport: .httpsHTTP1Only)
    let size = 8 << 20
    let target = "/gen/\(size)?seed=42&rate=\(Self.rate)"
    let started = try await Self.start(server.url(target), to: "Downloads/h1.bin", in: root, caFile: server.caFile)
    let task = await Self.finished(started)
    #expect(task?.succeeded == true, "\(String(describing: task))")
    #expect(FileServer.mismatch(Self.content(started, "Downloads/h1.bin"), size: size, seed: 42) == nil)
    let stats = try await server.stats(for: target)
    #expect(!stats.versions.isEmpty && stats.versions.allSatisfy { $0 == "HTTP/1.1" }, "\(stats.versions)")
  }

  @Test("a stream reset mid-body over HTTP/2: the download resumes with a range request and completes")
  func resumeOverHTTP2() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start(transport: .https)
    let size = 8 << 20
    // The first answer's stream is reset after 3 MB; the next answers are whole.
    let target = "/gen/\(size)?seed=43&drop=3000000&faults=1&rate=\(Self.rate)"
    let started = try await Self.start(server.url(target), to: "Downloads/r.bin", in: root, caFile: server.caFile)
    let task = await Self.finished(started)
    #expect(task?.succeeded == true, "\(String(describing: task))")
    #expect(FileServer.mismatch(Self.content(started, "Downloads/r.bin"), size: size, seed: 43) == nil)
    let stats = try await server.stats(for: target)
    #expect(stats.requests >= 2)
    #expect(stats.versions.allSatisfy { $0 == "HTTP/2.0" }, "\(stats.versions)")
    // A resume, not a restart: some request asked for the rest only.
    let starts = stats.ranges.compactMap { range -> Int? in
      guard range.hasPrefix("bytes="), range.hasSuffix("-") else { return nil }
      return Int(range.dropFirst("bytes=".count).dropLast())
    }
    #expect(starts.contains { $0 > 0 && $0 <= 3_000_000 }, "ranges: \(stats.ranges)")
  }

  @Test("a server whose CA is not trusted: the task fails with a certificate error, nothing is left")
  func untrustedServerFails() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start(transport: .https)
    let started = try await Self.start(server.url("/gen/100000?seed=44"), to: "Downloads/u.bin", in: root)
    let task = await Self.finished(started)
    #expect(task?.state == .completed)
    #expect(task?.succeeded == false)
    let error = task?.error.map { "\($0)" } ?? ""
    #expect(error.lowercased().contains("certificate"), "\(error)")
    #expect(!Self.exists(started, "Downloads/u.bin"))
    #expect(!Self.partialExists(started))
    // No request got past the handshake.
    #expect(try await server.stats().isEmpty)
  }

  @Test("a CA file that cannot be used is reported once by the agent, which goes on with the system's roots")
  func unusableCAFileIsReportedOnce() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start(transport: .https)
    let caFile = root.path + "/ca-garbage.pem"
    try Data("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n".utf8)
      .write(to: URL(fileURLWithPath: caFile))
    let started = try await Self.start(server.url("/gen/1000?seed=45"), to: "Downloads/x", in: root, caFile: caFile)
    let task = await Self.finished(started)
    #expect(task?.succeeded == false)
    #expect((task?.error.map { "\($0)" } ?? "").lowercased().contains("certificate"), "\(String(describing: task))")
    #expect(!Self.exists(started, "Downloads/x"))
    let log = Self.content(started, DownloadStore.directory + "/agent.log").map { String(decoding: $0, as: UTF8.self) }
    let lines = (log ?? "").split(separator: "\n")
    let reports = lines.filter {
      $0.contains("\(TrustRoots.caFileEnvironmentKey)=\(caFile)") && $0.contains("unset the variable")
    }
    // Once per agent process (a session may start a second one, which finds the lock taken and exits).
    let agents = lines.filter {
      $0.contains("download agent") && ($0.contains(" started for ") || $0.contains("another"))
    }
    #expect(!reports.isEmpty && reports.count == agents.count, "agent log: \(log ?? "none")")
    // A failed handshake is not retried, and its error says what to do.
    #expect(task?.attempts == 1)
    #expect(task?.error.map { "\($0)" }?.contains(TrustRoots.caFileEnvironmentKey) == true)
  }

  @Test("an unusable CA file is refused with what is wrong and what to do")
  func unusableCAFilesAreRefused() throws {
    let root = try TestRoot()
    let garbage = root.path + "/garbage.pem"
    try Data("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n".utf8)
      .write(to: URL(fileURLWithPath: garbage))
    let empty = root.path + "/empty.pem"
    try Data("no certificate here\n".utf8).write(to: URL(fileURLWithPath: empty))
    let cases: [(path: String, says: String)] = [
      (root.path + "/missing.pem", "cannot be read"), (root.path, "cannot be read"),
      (garbage, "is not a PEM file of certificates"), (empty, "holds no certificate"),
    ]
    for (path, says) in cases {
      var message = ""
      do { _ = try TrustRoots.certificates(inPEMFile: path) } catch { message = error.description }
      #expect(message.hasPrefix("\(TrustRoots.caFileEnvironmentKey)=\(path) \(says)"), "\(message)")
      #expect(message.hasSuffix("fix the file or unset the variable"), "\(message)")
    }
  }

  @Test("the CA file is added to the system's roots, not put in their place")
  func extraRootsAreAddedToTheSystemRoots() async throws {
    let server = try await FileServer.start(transport: .https)
    let caFile = try #require(server.caFile)
    let logger = Logger(label: "secure-transport-test")
    let plain = TrustRoots.clientConfiguration(caFile: nil, logger: logger)
    let extra = TrustRoots.clientConfiguration(caFile: caFile, logger: logger)
    #expect(extra.trustRoots == plain.trustRoots)
    #expect(extra.trustRoots == .default)
    #expect(extra.additionalTrustRoots == [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))])
    #expect(plain.additionalTrustRoots.isEmpty)
    // A bundle: every certificate of the file is taken.
    let bundle = (root: try TestRoot(), text: try String(contentsOfFile: caFile, encoding: .utf8))
    let bundlePath = bundle.root.path + "/bundle.pem"
    let other = try await FileServer.start(transport: .httpsHTTP1Only)
    let otherText = try String(contentsOfFile: try #require(other.caFile), encoding: .utf8)
    try Data((bundle.text + otherText).utf8).write(to: URL(fileURLWithPath: bundlePath))
    #expect(try TrustRoots.certificates(inPEMFile: bundlePath).count == 2)
  }

  // MARK: Redirects (plain HTTP)

  @Test("a 302 to another path: the download completes with the target's bytes")
  func redirectToAnotherPath() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let size = 300_000
    let redirect = "/redirect/1?to=%2Fgen%2F\(size)%3Fseed%3D46"
    let started = try await Self.start(server.url(redirect), to: "Downloads/moved.bin", in: root)
    let task = await Self.finished(started)
    #expect(task?.succeeded == true, "\(String(describing: task))")
    #expect(FileServer.mismatch(Self.content(started, "Downloads/moved.bin"), size: size, seed: 46) == nil)
    #expect(try await server.stats(for: redirect).requests == 1)
    #expect(try await server.stats(for: "/gen/\(size)?seed=46").requests == 1)
  }

  @Test(
    "5 redirects are followed; 6, or a loop, fail at once with a redirect error (no retries)",
    arguments: [(5, true), (6, false), (0, false)])
  func redirectChains(count: Int, completes: Bool) async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let final = "/gen/5000?seed=47"
    // 0 stands for the loop.
    let first = count == 0 ? "/redirect/loop" : "/redirect/\(count)?to=%2Fgen%2F5000%3Fseed%3D47"
    let started = try await Self.start(server.url(first), to: "Downloads/chain.bin", in: root)
    let task = await Self.finished(started)
    if completes {
      #expect(task?.succeeded == true, "\(String(describing: task))")
      #expect(FileServer.mismatch(Self.content(started, "Downloads/chain.bin"), size: 5000, seed: 47) == nil)
      return
    }
    #expect(task?.succeeded == false)
    let error = task?.error.map { "\($0)" } ?? ""
    #expect(error.contains("redirect"), "\(error)")
    #expect(task?.attempts == 1, "a redirect error is retried: \(String(describing: task))")
    #expect(try await server.stats(for: final).requests == 0)
    #expect(!Self.exists(started, "Downloads/chain.bin"))
    #expect(!Self.partialExists(started))
  }

  @Test("a redirect to a file: URL is not followed: the task fails and nothing is written")
  func redirectToAFileURLFails() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let redirect = "/redirect/1?to=file%3A%2F%2F%2Fetc%2Fpasswd"
    let started = try await Self.start(server.url(redirect), to: "Downloads/passwd", in: root)
    let task = await Self.finished(started)
    #expect(task?.succeeded == false)
    #expect(task?.httpStatus == 302, "\(String(describing: task))")
    #expect(task?.attempts == 1)
    #expect(!Self.exists(started, "Downloads/passwd"))
    #expect(!Self.partialExists(started))
  }

  // MARK: The server itself (curl)

  @Test("the server speaks HTTP/2 and HTTP/1.1 by ALPN, only HTTP/1.1 with --http1-only, and redirects")
  func serverProtocols() async throws {
    let h2 = try await FileServer.start(transport: .https)
    let h1 = try await FileServer.start(transport: .httpsHTTP1Only)
    func curl(_ server: FileServer, _ options: [String], _ path: String, status: Int32 = 0) async throws -> String? {
      guard
        let run = try ToolRun(
          "curl",
          [
            "-s", "-o", "/dev/null", "--cacert", server.caFile ?? "", "-w",
            "%{http_version} %{http_code} %{size_download}",
          ]
            + options + [server.url(path).absoluteString])
      else { return nil }
      #expect(await run.exit() == status, "curl: \(run.errors)")
      return run.output
    }
    guard let both = try await curl(h2, ["--http2"], "/gen/70000?seed=1") else {
      Issue.record("curl is not installed: the server's protocols were not checked")
      return
    }
    #expect(both == "2 200 70000")
    #expect(try await curl(h2, ["--http1.1"], "/gen/70000?seed=1") == "1.1 200 70000")
    #expect(try await curl(h1, ["--http2"], "/gen/70000?seed=1") == "1.1 200 70000")
    #expect(try await curl(h2, ["--http2", "-L"], "/redirect/3?to=%2Fgen%2F10%3Fseed%3D1") == "2 200 10")
    // drop over HTTP/2 resets the stream (curl: 92, "stream was not closed cleanly"), after exactly its bytes...
    #expect(try await curl(h2, ["--http2"], "/gen/70000?seed=2&drop=1000", status: 92) == "2 200 1000")
    // ...and the connection goes on: the next request on it is answered (no new connect).
    let reused = try #require(
      try ToolRun(
        "curl",
        [
          "-s", "-o", "/dev/null", "-o", "/dev/null", "--cacert", h2.caFile ?? "", "--http2", "-w",
          "%{http_code} %{size_download} %{num_connects}\\n", h2.url("/gen/70000?seed=3&drop=1000").absoluteString,
          h2.url("/gen/100?seed=3").absoluteString,
        ]))
    _ = await reused.exit()
    #expect(reused.output == "200 1000 1\n200 100 0\n", "curl: \(reused.errors)")
    #expect(try await h2.stats(for: "/gen/70000?seed=1").versions == ["HTTP/2.0", "HTTP/1.1"])
    #expect(try await h1.stats(for: "/gen/70000?seed=1").versions == ["HTTP/1.1"])
    #expect(try await h2.stats(for: "/redirect/1?to=%2Fgen%2F10%3Fseed%3D1").requests == 1)
    // The CA is the server's own: without it, curl refuses the certificate (exit 60).
    let untrusted = try #require(
      try ToolRun("curl", ["-s", "-o", "/dev/null", h2.url("/gen/1?seed=1").absoluteString]))
    #expect(await untrusted.exit() == 60)
  }
}
