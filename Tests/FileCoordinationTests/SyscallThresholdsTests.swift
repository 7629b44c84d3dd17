import AppLaunching
import FileCoordination
import Foundation
import GroupContainerCore
import Synchronization
import TestSupport
import Testing

/// Issue #37 item 7: system calls per operation, by kind, held to the thresholds of
/// `Benchmarks/Thresholds/syscalls.json` — figures that do not depend on the machine's speed, so a change that adds
/// an fsync to a write path fails `make test`, as swift-nio keeps its allocation thresholds beside its benchmarks.
///
/// Each operation runs in a gc-test-helper of its own (`HelperCommand.syscallCounts`), warmed up, then counted over
/// several runs by `IOFaultInjection` in count-only mode: every thread of that process, so a compaction or the
/// watcher's reads are counted too (the test process cannot count: its tests run in parallel). The figure is the
/// average per operation.
///
/// The durability calls (fsync, fdatasync, rename) must match exactly, both ways: one more is a slower write path,
/// one fewer may be a lost guarantee. The other kinds may move by `tolerance` (see there why).
///
/// When a change is meant to move a figure: `GC_UPDATE_SYSCALL_THRESHOLDS=1 swift test --skip-build --traits
/// TestHooks --disable-xctest --filter SyscallThresholdsTests` rewrites the file from a run; commit it with the change
/// and say why in the message.
///
/// Mutants this suite catches (each run once and seen failing): an fsync added to the defaults' append
/// (`DefaultsStore.append`: defaultsSet and defaultsUpdate, fsync 1 against 0); a rename added to the image store
/// (`DiskTier.write`: cacheStore, rename 2 against 1); the directory fsync of a durable atomic replace dropped
/// (`AtomicReplace`: coordinatedReplace with and without a presenter 1 against 2, defaultsSynchronize 6 against 8,
/// download 4 against 6).
@Suite(.runSlot(.minutes(3)))
struct SyscallThresholdsTests {
  static let group = "group.com.example.syscalls"
  static let file = repositoryDirectory.appendingPathComponent("Benchmarks/Thresholds/syscalls.json")
  static let durable: Set<String> = ["fsync", "fdatasync", "rename"]
  static let updating = ProcessInfo.processInfo.environment["GC_UPDATE_SYSCALL_THRESHOLDS"] == "1"
  /// The update's read-modify-write of the file, one operation at a time (the tests run in parallel).
  static let fileLock = Mutex<Void>(())

  /// How far a non-durable figure may move from its threshold, per operation: ±(0.5 + 10 %). The reads, opens and
  /// flocks of an operation depend on what its process's watcher thread sees meanwhile (inotify coalesces events,
  /// a presenter's answer may arrive before or after the writer looks), so they vary by a fraction of a call per
  /// operation between runs; a change that adds a whole call to every operation still moves them by 1.
  static func tolerance(_ kind: String, threshold: Double) -> Double {
    durable.contains(kind) ? 0.005 : 0.5 + 0.1 * threshold
  }

  /// Runs per operation: enough that a background step (a compaction) is averaged, few enough for a busy machine.
  static func runs(_ operation: HelperCommand.SyscallOperation) -> Int {
    switch operation {
    case .download: 4
    case .inboxSend, .coordinatedReplacePresented: 10
    default: 20
    }
  }

  @Test(arguments: HelperCommand.SyscallOperation.allCases)
  func systemCallsPerOperationStayAtTheirThresholds(_ operation: HelperCommand.SyscallOperation) async throws {
    let measured = try await Self.measure(operation)
    if Self.updating {
      try Self.update(operation, measured)
      return
    }
    let thresholds = try Self.load()
    let expected = try #require(
      thresholds[operation.rawValue],
      "\(operation.rawValue) has no thresholds in \(Self.file.path) (measured \(measured)): \(Self.howToUpdate)")
    for kind in Set(measured.keys).union(expected.keys).sorted() {
      let value = measured[kind] ?? 0
      let threshold = expected[kind] ?? 0
      let allowed = Self.tolerance(kind, threshold: threshold)
      #expect(
        abs(value - threshold) <= allowed,
        """
        \(operation.rawValue): \(kind) per operation measured \(Self.format(value)), threshold \
        \(Self.format(threshold)) (\(Self.durable.contains(kind) ? "exact" : "± \(Self.format(allowed))")) \
        — all measured: \(measured.sorted { $0.key < $1.key }.map { "\($0.key)=\(Self.format($0.value))" }); \
        if the change is intended: \(Self.howToUpdate)
        """)
    }
  }

  static let howToUpdate =
    "GC_UPDATE_SYSCALL_THRESHOLDS=1 swift test --skip-build --traits TestHooks --disable-xctest --filter "
    + "SyscallThresholdsTests rewrites Benchmarks/Thresholds/syscalls.json; commit it with the change and say why"

  /// The calls per operation of one counted run, by kind.
  static func measure(_ operation: HelperCommand.SyscallOperation) async throws -> [String: Double] {
    let root = try TestRoot()
    let container = try root.container(group)
    var peer: Child?
    var server: FileServer?
    defer { peer?.kill() }
    switch operation {
    case .coordinatedReplacePresented:
      peer = try Child(.present(item: "Documents/doc.txt"), root: root.path, group: group)
      #expect(await peer?.line { $0.hasPrefix("ready") } != nil, "the presenter did not start")
    case .inboxSend:
      try container.registerURLScheme("faultsink", launching: URL(fileURLWithPath: "/bin/false"))
      peer = try Child(
        .inboxReceiver(scheme: "faultsink", log: root.path + "/opened.log"), root: root.path, group: group)
      #expect(await peer?.line { $0.hasPrefix("ready ") } != nil, "the receiver did not start")
    case .download:
      server = try await FileServer.start()
    default: break
    }
    let count = runs(operation)
    let (status, output, errors) = try await runHelperToEnd(
      .syscallCounts(operation: operation, count: count, server: server.map { $0.url("").absoluteString }),
      root: root.path, group: group, timeout: 120)
    _ = await server?.stop()
    try #require(status == 0, "\(operation.rawValue): the helper exited \(String(describing: status)): \(errors)")
    let line = try #require(
      output.split(separator: "\n").first { $0.hasPrefix("calls ") }, "no calls line: \(output) \(errors)")
    return IOFaultRound.pairs(String(line.dropFirst(6))).compactMapValues { Int($0) }
      .mapValues { Double($0) / Double(count) }
  }

  /// operation → kind → calls per operation.
  static func load() throws -> [String: [String: Double]] {
    let object = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any]
    let operations = object?["operations"] as? [String: [String: Double]]
    return try #require(operations, "\(file.path) has no \"operations\" object")
  }

  /// Writes `measured` (rounded to 2 decimals) as the operation's thresholds, keeping the others.
  static func update(_ operation: HelperCommand.SyscallOperation, _ measured: [String: Double]) throws {
    try fileLock.withLock { _ in
      var object =
        (try? JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any]) ?? [:]
      var operations = object["operations"] as? [String: Any] ?? [:]
      operations[operation.rawValue] = measured.mapValues { ($0 * 100).rounded() / 100 }
      object["operations"] = operations
      object["about"] = about
      let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
      try data.write(to: file)
    }
  }

  static let about =
    "System calls per operation, by kind (averages over several runs in a fresh process, first uses excluded), "
    + "checked by SyscallThresholdsTests in `make test`: fsync, fdatasync and rename exactly, the other kinds "
    + "within 0.5 + 10 %. To update after an intended change: " + howToUpdate + ". See README.md beside this file."

  static func format(_ value: Double) -> String { String(format: "%.2f", value) }
}
