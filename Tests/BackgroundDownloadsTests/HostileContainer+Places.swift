// The tables of the hostile-container generator (HostileContainerTests.swift): where the library reads (places),
// what can be planted there (kinds), and the seeded choice of place × kind pairs a run covers.
import Foundation
import SystemLayer
import TestSupport

@testable import FileCoordination
@testable import GroupContainerCore

/// Names in a template container that only a run can tell (a task id, a commit's sequence, an entry's hash), and
/// in a combo's copy the live receiver's inbox.
struct HostileNames: Sendable {
  var task = ""
  /// A task the template left unfinished, with a partial and a control (`tasks/<id>`, no extension).
  var waitingTask = ""
  var commit = ""
  var event = ""
  var cacheEntry = ""
  /// `.coordination/inbox/<pid>.<start>` of the live Inbox receiver (set once it runs).
  var receiverInbox = ""

  /// The first file under `directory` (relative to `container`) whose name satisfies `match`, depth first, sorted.
  static func first(in container: String, _ directory: String, _ match: (String) -> Bool) -> String {
    let walker = FileManager.default.enumerator(atPath: container + "/" + directory)
    var found: [String] = []
    while let path = walker?.nextObject() as? String {
      var info = stat()
      if lstat(container + "/" + directory + "/" + path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
        match((path as NSString).lastPathComponent)
      {
        found.append(directory + "/" + path)
      }
    }
    return found.sorted().first ?? ""
  }

  /// Reads the names the template's clean round left.
  init(template container: String) {
    task = Self.first(in: container, ".coordination/downloads/tasks") { $0.hasSuffix(".task") }
    commit = Self.first(in: container, ".coordination/downloads/commits") { $0.hasSuffix(".commit") }
    event = Self.first(in: container, ".coordination/downloads/sessions") { $0.hasSuffix(".event") }
    cacheEntry = Self.first(in: container, "Library/Caches/faults") { !$0.hasPrefix(".") }
  }
}

/// A path in a container that some module reads (the list and where each comes from: HostileContainerTests.swift's
/// header).
struct HostilePlace: Sendable, CustomStringConvertible {
  var name: String
  var isDirectory = false
  /// Planted once the Inbox receiver runs (its inbox is named after it).
  var live = false
  var path: @Sendable (HostileNames) -> String
  /// Writes the valid file the place holds before the plant, in the pair's own container (its root's path), when
  /// the template's cannot serve: a file that names paths of the pair's root.
  var prepare: (@Sendable (_ root: String) throws -> Void)?

  var description: String { name }

  func preparing(_ prepare: @escaping @Sendable (_ root: String) throws -> Void) -> HostilePlace {
    var place = self
    place.prepare = prepare
    return place
  }

  init(
    _ name: String, directory: Bool = false, live: Bool = false, _ path: @escaping @Sendable (HostileNames) -> String
  ) {
    self.name = name
    self.isDirectory = directory
    self.live = live
    self.path = path
  }

  init(_ name: String, directory: Bool = false, fixed: String) {
    self.init(name, directory: directory) { _ in fixed }
  }

  static let docLock =
    ".coordination/locks/" + LockOrder.Key(path: try! ContainerPath("Documents/doc.txt"), kind: .item).fileName
  static let docBucket =
    ".coordination/presenters/"
    + PresenterRegistry.bucketName(try! ContainerPath("Documents/doc.txt").bytesHash)

  static let docBucketIndex = PresenterBucketIndex.path(
    of: PresenterRegistry.bucketName(try! ContainerPath("Documents/doc.txt").bytesHash))

  /// The records' suite of the run's container (`ActivityStore.suiteName(for:)`).
  static let activities = "group.com.example.hostile.liveactivities"

