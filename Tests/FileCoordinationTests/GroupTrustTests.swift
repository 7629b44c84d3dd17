import Foundation
import TestSupport
import Testing

@testable import AppLaunching
@testable import FileCoordination
@testable import GroupContainerCore
@testable import SystemLayer

/// Issue 33 item 1: in a group-shared container, member B must not make member A run B's program through A's URL
/// scheme registration — by `open(_:)` or by intent delivery, which both start the registered program. Two real
/// users in one group (`GroupMembers`, run with `setpriv`); A is not root (root counts as a trusted owner, so a test
/// with A as root would prove nothing) and opens with the built `groupctl`. Each planted registration names a
/// program that leaves a marker file: no marker, nothing ran.
///
/// A's registration is written by this (root) process through the library and given to A: the file the library
/// writes, owned by A, as A's app would leave it.
///
/// Mutants this suite catches (OwnerOnlyWritable.problem, SystemLayer):
/// - without the owner check: B's file renamed over A's is followed (`bCannotMakeARunItsProgram`, `.replace`);
/// - without the link-count check: a second link to a file of A's is followed (`.secondLinkToAsFile`);
/// - without the mode check: A's registration made group-writable and edited by B is followed
///   (`.groupWritableThenEdited`);
/// - registrations written with the container's 0660 again: B's in-place edit succeeds
///   (`anInPlaceEditIsDeniedToOtherMembers`, `aRegistrationIsWrittenOwnerOnlyWritable`).
@Suite(.runSlot(.minutes(8)), .enabled(if: GroupMembers.available, "needs root, setpriv, useradd and groupadd"))
struct GroupTrustTests {
  /// Which of A's deliveries starts the registered program.
  enum Delivery: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case open, intent
    var testDescription: String { rawValue }
  }

  /// One test's world: the users, a group container, A's registration of `scheme`, and B's program ready to plant.
  struct World {
    let users: GroupMembers
    let root: TestRoot
    let container: GroupContainer
    let scheme = "gctrust"
    /// Left by A's own program.
    let ownMarker: String
    /// Left by B's program.
    let plantedMarker: String
    /// B's registration (naming B's program), in a file B can read.
    let plantedSource: String
    var registration: String { container.path + "/.coordination/schemes/" + scheme }

    init() async throws {
      users = try await GroupMembers.make()
      root = try TestRoot()
      container = try users.container(in: root, "group.com.example.trust")
      let markers = try users.markers(in: root)
      ownMarker = markers + "/own"
      plantedMarker = markers + "/planted"
      plantedSource = root.path + "/planted.json"
      // A's app registers its scheme: the library's file, given to A.
      try container.registerURLScheme(
        scheme, launching: URL(fileURLWithPath: "/bin/sh"), arguments: Self.touch(ownMarker))
      #expect(chown(registration, users.a, users.group) == 0)
      let planted = SchemeRegistration(scheme: scheme, executable: "/bin/sh", arguments: Self.touch(plantedMarker))
      try JSONEncoder().encode(planted).write(to: URL(fileURLWithPath: plantedSource))
      #expect(chmod(plantedSource, 0o644) == 0)
    }

    /// Arguments for `/bin/sh` that create `marker` (the URL the opener appends lands in `$1`, unused).
    static func touch(_ marker: String) -> [String] { ["-c", "touch \"$0\"", marker] }

    /// A's delivery through the built `groupctl`, run as A.
    func deliver(_ delivery: Delivery) async throws -> (status: Int32?, out: String, err: String) {
      let groupctl = productsDirectory.appendingPathComponent("groupctl").path
      let arguments =
        switch delivery {
        case .open: ["open", container.identifier, "\(scheme)://finished", "--timeout", "30"]
        case .intent: ["intent", container.identifier, scheme, "EchoIntent", "--timeout", "30"]
        }
      return try await users.run(as: users.a, groupctl, arguments + ["--root", root.path])
    }

    func attack(_ attack: TrustAttack) async throws {
      try await attack.perform(on: registration, from: plantedSource, users: users, scratch: root.path)
    }
  }

  @Test("A's own registration in a group container is followed: its program runs, as A", arguments: Delivery.allCases)
  func aFollowsItsOwnRegistration(via delivery: Delivery) async throws {
    let world = try await World()
    let result = try await world.deliver(delivery)
    // The program only leaves its marker (it installs no handler): the delivery then fails as a launch.
    #expect(result.status == 1, "\(result)")
    #expect(result.err.contains("exited (status 0) before handling"), "\(result.err)")
    #expect(GroupMembers.owner(world.ownMarker) == world.users.a, "A's program did not run as A: \(result.err)")
  }

  @Test(
    "B's program is never run by A's delivery, and A is told which file is wrong and how to fix it",
    arguments: TrustAttack.allCases, Delivery.allCases)
  func bCannotMakeARunItsProgram(attack: TrustAttack, via delivery: Delivery) async throws {
    let world = try await World()
    try await world.attack(attack)
    let result = try await world.deliver(delivery)
    #expect(result.status == 1, "\(result)")
    for expected in [world.registration, "is not followed, its program not started", "Register the scheme again"]
      + attack.problem(world.users)
    {
      #expect(result.err.contains(expected), "missing '\(expected)' in: \(result.err)")
    }
    #expect(!FileManager.default.fileExists(atPath: world.plantedMarker), "B's program ran as A")
    #expect(!FileManager.default.fileExists(atPath: world.ownMarker), "a refused registration still started something")
  }

  @Test("another member cannot edit A's registration in place: it stays A's, and A's program runs")
  func anInPlaceEditIsDeniedToOtherMembers() async throws {
    let world = try await World()
    let before = try Data(contentsOf: URL(fileURLWithPath: world.registration))
    let b = try await world.users.shell(
      as: world.users.b, #"cat "$1" > "$2""#, [world.plantedSource, world.registration])
    #expect(b.status != 0 && b.err.contains("Permission denied"), "\(b)")
    #expect(try Data(contentsOf: URL(fileURLWithPath: world.registration)) == before)
    let result = try await world.deliver(.open)
    #expect(result.err.contains("exited (status 0) before handling"), "\(result.err)")
    #expect(GroupMembers.owner(world.ownMarker) == world.users.a)
    #expect(!FileManager.default.fileExists(atPath: world.plantedMarker))
  }

  @Test("a registration is written with no group or other write, even in a group container")
  func aRegistrationIsWrittenOwnerOnlyWritable() async throws {
    let world = try await World()
    var st = stat()
    #expect(lstat(world.registration, &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o640 && st.st_nlink == 1)
  }

  @Test("registering again replaces a planted registration with one that is followed")
  func registeringAgainReplacesAPlantedFile() async throws {
    let world = try await World()
    try await world.attack(.hardLinkOwnFile)
    // The registering app (root here, a trusted owner for A) registers again: a new file by rename, safe mode.
    try world.container.registerURLScheme(
      world.scheme, launching: URL(fileURLWithPath: "/bin/sh"), arguments: World.touch(world.ownMarker))
    var st = stat()
    #expect(lstat(world.registration, &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o640 && st.st_nlink == 1 && st.st_uid == 0)
    let result = try await world.deliver(.open)
    #expect(result.err.contains("exited (status 0) before handling"), "\(result.err)")
    #expect(GroupMembers.owner(world.ownMarker) == world.users.a)
    #expect(!FileManager.default.fileExists(atPath: world.plantedMarker))
  }
}

