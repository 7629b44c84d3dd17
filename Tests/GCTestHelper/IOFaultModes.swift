import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import ImageCache
import LiveActivities
import PropertyList
import ScoreboardKit
import SystemLayer
import SystemPackage
import TestImageKit

@testable import SharedDefaults

/// One round of an I/O-error loop (`HelperCommand.ioFault`; IOErrorInjectionTests): the setup unarmed, then
/// `IOFaultInjection` armed around the one operation under test, so N counts that operation's calls — on every
/// thread of this process, a background compaction's too.
func runIOFaultRound(_ command: HelperCommand, _ container: GroupContainer) async throws {
  guard case .ioFault(let operation, let callName, let nth, let code, let round) = command else { return }
  let subject = try makeIOFaultSubject(operation, container)
  faultLine("seen \(try subject.seen())")
  try subject.prepare(round)
  IOFaultInjection.arm(callName.flatMap(IOFaultInjection.Call.init(rawValue:)), nth: nth, errno: Errno(rawValue: code))
  // Where the failure struck: the return addresses in this executable, as offsets (`llvm-symbolizer
  // --obj=gc-test-helper <offsets>` names them; the executable exports no symbols for callStackSymbols).
  let maps = (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? ""
  let base =
    maps.split(separator: "\n").first { $0.hasSuffix("gc-test-helper") }
    .flatMap { UInt($0.prefix { $0 != "-" }, radix: 16) } ?? 0
  IOFaultInjection.observe { call in
    let offsets = Thread.callStackReturnAddresses.map { "0x" + String($0.uintValue &- base &- 1, radix: 16) }
    faultLine("where \(call.rawValue) \(offsets.prefix(24).joined(separator: " "))")
  }
  let result: Result<String, any Error>
  do { result = .success(try await subject.run(round)) } catch { result = .failure(error) }
  let report = IOFaultInjection.disarm()
  switch result {
  case .success(let acknowledged): faultLine("result ok \(acknowledged)")
  case .failure(let error):
    faultLine("result error \(String(describing: error).replacingOccurrences(of: "\n", with: " "))")
  }
  faultLine("injected \(report.injected)")
  // Who this process is in lock words, temp-file names and liveness: never a start time lost to a failed read.
  let start = (CurrentProcess.status(of: getpid())?.startTime ?? 0) & 0xFFFF_FFFF
  faultLine(
    "identity \(SharedMemoryLock.me >> 32 == start && AtomicReplace.writer.hasSuffix(".\(start)") ? "ok" : "lost")")
  let calls = report.calls.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue)=\($0.value)" }
  faultLine("calls \(calls.joined(separator: ","))")
  // The next operation, unarmed, in the process that saw the failure: it must succeed.
  do {
    try subject.prepare(round + 100_000)
    faultLine("next ok \(try await subject.run(round + 100_000))")
  } catch {
    faultLine("next error \(String(describing: error).replacingOccurrences(of: "\n", with: " "))")
  }
}