  static let all: [HostilePlace] = [
    // FileCoordination (CoordinationSpace.swift's layout)
    HostilePlace("coordination.counters", fixed: ".coordination/counters"),
    HostilePlace("lock file of Documents/doc.txt", fixed: docLock),
    HostilePlace("liveness lock of a dead process", fixed: ".coordination/processes/99999.12345.lock"),
    HostilePlace("presenter registration of doc.txt", fixed: docBucket + "/99999.12345.1"),
    HostilePlace("presenters bucket of doc.txt", directory: true, fixed: docBucket),
    HostilePlace("presenter index of doc.txt's bucket", fixed: docBucketIndex),
    HostilePlace("message in the receiver's inbox", live: true) { $0.receiverInbox + "/1.1.1.prepare" },
    HostilePlace("receiver's ack board (.acks)", live: true) { $0.receiverInbox + "/.acks" },
    HostilePlace("receiver's inbox socket", live: true) { $0.receiverInbox + "/.socket" },
    HostilePlace("first ack board of the pool", fixed: ".coordination/acks/0"),
    HostilePlace("ack board pool", directory: true, fixed: ".coordination/acks"),
    HostilePlace("inbox of a dead process", directory: true, fixed: ".coordination/inbox/99999.12345"),
    HostilePlace("scheme registration faultsink", fixed: ".coordination/schemes/faultsink"),
    HostilePlace("receiver's handler registration", live: true) {
      ".coordination/handlers/faultsink." + ($0.receiverInbox as NSString).lastPathComponent
    },
    HostilePlace("staging directory", directory: true, fixed: ".coordination/staging"),
    HostilePlace("memory-pressure message", fixed: ".coordination/memory-pressure"),
    // SharedDefaults (DefaultsStore.swift, ExportMirror.swift: Library/Preferences/<suite>.*)
    HostilePlace("defaults header (faults.lock)", fixed: "Library/Preferences/faults.lock"),
    HostilePlace("defaults journal", fixed: "Library/Preferences/faults.journal"),
    HostilePlace("defaults snapshot", fixed: "Library/Preferences/faults.snapshot"),
    HostilePlace("defaults exported snapshot", fixed: "Library/Preferences/faults.snapshot.exported"),
    HostilePlace("defaults export plist", fixed: "Library/Preferences/faults.plist"),
    HostilePlace("defaults export history", fixed: "Library/Preferences/faults.plist.history"),
    // ImageCache (DiskTier.swift)
    HostilePlace("cache counters", fixed: ".coordination/caches/faults.counters"),
    HostilePlace("cache entry") { $0.cacheEntry },
    HostilePlace("cache directory", directory: true) { ($0.cacheEntry as NSString).deletingLastPathComponent },
    // BackgroundDownloads (DownloadStore.swift)
    HostilePlace("downloads signal", fixed: ".coordination/downloads/signal"),
    HostilePlace("download agent lock", fixed: ".coordination/downloads/agent.lock"),
    HostilePlace("download agent log", fixed: ".coordination/downloads/agent.log"),
    HostilePlace("download task record") { $0.task },
    HostilePlace("download task status") { ($0.task as NSString).deletingPathExtension + ".status" },
    HostilePlace("download task control") { $0.waitingTask + ".control" },
    HostilePlace("download partial") { $0.waitingTask + ".partial" },
    HostilePlace("download commit") { $0.commit },
    HostilePlace("download session attach lock", fixed: ".coordination/downloads/sessions/hostile/attach.lock"),
    HostilePlace("download session event") { $0.event },
    // Decides what runs (DESIGN.md: trusted only when nobody but its owner can write it): the agent starts the
    // program it names for the session "hostile", whose template event waits with nobody attached.
    HostilePlace("download session relaunch record", fixed: ".coordination/downloads/sessions/hostile/app")
      .preparing { try HostileRun.registerRelaunch(root: $0) },
    // LiveActivities (ActivityStore.swift): the records' suite, the switch, an old version's record file to import
    HostilePlace("activities suite journal", fixed: "Library/Preferences/\(activities).journal"),
    HostilePlace("activities suite header", fixed: "Library/Preferences/\(activities).lock"),
    HostilePlace("activities authorization", fixed: ".coordination/activities/authorization"),
    HostilePlace(
      "old activity record file", fixed: ".coordination/activities/00000000-0000-4000-8000-000000000001.activity"),
    // Items the operations write (a coordinated write's target, a move's folder, the hand-over's Inbox)
    HostilePlace("coordinated document", fixed: "Documents/doc.txt"),
    HostilePlace("coordinated move's folder", directory: true, fixed: "Documents/m"),
    HostilePlace("hand-over Inbox", directory: true, fixed: "Documents/Inbox"),
  ]
}

enum HostileKind: String, CaseIterable, Sendable {
  case fifo, socket, symlinkInside, symlinkOutside, directory, empty, truncated, sparse, wrongOwner, readOnly

