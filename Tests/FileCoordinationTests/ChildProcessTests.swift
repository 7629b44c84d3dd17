import Foundation
import SystemLayer
import TestSupport
import Testing

/// TestSupport's children (`Child`, `FileServer`, `ToolRun`): no child inherits another's pipes, a child's pipes
/// are closed once it has exited and its output is read, and a released handle kills its child. A whole-suite run
/// used to end with ~2,400 descriptors in the test process, 546 of them pipes of children long gone.
///
/// Mutants this suite catches:
/// - pipes made without `O_CLOEXEC` and `posix_spawn` without `closefrom(3)` (either alone is enough to keep them
///   out of other children): the second child holds the first one's pipe (`noChildInheritsAnotherChildsPipes`);
/// - the reader thread not closing its end at end of file: the pipes of an exited child stay open
///   (`anExitedChildsPipesAreClosed`);
/// - `SpawnedProcess.deinit` not killing a running child: it runs on, pipes open
///   (`aReleasedHandleKillsItsChildAndClosesItsPipes`).
@Suite(.runSlot(.minutes(3))) struct ChildProcessTests {
  static let group = "group.com.example.children"

  /// The targets of this process's open descriptors (`pipe:[1234]`, paths…).
  static func openTargets() -> Set<String> {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return Set(entries.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) })
  }

  /// What a `descriptors` helper said it holds: descriptor number → target.
  static func descriptors(of child: Child) -> [Int: String] {
    var result: [Int: String] = [:]
    for line in child.output where line.hasPrefix("fd ") {
      let fields = line.split(separator: " ", maxSplits: 2)
      if fields.count == 3, let fd = Int(fields[1]) { result[fd] = String(fields[2]) }
    }
    return result
  }

  @Test func noChildInheritsAnotherChildsPipes() async throws {
    let root = try TestRoot()
    let first = try Child(.descriptors(stay: true), root: root.path, group: Self.group)
    #expect(await first.line { $0 == "done" } != nil)
    let firstPipe = try #require(Self.descriptors(of: first)[1])
    let second = try Child(.descriptors(stay: false), root: root.path, group: Self.group)
    #expect(await second.exit() == 0)
    let inherited = Self.descriptors(of: second).filter { $0.key > 2 && $0.value.hasPrefix("pipe:") }.map(\.value)
    #expect(!inherited.contains(firstPipe), "the second child holds the first one's stdout pipe")
    // None of the test process's pipes: only the second child's own stdin, stdout and stderr reach it.
    let ours = Self.openTargets().filter { $0.hasPrefix("pipe:") }
    #expect(Set(inherited).isDisjoint(with: ours), "inherited: \(inherited)")
    first.kill()
  }

  @Test func anExitedChildsPipesAreClosed() async throws {
    let root = try TestRoot()
    let child = try Child(.descriptors(stay: false), root: root.path, group: Self.group)
    #expect(await child.exit() == 0)
    #expect(child.process.outputComplete)
    let pipes = [1, 2].compactMap { Self.descriptors(of: child)[$0] }
    #expect(pipes.count == 2 && pipes.allSatisfy { $0.hasPrefix("pipe:") }, "\(child.output)")
    #expect(Self.openTargets().isDisjoint(with: pipes), "the exited child's pipes are still open here")
  }

  @Test func aReleasedHandleKillsItsChildAndClosesItsPipes() async throws {
    let root = try TestRoot()
    var child: Child? = try Child(.descriptors(stay: true), root: root.path, group: Self.group)
    #expect(await child?.line { $0 == "done" } != nil)
    let pid = try #require(child?.pid)
    let pipes = [1, 2].compactMap { child.map(Self.descriptors(of:))?[$0] }
    #expect(pipes.count == 2)
    child = nil
    // Signal 0 only asks whether the pid exists: once the child is killed and reaped, it does not.
    #expect(await eventually { !Signals.send(0, to: pid) }, "the child \(pid) runs on after its handle went")
    #expect(await eventually { Self.openTargets().isDisjoint(with: pipes) }, "its pipes are still open here")
  }
}