func faultLine(_ text: String) {
  FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// What one operation works on: its state as a fresh process reads it, its unarmed setup, and the operation.
protocol IOFaultSubject {
  /// The state, one line: the tests compare it with what was acknowledged before.
  func seen() throws -> String
  /// Unarmed, before the operation (e.g. the set that a synchronize then makes durable).
  func prepare(_ round: Int) throws
  /// The operation under test; returns what it acknowledged.
  func run(_ round: Int) async throws -> String
}

extension IOFaultSubject {
  func prepare(_ round: Int) throws {}
}

func makeIOFaultSubject(_ operation: HelperCommand.IOFaultOperation, _ container: GroupContainer) throws
  -> any IOFaultSubject
{
  switch operation {
  case .defaultsSet, .defaultsUpdate, .defaultsSynchronize, .defaultsCompaction:
    return try DefaultsFaultSubject(operation: operation, container: container)
  case .coordinatedWrite:
    return try CoordinatedWriteFaultSubject(container: container)
  case .coordinatedMove:
    return try CoordinatedMoveFaultSubject(container: container)
  case .cacheStore, .cacheTrim, .inboxSend, .activityUpdate:
    return try makeOtherFaultSubject(operation, container)
  case .downloadCheckpoint, .downloadPublish:
    return try DownloadFaultSubject(operation: operation, container: container)
  }
}

func makeOtherFaultSubject(_ operation: HelperCommand.IOFaultOperation, _ container: GroupContainer) throws
  -> any IOFaultSubject
{
  switch operation {
  case .cacheStore, .cacheTrim: return try CacheFaultSubject(operation: operation, container: container)
  case .activityUpdate: return try ActivityFaultSubject(container: container)
  default: return InboxFaultSubject(container: container)
  }
}

/// The defaults operations on the suite "faults": a set of `s<round>`, an `update` of `counter`, a set of
/// `y<round>` then `synchronize()`, a set of `c<round>` then a compaction that empties the journal.
struct DefaultsFaultSubject: IOFaultSubject {
  let operation: HelperCommand.IOFaultOperation
  let defaults: SharedDefaults

  init(operation: HelperCommand.IOFaultOperation, container: GroupContainer) throws {
    self.operation = operation
    defaults = try SharedDefaults(suiteName: "faults", container: container)
  }

  /// Every key, "k=v" sorted (integers; anything else as "?").
  func seen() -> String {
    defaults.propertyListRepresentation().sorted { $0.key < $1.key }
      .map { "\($0.key)=\($0.value.intValue.map(String.init) ?? "?")" }.joined(separator: ",")
  }

  func prepare(_ round: Int) throws {
    switch operation {
    case .defaultsSynchronize: try defaults.set(value: .integer(PropertyListInteger(round)), forKey: "y\(round)")
    case .defaultsCompaction: try defaults.set(value: .integer(PropertyListInteger(round)), forKey: "c\(round)")
    default: break
    }
  }

  func run(_ round: Int) throws -> String {
    switch operation {
    case .defaultsSet:
      try defaults.set(value: .integer(PropertyListInteger(round)), forKey: "s\(round)")
      return "s\(round)=\(round)"
    case .defaultsUpdate:
      let value = try defaults.update("counter") { .integer(PropertyListInteger(($0?.intValue ?? 0) + 1)) }
      return "counter=\(value?.intValue ?? -1)"
    case .defaultsSynchronize:
      try defaults.synchronize()
      return "y\(round)=\(round)"
    default:
      try defaults.store.synchronize(emptyingJournal: true)
      return "c\(round)=\(round)"
    }
  }
}

/// A coordinated, durable replace of `Documents/doc.txt` with 20,000 bytes that say which round wrote them.
struct CoordinatedWriteFaultSubject: IOFaultSubject {
  let container: GroupContainer
  var url: URL { container.documentsURL.appendingPathComponent("doc.txt") }

  init(container: GroupContainer) throws { self.container = container }

  static func contents(_ round: Int) -> Data {
    let unit = Array("r\(round);".utf8)
    return Data((0..<20_000).map { unit[$0 % unit.count] })
  }

  /// "none", "r<round>" when the file is whole, or "torn <bytes>".
  func seen() throws -> String {
    // Never the whole of a file grown sparse to 10 GB (HostileContainerTests): reading it took minutes.
    var info = stat()
    if lstat(url.path, &info) == 0, info.st_size > 1 << 20 { return "torn \(info.st_size)" }
    guard let data = FileManager.default.contents(atPath: url.path) else { return "none" }
    let text = String(decoding: data.prefix(16), as: UTF8.self)
    guard let end = text.firstIndex(of: ";"), let round = Int(text.dropFirst().prefix(upTo: end)),
      data == Self.contents(round)
    else { return "torn \(data.count)" }
    return "r\(round)"
  }

  func run(_ round: Int) throws -> String {
    try FileCoordinator().coordinate(writingItemAt: url, options: .forReplacing) { url in
      try container.write(Self.contents(round), to: url, durable: true)
    }
    return "r\(round)"
  }
}

/// A coordinated move of `Documents/m/a.txt` to `Documents/m/b.txt`, or back (whichever is there), the rename
/// made through SystemLayer (so it is injected too), with the coordinator told of the move.
struct CoordinatedMoveFaultSubject: IOFaultSubject {
  let container: GroupContainer
  let directory: ContainerDirectory
  static let contents = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7) })

  init(container: GroupContainer) throws {
    self.container = container
    directory = try ContainerDirectory(path: container.url.path)
    let folder = container.documentsURL.appendingPathComponent("m")
    if !FileManager.default.fileExists(atPath: folder.path) {
      try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
      try container.write(Self.contents, to: folder.appendingPathComponent("a.txt"))
    }
  }

  /// The names present in `Documents/m`, each with "whole" or "torn".
  func seen() throws -> String {
    let folder = container.documentsURL.appendingPathComponent("m")
    return try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().map { name in
      let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)
      return "\(name):\(data == Self.contents ? "whole" : "torn")"
    }.joined(separator: ",")
  }

  func run(_ round: Int) throws -> String {
    let folder = container.documentsURL.appendingPathComponent("m")
    let fromA = FileManager.default.fileExists(atPath: folder.appendingPathComponent("a.txt").path)
    let (from, to) = fromA ? ("a.txt", "b.txt") : ("b.txt", "a.txt")
    let coordinator = FileCoordinator()
    try coordinator.coordinate(
      writingItemAt: folder.appendingPathComponent(from), options: .forMoving,
      writingItemAt: folder.appendingPathComponent(to), options: .forReplacing
    ) { source, destination in
      try directory.rename("Documents/m/" + from, to: to)
      coordinator.item(at: source, didMoveTo: destination)
    }
    return to
  }
}

