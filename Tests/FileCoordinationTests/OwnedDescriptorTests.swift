import Foundation
import Glibc
import SystemLayer
import TestSupport
import Testing

/// Owned descriptors (issue #34 item 4): a `SystemFD` owns its descriptor and closes it once — at `close()` or at
/// the end of its scope — and a second close, which in a process full of threads closes whoever got the number since
/// (a lock file's flock silently gone), is a programming error that traps in debug builds.
///
/// After a close the number may already be another thread's (the tests run in parallel): "closed" is checked as
/// `fstat` failing with `EBADF` or naming another file (device and inode) than the one opened.
///
/// The traps run in child processes (exit tests): the child dies, the test run goes on.
///
/// Mutants caught (each made once by hand, seen failing, restored):
/// - `SystemFD.deinit` skipping the close: `anOwnedDescriptorClosesAtTheEndOfItsScope`, `closeClosesAtOnce` and
///   `aBoxClosesWithItsLastReference` (the file is still open under its number).
/// - `SystemFD.closeOwned` ignoring `EBADF`: `aSecondCloseTrapsInDebugBuilds` (the child exits 0).
/// - `SystemFD.close()` without its assertion on a view: `closeOnAViewTrapsInDebugBuilds` (the child exits 0).
@Suite(.runSlot(.minutes(2)))
struct OwnedDescriptorTests {
  /// Device and inode of what `raw` names now; nil when it is not open (`EBADF`).
  static func identity(_ raw: Int32) -> [UInt64]? {
    var st = stat()
    guard fstat(raw, &st) == 0 else {
      #expect(errno == EBADF, "fstat(\(raw)): errno \(errno)")
      return nil
    }
    return [UInt64(st.st_dev), UInt64(st.st_ino)]
  }

  /// A file of its own in a fresh root, and its identity.
  static func file(_ root: TestRoot) throws -> (path: String, identity: [UInt64]) {
    let path = root.path + "/owned"
    #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
    let status = try FileManager.default.attributesOfItem(atPath: path)
    let device = try #require(status[.systemNumber] as? NSNumber).uint64Value
    let inode = try #require(status[.systemFileNumber] as? NSNumber).uint64Value
    return (path, [device, inode])
  }

  /// Open through the whole scope, after its last use too (a flock taken on it holds until then), and closed once
  /// the scope ends.
  @Test func anOwnedDescriptorClosesAtTheEndOfItsScope() throws {
    let root = try TestRoot()
    let (path, identity) = try Self.file(root)
    let raw: Int32
    do {
      let fd = try SystemFD.open(path, .readOnly)
      raw = fd.rawValue
      #expect(Self.identity(raw) == identity, "open, before the end of its scope")
    }
    #expect(Self.identity(raw) != identity, "descriptor \(raw) of \(path) still open after its scope ended")
  }

  /// `close()` closes at once, before the scope ends.
  @Test func closeClosesAtOnce() throws {
    let root = try TestRoot()
    let (path, identity) = try Self.file(root)
    let fd = try SystemFD.open(path, .readOnly)
    let raw = fd.rawValue
    fd.close()
    #expect(Self.identity(raw) != identity, "descriptor \(raw) of \(path) still open after close()")
  }

  /// A descriptor kept in a `DescriptorBox` closes with the box's last reference.
  @Test func aBoxClosesWithItsLastReference() throws {
    let root = try TestRoot()
    let (path, identity) = try Self.file(root)
    var box: DescriptorBox? = DescriptorBox(try SystemFD.open(path, .readOnly))
    let raw = box!.fd.rawValue
    var others = [box!]
    box = nil
    #expect(Self.identity(raw) == identity, "closed while a reference was left")
    others.removeAll()
    #expect(Self.identity(raw) != identity, "descriptor \(raw) of \(path) still open after the box went")
  }

  /// A view neither closes at the end of its scope nor makes its owner's close a double one.
  @Test func aViewNeverCloses() throws {
    let root = try TestRoot()
    let (path, identity) = try Self.file(root)
    let owner = try SystemFD.open(path, .readOnly)
    do {
      let view = SystemFD.view(owner.rawValue, path: path)
      let viewOwns = view.isOwner
      let borrowed = owner.borrowedView
      let borrowedOwns = borrowed.isOwner
      #expect(!viewOwns && !borrowedOwns)
    }
    #expect(Self.identity(owner.rawValue) == identity, "a view closed its owner's descriptor")
  }

  #if DEBUG
    /// The number closed behind the owner's back, then the owner closes: `EBADF`, a trap in debug builds, whose
    /// message says so. Without the first close the same child exits 0.
    @Test func aSecondCloseTrapsInDebugBuilds() async {
      let trapped = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        let fd = try SystemFD.open("/dev/null", .readOnly)
        _ = Glibc.close(fd.rawValue)
      }
      let message = String(decoding: trapped?.standardErrorContent ?? [], as: UTF8.self)
      #expect(message.contains("EBADF"), "\(message)")
      await #expect(processExitsWith: .success) {
        let fd = try SystemFD.open("/dev/null", .readOnly)
        _ = fd.rawValue
      }
    }

    /// `close()` on a view is a programming error: its owner closes it.
    @Test func closeOnAViewTrapsInDebugBuilds() async {
      let trapped = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
        let owner = try SystemFD.open("/dev/null", .readOnly)
        SystemFD.view(owner.rawValue, path: "/dev/null").close()
      }
      let message = String(decoding: trapped?.standardErrorContent ?? [], as: UTF8.self)
      #expect(message.contains("close() of a view"), "\(message)")
    }
  #endif
}
