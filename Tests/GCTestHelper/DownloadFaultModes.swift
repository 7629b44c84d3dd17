// The download subjects of the I/O-error loops (`HelperCommand.ioFault`; BackgroundDownloadsTests'
// IOErrorInjectionTests): a download's checkpoints and its publish, made by the agent's own code in this process,
// so that N counts the calls of the operation under test only (the agent process, armed from its environment,
// would count its whole start as well).
import BackgroundDownloads
import DownloadAgent
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import Logging
import Synchronization
import SystemLayer

/// `.downloadCheckpoint`: a download of `/gen/262144?seed=<round>` to `Downloads/c<round>.bin`, requested unarmed
/// through a session (whose agent is /bin/true), then run to its end by a `DownloadAgent` of this process with a
/// checkpoint every 32 KiB (an fdatasync of the partial and a status report), so a 256 KiB body takes several.
/// `.downloadPublish`: a 64 KiB partial (`/gen/65536?seed=<round>`'s bytes) published to `Downloads/p.bin` by
/// `Publisher.publish`, as the agent does once a download is verified.
///
/// The error a round reports is the one the task's status holds (what a session's `didCompleteWithError` says),
/// with what the agent logged at error level.
final class DownloadFaultSubject: IOFaultSubject {
  let operation: HelperCommand.IOFaultOperation
  let container: GroupContainer
  let session: DownloadSession?
  /// The task of the round `prepare` requested (checkpoint), or the partial it wrote, opened (publish).
  var task: String?
  var partial: DescriptorBox?
  static let checkpointSize = 262_144
  static let publishSize = 65_536

  init(operation: HelperCommand.IOFaultOperation, container: GroupContainer) throws {
    self.operation = operation
    self.container = container
    guard operation == .downloadCheckpoint else {
      session = nil
      _ = try DownloadStore(container: container)  // its directories, where the agent keeps partials
      return
    }
    var configuration = DownloadSession.Configuration()
    configuration.agentExecutable = URL(fileURLWithPath: "/bin/true")  // the agent runs here, armed
    session = try DownloadSession(identifier: "faults", container: container, configuration: configuration)
  }

  static func contents(seed: Int, size: Int) -> Data {
    var data = Data(count: size)
    data.withUnsafeMutableBytes { GeneratedContent.fill($0, seed: UInt64(seed), from: 0) }
    return data
  }