  /// Whether the kind means anything at the place (a directory is not truncated nor replaced by a directory).
  func applies(to place: HostilePlace) -> Bool {
    !(place.isDirectory && (self == .directory || self == .truncated))
  }
}

/// One pair of the run.
struct HostileCombo: Sendable, CustomStringConvertible {
  var place: HostilePlace
  var kind: HostileKind
  var description: String { "\(place.name) × \(kind.rawValue)" }

  /// Every applicable pair, or `count` of them chosen from `seed`: every place once before any twice, and at each
  /// place the kind used least so far (ties broken by the seed).
  static func chosen(seed: UInt64, count: Int?) -> [HostileCombo] {
    let every = HostilePlace.all.flatMap { place in
      HostileKind.allCases.filter { $0.applies(to: place) }.map { HostileCombo(place: place, kind: $0) }
    }
    guard let count, count < every.count else { return every }
    var random = SplitMix64(seed: seed)
    var used: [HostileKind: Int] = [:]
    var taken = Set<String>()
    var result: [HostileCombo] = []
    var places = HostilePlace.all.shuffled(using: &random)
    while result.count < count {
      for place in places where result.count < count {
        let kinds = HostileKind.allCases.filter { $0.applies(to: place) && !taken.contains("\(place.name)|\($0)") }
          .shuffled(using: &random).sorted { used[$0, default: 0] < used[$1, default: 0] }
        guard let kind = kinds.first else { continue }
        used[kind, default: 0] += 1
        taken.insert("\(place.name)|\(kind)")
        result.append(HostileCombo(place: place, kind: kind))
      }
      places.shuffle(using: &random)
    }
    return result
  }
}

/// What a planted link points at: a canary directory outside the container (`<root>/canary`, holding `file`,
/// "canary") and `Documents/inside` (a file, "inside") with `Documents/insidedir` inside it. A link written through
/// changes one of them; every generator run and storm checks them afterwards.
struct LinkTargets {
  let canary: String
  let inside: String
  /// The canary file as made (inode, modification time), to compare with after the run.
  let canaryFile: stat

