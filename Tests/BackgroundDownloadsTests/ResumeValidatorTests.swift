import BackgroundDownloads
import FileCoordination
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// A resumed download never splices two versions of a file (issue #33 item 2), across real processes: the agent
/// (`gc-download-agent`, started by the session) downloads from `gc-file-server`, whose connection drops at 40 %.
///
/// Mutants this suite catches (each made once by hand, seen failing, restored):
/// - `ResumePolicy.sameEntity` accepting a 206 that carries no Last-Modified (the old `return true`):
///   `a206ThatProvesNothingStartsOver` publishes v1's first 40 % followed by v2's rest.
/// - `ResumePolicy.strongLastModified` keeping any Last-Modified (the Date comparison left out):
///   `aLastModifiedOfTheCurrentSecondIsNoValidator` sees `Range: bytes=400000-` in the second request.
@Suite(.runSlot(.minutes(5))) struct ResumeValidatorTests {
  static func session(_ container: GroupContainer) throws -> DownloadSession {
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .none
    configuration.agentIdleTimeout = .seconds(2)
    return try DownloadSession(identifier: "s", container: container, configuration: configuration)
  }

  static func content(_ container: GroupContainer, _ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: container.url.appendingPathComponent(path).path).map { [UInt8]($0) }
  }

  /// v1 is served with a strong Last-Modified and no ETag and cut at 400,000 of 1,000,000 bytes; then the entity
  /// is v2, and the server ignores `If-Range` and answers the resume with a 206 that carries no validator. The
  /// 206 proves nothing, so the agent starts over from 0: the published file is all v2, fetched by a third request.
  @Test func a206ThatProvesNothingStartsOver() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let server = try await FileServer.start()
    let size = 1_000_000
    // Request 1 sees the rotated entity (seed 22, v1), without ETag, dropped at 40 %; every later request sees the
    // plain one (seed 21, v2), Range served whatever If-Range says, 206 without ETag or Last-Modified.
    let target = "/gen/\(size)?seed=21&etag=rotate&noetag=1&drop=400000&faults=1&ifrange=ignore&bare206=1"
    let session = try Self.session(container)
    defer { session.invalidate() }
    let task = try session.download(from: server.url(target), to: "Downloads/v.bin")
    let store = try DownloadStore(container: container)
    #expect(await eventually { store.task(task.id)?.state == .completed })
    #expect(store.task(task.id)?.succeeded == true, "\(String(describing: store.task(task.id)))")
    #expect(FileServer.mismatch(Self.content(container, "Downloads/v.bin"), size: size, seed: 21) == nil)
    let stats = try await server.stats(for: target)
    // The resume was tried (v1's Last-Modified was a strong validator), refused, and the download started over.
    #expect(stats.ranges == ["bytes=400000-"], "\(stats)")
    #expect(stats.requests == 3, "\(stats)")
  }

  /// A Last-Modified less than a second before the answer's Date is no strong validator (RFC 9110 §8.8.2.2): an
  /// entity changed twice within that second keeps the same date. The file's modification time is in the future,
  /// so the server sends its Date as Last-Modified (§8.8.2.1); after the drop the agent fetches the whole file
  /// again instead of resuming with that date.
  @Test func aLastModifiedOfTheCurrentSecondIsNoValidator() async throws {
    let root = try TestRoot()
    let container = try root.container()
    let served = root.path + "/served"
    try FileManager.default.createDirectory(atPath: served, withIntermediateDirectories: false)
    let size = 1_000_000
    let bytes = FileServer.expectedBytes(size: size, seed: 5)
    try Data(bytes).write(to: URL(fileURLWithPath: served + "/x.bin"))
    try FileManager.default.setAttributes(
      [.modificationDate: Date().addingTimeInterval(3600)], ofItemAtPath: served + "/x.bin")
    let server = try await FileServer.start(root: served)
    let target = "/files/x.bin?noetag=1&drop=400000&faults=1"
    let session = try Self.session(container)
    defer { session.invalidate() }
    let task = try session.download(from: server.url(target), to: "Downloads/x.bin")
    let store = try DownloadStore(container: container)
    #expect(await eventually { store.task(task.id)?.state == .completed })
    #expect(store.task(task.id)?.succeeded == true, "\(String(describing: store.task(task.id)))")
    #expect(Self.content(container, "Downloads/x.bin") == bytes)
    let stats = try await server.stats(for: target)
    #expect(stats.requests == 2, "\(stats)")
    #expect(stats.ranges.isEmpty, "a range validated by a weak Last-Modified: \(stats)")
  }
}
