import FileCoordination
import Foundation
import GroupContainerCore
import SystemLayer
import TestSupport
import Testing

@testable import SharedDefaults

/// Every file of a suite (lock/header, journal, snapshot, temp files, the `.corrupt-*` copies) and every layout
/// directory is reached beneath the container's descriptor, never by a path string: another process swapping a
/// directory on the way for a symlink to outside makes a call fail, saying so, and never makes it land outside.
///
/// Mutants this suite catches:
/// - the suite's lock file opened by path (`SystemFD.open(lockPath)`, then mapped, as before): lock files appear
///   outside (`suitesNeverReachOutsideWhileSwapped`);
/// - the journal opened by path (`SharedFileMapping(path:)`, as before): journals appear outside (same test);
/// - `GroupContainer.createLayout` making the layout by path (`mkdir` + `chmod`, as before): `Preferences`,
///   `Caches` appear outside (`layoutNeverReachesOutsideWhileSwapped`).
@Suite(.runSlot(.minutes(3))) struct DefaultsPathSafetyTests {
  static let group = "group.com.example.defaults-paths"
  static let suites = 200
  static let corrupt = 8

  /// A helper process swaps `Library/Preferences` with `Library/link` (a symlink to a directory outside the
  /// container) in a tight loop while this process opens suites, sets keys and synchronizes, and suites whose
  /// snapshot is garbage are repaired (moved aside). Nothing may appear outside; every failure says the path leads
  /// outside the container.
  @Test func suitesNeverReachOutsideWhileSwapped() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: container.path + "/Library/link", withDestinationPath: outside)
    // A suite opened before the attack keeps writing and synchronizing through it.
    let steady = try SharedDefaults(suiteName: "steady", container: container)
    try steady.set(0, forKey: "n")
    // Garbage snapshots: reading them moves them aside (`.corrupt-*`) and rewrites them.
    for k in 0..<Self.corrupt {
      try Data("not a plist \(k)".utf8).write(to: container.preferencesURL.appendingPathComponent("q\(k).plist"))
    }
    let swapper = try Child(.swap(a: "Library/Preferences", b: "Library/link"), root: root.path, group: Self.group)
    defer { swapper.kill() }
    await swapper.line { $0 == "swapping" }

    var refused: [String: Int] = [:]
    var opened = 0
    var synchronized = 0
    func attempt(_ body: () throws -> Void) -> Bool {
      do {
        try body()
        return true
      } catch let error as SharedDefaultsError {
        if let inner = error.containerError, inner.code == .pathEscapesContainer,
          inner.path?.hasPrefix("Library/Preferences") == true
        {
          refused["escapes", default: 0] += 1
        } else {
          refused["\(error)", default: 0] += 1
        }
      } catch {
        refused["\(error)", default: 0] += 1
      }
      return false
    }
    for i in 0..<Self.suites {
      var defaults: SharedDefaults?
      for _ in 0..<50 where defaults == nil {
        if attempt({ defaults = try SharedDefaults(suiteName: "s\(i)", container: container) }) { opened += 1 }
      }
      for k in 0..<4 {
        _ = attempt { try defaults?.set(i * 10 + k, forKey: "k\(k)") }
        _ = attempt { try steady.set(i * 10 + k, forKey: "n") }
      }
      // Retried as the open is: under a full test run the swapper has a core to itself, and one try per suite
      // once got no synchronize through in 200 suites.
      for _ in 0..<50 where defaults != nil {
        if attempt({ try defaults?.synchronize() }) {
          synchronized += 1
          break
        }
      }
      _ = attempt { try steady.synchronize() }
    }
    // The garbage snapshots: open and synchronize each until it goes through (the swap makes some tries fail).
    // Bounded by time, not by a number of tries: a synchronize resolves many paths, each of which the swap may
    // break, and 2,000 tries were not always enough on a loaded machine (CI failed so once).
    var repaired = 0
    var tries = 0
    let deadline = MonotonicClock.nanoseconds() + 30_000_000_000
    for k in 0..<Self.corrupt {
      var defaults: SharedDefaults?
      while defaults == nil && MonotonicClock.nanoseconds() < deadline {
        tries += 1
        _ = attempt { defaults = try SharedDefaults(suiteName: "q\(k)", container: container) }
      }
      while let suite = defaults, MonotonicClock.nanoseconds() < deadline {
        tries += 1
        if attempt({ try suite.synchronize() }) {
          repaired += 1
          break
        }
      }
    }
    swapper.kill()
    _ = await swapper.exit()

    let escaped = try FileManager.default.subpathsOfDirectory(atPath: outside)
    #expect(escaped.isEmpty, "\(escaped.count) files outside: \(escaped.prefix(8))")
    let unclear = refused.filter { $0.key != "escapes" }
    #expect(unclear.isEmpty, "\(unclear.count) unclear failures, e.g. \(unclear.prefix(3))")
    #expect(opened > 0 && synchronized > 0 && repaired == Self.corrupt, "\(opened) \(synchronized) \(repaired)")
    // The real directory (under whichever name it has now) holds the suites, and no garbage snapshot is left.
    let real =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: container.path + "/Library/Preferences")) == nil
      ? "Preferences" : "link"
    let inside = try FileManager.default.contentsOfDirectory(atPath: container.path + "/Library/" + real)
    #expect(inside.contains("steady.lock") && inside.contains("steady.journal"), "\(inside.sorted())")
    for k in 0..<Self.corrupt {
      let bytes = try Data(contentsOf: URL(fileURLWithPath: container.path + "/Library/\(real)/q\(k).plist"))
      #expect(bytes.starts(with: Array("bplist00".utf8)), "q\(k).plist was not rewritten")
    }
    let asides = inside.filter { $0.contains(".corrupt-") }.count
    print(
      "defaults swap race: \(opened)/\(Self.suites) suites opened, \(synchronized) synchronized, "
        + "\(asides) snapshots moved aside, \(tries) tries to repair them, refused \(refused)")
  }

  /// A helper process swaps `Library` with a symlink to outside while this process opens the container again
  /// and again (each open makes the layout): every open succeeds or fails clearly, and nothing is made outside.
  @Test func layoutNeverReachesOutsideWhileSwapped() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: container.path + "/link", withDestinationPath: outside)
    let swapper = try Child(.swap(a: "Library", b: "link"), root: root.path, group: Self.group)
    defer { swapper.kill() }
    await swapper.line { $0 == "swapping" }
    var opened = 0
    var refused: [String: Int] = [:]
    for _ in 0..<5_000 {
      do {
        _ = try GroupContainer(identifier: Self.group, root: root.url)
        opened += 1
      } catch let error where error.code == .pathEscapesContainer && error.path?.hasPrefix("Library/") == true {
        refused["escapes", default: 0] += 1
      } catch let error
        where error.underlyingError?.errno == ENOTDIR && error.underlyingError?.path.hasSuffix("/Library") == true
      {
        refused["Library is a link", default: 0] += 1
      } catch {
        refused["\(error)", default: 0] += 1
      }
    }
    swapper.kill()
    _ = await swapper.exit()
    let escaped = try FileManager.default.subpathsOfDirectory(atPath: outside)
    #expect(escaped.isEmpty, "\(escaped.count) made outside: \(escaped.prefix(8))")
    #expect(Set(refused.keys).isSubset(of: ["escapes", "Library is a link"]), "unclear failures: \(refused)")
    #expect(opened > 0)
    print("layout swap race: \(opened) opens, refused \(refused)")
  }

  /// A symlink in place of the container, or of a layout directory, is refused (never followed), and nothing is
  /// made where it points.
  @Test func aSymlinkInPlaceOfTheContainerOrALayoutDirectoryIsRefused() throws {
    let root = try TestRoot()
    let outside = root.path + "/outside"
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(
      atPath: root.path + "/group.com.example.linked", withDestinationPath: outside)
    #expect(throws: GroupContainerError.self) {
      try GroupContainer(identifier: "group.com.example.linked", root: root.url)
    }
    let container = try root.container(Self.group)
    try FileManager.default.removeItem(atPath: container.path + "/Library/Caches")
    try FileManager.default.createSymbolicLink(atPath: container.path + "/Library/Caches", withDestinationPath: outside)
    #expect(throws: GroupContainerError.self) { try GroupContainer(identifier: Self.group, root: root.url) }
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
  }
}