  init(root: String, container: String) throws {
    canary = root + "/canary"
    try FileManager.default.createDirectory(atPath: canary, withIntermediateDirectories: false)
    try Data("canary".utf8).write(to: URL(fileURLWithPath: canary + "/file"))
    var info = stat()
    _ = lstat(canary + "/file", &info)
    canaryFile = info
    inside = container + "/Documents/inside"
    try Data("inside".utf8).write(to: URL(fileURLWithPath: inside))
    try FileManager.default.createDirectory(atPath: inside + "dir", withIntermediateDirectories: false)
  }
}

/// Plants `kind` at `path` (absolute) in place of what is there. Returns nil, or why the kind cannot be planted
/// here (the pair is skipped and reported).
func plant(_ kind: HostileKind, at path: String, isDirectory: Bool, canary: String, inside: String) throws -> String? {
  var info = stat()
  let exists = lstat(path, &info) == 0
  func check(_ result: Int32, _ what: String) throws {
    guard result == 0 else { throw HostilePlantError(description: "\(what) \(path): errno \(errno)") }
  }
  /// `truncate` to `size`; at a live place (a message in the running receiver's inbox) the receiver may read and
  /// remove the file between the look above, or the harness's own create, and this call (CI: "truncate
  /// …/1.1.1.prepare: errno 2"): then there is nothing left to resize, and the pair is skipped, saying so.
  func resize(to size: off_t) throws -> String? {
    guard truncate(path, size) != 0 else { return nil }
    guard errno == ENOENT else { throw HostilePlantError(description: "truncate \(path): errno \(errno)") }
    return "the file was removed (by the process that reads it) before it could be resized"
  }
  func replace() throws {
    if exists { try FileManager.default.removeItem(atPath: path) }
    try FileManager.default.createDirectory(
      atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
  }
  switch kind {
  case .fifo:
    try replace()
    try check(mkfifo(path, 0o600), "mkfifo")
  case .socket:
    try replace()
    // sun_path holds 108 bytes: bound at a short path, then renamed into place.
    let short = "/tmp/gch-\(UUID().uuidString.prefix(8))"
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      for (i, byte) in short.utf8.enumerated() { raw[i] = byte }
    }
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    try check(bound, "bind")
    defer { unlink(short) }  // gone already once renamed
    try check(rename(short, path), "rename")
  case .symlinkInside:
    try replace()
    try check(symlink(isDirectory ? inside + "dir" : inside, path), "symlink")
  case .symlinkOutside:
    try replace()
    try check(symlink(isDirectory ? canary : canary + "/file", path), "symlink")
  case .directory:
    try replace()
    try check(mkdir(path, 0o700), "mkdir")
  case .empty:
    try replace()
    try check(FileManager.default.createFile(atPath: path, contents: nil) ? 0 : -1, "create")
  case .truncated:
    guard exists, info.st_mode & S_IFMT == S_IFREG, info.st_size >= 2 else {
      return "no valid file here to cut (\(exists ? "\(info.st_size) bytes" : "none"))"
    }
    if let gone = try resize(to: info.st_size / 2) { return gone }
  case .sparse:
    // A valid file keeps its bytes and grows to 10 GB (a header that reads, a size that does not); else a new one.
    if !exists || info.st_mode & S_IFMT != S_IFREG {
      try replace()
      try check(FileManager.default.createFile(atPath: path, contents: nil) ? 0 : -1, "create")
    }
    if let gone = try resize(to: 10 << 30) { return gone }
  case .wrongOwner:
    guard geteuid() == 0 else { return "needs root to give a file to another user" }
    if !exists { try check(FileManager.default.createFile(atPath: path, contents: nil) ? 0 : -1, "create") }
    // At a live place the reader may take the file first, as for `resize`.
    guard try chownTree(path, to: 65534) else {
      return "the file was removed (by the process that reads it) before it could be given away"
    }
  case .readOnly:
    if !exists {
      if isDirectory {
        try check(mkdir(path, 0o700), "mkdir")
      } else {
        try check(FileManager.default.createFile(atPath: path, contents: nil) ? 0 : -1, "create")
      }
    }
    // At a live place (a message in the running receiver's inbox) the receiver may read and remove the file at any
    // moment: then there is nothing left to make read-only (chmod and chattr both failed on it in make test).
    if chmod(path, isDirectory ? 0o500 : 0o400) != 0 {
      if errno == ENOENT { return nil }
      try check(-1, "chmod")
    }
    // Root ignores modes: as root the file is also made immutable (no write, rename over, unlink, or entry made
    // in a directory), which binds root too. The run makes it mutable again before removing the container.
    // (Files and directories only: a socket or FIFO takes no attributes.)
    var now = stat()
    if geteuid() == 0, lstat(path, &now) == 0, [S_IFREG, S_IFDIR].contains(now.st_mode & S_IFMT) {
      let status = try runTool("/usr/bin/chattr", ["+i", path])
      var after = stat()
      let taken = lstat(path, &after) != 0 || after.st_ino != now.st_ino
      if !taken { try check(status, "chattr +i") }
    }
  }
  return nil
}

/// `chown -R` to `uid`, links not followed.
/// Gives `path` and what it holds to `uid`; false when `path` itself is gone (a file beneath it that goes throws).
private func chownTree(_ path: String, to uid: uid_t) throws -> Bool {
  guard lchown(path, uid, uid) == 0 else {
    if errno == ENOENT { return false }
    throw HostilePlantError(description: "lchown \(path): errno \(errno)")
  }
  var info = stat()
  guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return true }
  for name in try FileManager.default.contentsOfDirectory(atPath: path) {
    guard try chownTree(path + "/" + name, to: uid) else {
      throw HostilePlantError(description: "lchown \(path)/\(name): errno \(ENOENT)")
    }
  }
  return true
}

struct HostilePlantError: Error, CustomStringConvertible {
  var description: String
}