/// The image cache "faults": a store of `k<round>` (a 64×64 PNG whose seed is the round), or, after three stores
/// of 6 kB images unarmed, a trim of a cache limited to 16 kB.
struct CacheFaultSubject: IOFaultSubject {
  let operation: HelperCommand.IOFaultOperation
  let cache: SharedImageCache
  let limited: SharedImageCache

  init(operation: HelperCommand.IOFaultOperation, container: GroupContainer) throws {
    self.operation = operation
    var limits = SharedImageCache.Limits()
    limits.recencyGranularity = .zero
    cache = try SharedImageCache(name: "faults", container: container, limits: limits)
    limits.diskBytes = 16_000
    limited = try SharedImageCache(name: "faults", container: container, limits: limits)
  }

  static func image(_ key: String) -> Data {
    TestPNG.make(width: 64, height: 64, seed: UInt64(key.dropFirst().prefix { $0 != "-" }) ?? 0)
  }

  /// Every entry on disk, "key=ok" when it reads back as stored, "key=bad" (torn) or "key=miss" (listed, not read).
  func seen() throws -> String {
    try cache.entries().map(\.key).sorted().map { key in
      guard let image = try cache.image(forKey: key) else { return "\(key)=miss" }
      return "\(key)=\(image.data == Self.image(key) ? "ok" : "bad")"
    }.joined(separator: ",")
  }

  func prepare(_ round: Int) throws {
    guard operation == .cacheTrim else { return }
    for i in 0..<3 { try cache.store(Self.image("k\(round)-\(i)"), forKey: "k\(round)-\(i)") }
  }

  func run(_ round: Int) throws -> String {
    if operation == .cacheStore {
      try cache.store(Self.image("k\(round)"), forKey: "k\(round)")
      return "k\(round)"
    }
    let report = try limited.trim()
    return "trimmed=\(report?.removedEntries ?? -1),remaining=\(report?.remainingBytes ?? -1)"
  }
}

/// An update of the scoreboard activity's home score to the round (the activity requested once, unarmed).
struct ActivityFaultSubject: IOFaultSubject {
  let activity: Activity<ScoreboardAttributes>

  init(container: GroupContainer) throws {
    activity =
      try Activity<ScoreboardAttributes>.activities(in: container).first
      ?? Activity.request(
        attributes: ScoreboardAttributes(homeTeam: "home", awayTeam: "away"),
        content: ActivityContent(state: .init(), staleDate: nil), in: container)
  }

  /// "home=<score>" as this fresh process reads the record.
  func seen() -> String { "home=\(activity.content.state.homeScore)" }

  func run(_ round: Int) async throws -> String {
    var state = ScoreboardAttributes.ContentState()
    state.homeScore = round
    try await activity.update(ActivityContent(state: state, staleDate: nil))
    return "home=\(round)"
  }
}

/// A hand-over of a 4 kB file to the scheme "faultsink", received by a gc-test-helper `inboxReceiver` the test
/// runs; the sent file is `<root>/send-<round>`, its copy lands in `Documents/Inbox/`.
struct InboxFaultSubject: IOFaultSubject {
  let container: GroupContainer
  var inbox: URL { container.documentsURL.appendingPathComponent("Inbox") }

  static func contents(_ name: String) -> Data {
    let unit = Array("\(name);".utf8)
    return Data((0..<4096).map { unit[$0 % unit.count] })
  }

  /// The Inbox's files, "name=ok" when whole (as sent), else "name=bad".
  func seen() -> String {
    ((try? FileManager.default.contentsOfDirectory(atPath: inbox.path)) ?? []).sorted().map { name in
      let data = FileManager.default.contents(atPath: inbox.appendingPathComponent(name).path)
      return "\(name)=\(data == Self.contents(name) ? "ok" : "bad")"
    }.joined(separator: ",")
  }

  func prepare(_ round: Int) throws {
    let source = container.url.deletingLastPathComponent().appendingPathComponent("send-\(round)")
    try Self.contents("send-\(round)").write(to: source)
  }

  func run(_ round: Int) async throws -> String {
    let source = container.url.deletingLastPathComponent().appendingPathComponent("send-\(round)")
    return try await container.send(file: source, toScheme: "faultsink", timeout: .seconds(5)).lastPathComponent
  }
}