/// The rule itself, on statuses (every condition alone, and each named).
@Suite(.runSlot(.minutes(3))) struct OwnerOnlyWritableRuleTests {
  static func status(mode: mode_t = 0o640, links: UInt64 = 1, owner: UInt32 = 1000, kind: FileStatus.Kind = .regular)
    -> FileStatus
  {
    var st = stat()
    st.st_mode = (kind == .regular ? S_IFREG : S_IFIFO) | mode
    st.st_nlink = __nlink_t(links)
    st.st_uid = owner
    return FileStatus(st)
  }

  @Test func theRule() async {
    #expect(OwnerOnlyWritable.problem(Self.status(), reader: 1000) == nil)
    #expect(OwnerOnlyWritable.problem(Self.status(mode: 0o600, owner: 0), reader: 1000) == nil)
    #expect(OwnerOnlyWritable.problem(Self.status(owner: 1001), reader: 1000)?.contains("belongs to uid 1001") == true)
    #expect(OwnerOnlyWritable.problem(Self.status(mode: 0o660), reader: 1000)?.contains("lets its group write") == true)
    #expect(OwnerOnlyWritable.problem(Self.status(mode: 0o642), reader: 1000)?.contains("lets everyone write") == true)
    #expect(OwnerOnlyWritable.problem(Self.status(links: 2), reader: 1000)?.contains("2 hard links") == true)
    #expect(OwnerOnlyWritable.problem(Self.status(kind: .other), reader: 1000)?.contains("not a regular file") == true)
    #expect(OwnerOnlyWritable.mode(from: 0o660) == 0o640 && OwnerOnlyWritable.mode(from: 0o600) == 0o600)
  }
}
