import FileCoordination
import Foundation
import GroupContainerCore
import TestSupport
import Testing

/// Temp files of writers that died are swept when a dead process is reaped, not only when a container is opened.
///
/// Mutants this suite catches:
/// - the `sweepAfterReaping()` line removed from `reap(_:)` (Liveness.swift): the dead writer's temp file stays
///   (`reapingADeadWriterSweepsItsTempFile`).
@Suite(.runSlot(.minutes(10))) struct ReapSweepTests {
  static let group = "group.com.example.reap-sweep"

  /// Two writers stop after creating their temp files; one is killed. This process, which opened the container
  /// before (so no open sweeps again), reaps the dead one through `status()`: its temp file goes, the live
  /// writer's stays.
  @Test(.runSlot(.minutes(3))) func reapingADeadWriterSweepsItsTempFile() async throws {
    let root = try TestRoot()
    let container = try root.container(Self.group)
    let killed = try Child(.pauseWrite(item: "Documents/k.txt"), root: root.path, group: Self.group)
    let alive = try Child(.pauseWrite(item: "Documents/l.txt"), root: root.path, group: Self.group)
    defer { alive.kill() }
    let killedTemp = try #require(await killed.line { $0.hasPrefix("created ") }).dropFirst(8)
    let aliveTemp = try #require(await alive.line { $0.hasPrefix("created ") }).dropFirst(8)
    let killedPath = container.path + "/Documents/" + killedTemp
    let alivePath = container.path + "/Documents/" + aliveTemp
    #expect(FileManager.default.fileExists(atPath: killedPath))
    killed.kill()
    _ = await killed.exit()
    // Listing the live processes reaps the dead one; the sweep it queues runs in the background.
    let live = try container.status().processes
    #expect(!live.contains { $0.pid == killed.process.processIdentifier })
    let swept = await eventually { !FileManager.default.fileExists(atPath: killedPath) }
    #expect(swept, "the dead writer's temp file was not swept after reaping it")
    #expect(FileManager.default.fileExists(atPath: alivePath), "a live writer's temp file was swept")
  }
}