  /// Every published file of `Downloads/`, "name=ok" when its bytes are the served entity's (the seed is in the
  /// name), else "name=torn"; a download's whole bytes compared, which is what its SHA-256 would say.
  func seen() -> String {
    let folder = container.url.appendingPathComponent("Downloads")
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
    return names.map { name in
      let size = name.hasPrefix("c") ? Self.checkpointSize : Self.publishSize
      let seed = name == "p.bin" ? publishedSeed(folder.appendingPathComponent(name).path) : seedOf(name)
      let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)
      guard let seed, data == Self.contents(seed: seed, size: size) else { return "\(name)=torn" }
      return name == "p.bin" ? "p.bin=r\(seed)" : "\(name)=ok"
    }.joined(separator: ",")
  }

  private func seedOf(_ name: String) -> Int? { Int(name.dropFirst().prefix { $0 != "." }) }

  /// Which round's bytes `Downloads/p.bin` holds: the seed whose first word matches (tried over the rounds seen).
  private func publishedSeed(_ path: String) -> Int? {
    guard let data = FileManager.default.contents(atPath: path), data.count >= 8 else { return nil }
    let marker = container.url.deletingLastPathComponent().appendingPathComponent("published-seeds").path
    let seeds = ((try? String(contentsOfFile: marker, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
      Int($0)
    }
    return seeds.first { Self.contents(seed: $0, size: 8) == data.prefix(8) }
  }

  func prepare(_ round: Int) throws {
    let base = container.url.deletingLastPathComponent()
    switch operation {
    case .downloadCheckpoint:
      let server = try String(contentsOf: base.appendingPathComponent("server-url"), encoding: .utf8)
        .trimmingCharacters(in: .whitespacesAndNewlines)
      let url = URL(string: "\(server)/gen/\(Self.checkpointSize)?seed=\(round)")!
      task = try session!.download(from: url, to: "Downloads/c\(round).bin").id
    default:
      // The seeds published so far, for `seen` to tell which one `p.bin` holds.
      let marker = base.appendingPathComponent("published-seeds").path
      if !FileManager.default.fileExists(atPath: marker) {
        FileManager.default.createFile(atPath: marker, contents: nil)
      }
      let handle = FileHandle(forWritingAtPath: marker)
      handle?.seekToEndOfFile()
      handle?.write(Data("\(round)\n".utf8))
      try? handle?.close()
      let path = DownloadStore.taskPath("pub-\(round)", "partial")
      try Self.contents(seed: round, size: Self.publishSize).write(to: container.url.appendingPathComponent(path))
      let tasks = try container.directory().openDirectory((path as NSString).deletingLastPathComponent)
      partial = DescriptorBox(try tasks.open((path as NSString).lastPathComponent, .readWrite))
    }
  }

  func run(_ round: Int) async throws -> String {
    let errors = LogCollector()
    let logger = Logger(label: "GroupContainer.DownloadAgent") { _ in CollectingLogHandler(collector: errors) }
    switch operation {
    case .downloadCheckpoint:
      guard let task else { throw DownloadFaultError(text: "no task requested") }
      var settings = DownloadAgent.Settings()
      settings.idleTimeout = .milliseconds(100)
      settings.policy.checkpointBytes = 32 << 10
      settings.policy.initialBackoff = .milliseconds(50)
      let agent = try DownloadAgent(container: container, settings: settings, logger: logger)
      let exit = await agent.run()
      let store = try DownloadStore(container: container)
      guard let status = store.status(task), status.phase.isFinal else {
        throw DownloadFaultError(
          text:
            "the agent exited \(exit) with the task \(store.status(task).map { "\($0.phase)" } ?? "without a status")"
            + errors.text)
      }
      if let error = status.error { throw DownloadFaultError(text: Self.describe(error) + errors.text) }
      return "c\(round).bin"
    default:
      guard let partial else { throw DownloadFaultError(text: "no partial") }
      do {
        try await Publisher.publish(
          file: partial.fd, partial: DownloadStore.taskPath("pub-\(round)", "partial"),
          length: Int64(Self.publishSize), destination: "Downloads/p.bin", container: container,
          root: try container.directory(), logger: logger)
      } catch let error as DownloadError {
        throw DownloadFaultError(text: Self.describe(error) + errors.text)
      }
      return "p.bin=r\(round)"
    }
  }
}

extension DownloadFaultSubject {
  /// The error as a session reports it, with its code; `diskFull` is the library's word for `ENOSPC` alone, so its
  /// errno's meaning is added (the loop checks that an error names what failed: an `EDQUOT` or `EIO` reported as a
  /// full disk is caught).
  static func describe(_ error: DownloadError) -> String {
    "\(error.code): \(error)" + (error.code == .diskFull ? " (\(String(cString: strerror(ENOSPC))))" : "")
  }
}

struct DownloadFaultError: Error, CustomStringConvertible {
  var text: String
  var description: String { text }
}

/// What a logger was told at error level or above, one message after the other (" | agent log: …").
final class LogCollector: Sendable {
  private let lines = Mutex<[String]>([])
  func append(_ line: String) { lines.withLock { $0.append(line) } }
  var text: String { lines.withLock { $0.isEmpty ? "" : " | agent log: " + $0.joined(separator: "; ") } }
}

struct CollectingLogHandler: LogHandler {
  let collector: LogCollector
  var metadata: Logger.Metadata = [:]
  var logLevel: Logger.Level = .error

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) { collector.append("\(event.message)") }
}
