import Foundation
import TestSupport
import Testing

@testable import FileCoordination
@testable import GroupContainerCore

/// The CLI, run as a real binary: stdout, stderr and exit status.
@Suite(.runSlot(.minutes(3))) struct GroupctlTests {
  let group = "group.com.example.cli"

  func run(_ arguments: [String], stdin: String? = nil) async throws -> (status: Int32, out: String, err: String) {
    let run = try await runToEnd(
      productsDirectory.appendingPathComponent("groupctl").path, arguments, input: stdin ?? "")
    return (run.status ?? -1, run.output, run.errors)
  }

  @Test func writeThenReadRoundTripsThroughTheCoordinator() async throws {
    let root = try TestRoot()
    let written = try await run(["write", group, "Documents/note.txt", "--root", root.path], stdin: "hello\n")
    #expect(written.status == 0, "\(written.err)")
    let read = try await run(["read", group, "Documents/note.txt", "--root", root.path])
    #expect(read.status == 0 && read.out == "hello\n")
  }

  @Test(arguments: ["../x", "/etc/passwd", "Documents/../../x", ".coordination/counters"])
  func escapingPathsAreRefused(path: String) async throws {
    let root = try TestRoot()
    let result = try await run(["read", group, path, "--root", root.path])
    #expect(result.status != 0)
    #expect(result.err.contains("invalid") || result.err.contains("outside"), "\(result.err)")
  }

  @Test func symlinksPointingOutAreRefused() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    try FileManager.default.createSymbolicLink(atPath: container.path + "/Documents/etc", withDestinationPath: "/etc")
    let result = try await run(["read", group, "Documents/etc/hostname", "--root", root.path])
    #expect(result.status != 0 && result.err.contains("outside"), "\(result.err)")
    let write = try await run(["write", group, "Documents/etc/evil", "--root", root.path], stdin: "x")
    #expect(write.status != 0 && !FileManager.default.fileExists(atPath: "/etc/evil"))
  }

  @Test func invalidIdentifiersAreRefusedWithTheRule() async throws {
    let root = try TestRoot()
    let result = try await run(["status", "bad/../id", "--root", root.path])
    #expect(result.status != 0 && result.err.contains("only A-Z a-z 0-9 . - are allowed"), "\(result.err)")
  }

  @Test func statusListsProcessesPresentersAndLocks() async throws {
    let root = try TestRoot()
    _ = try root.container(group)
    let presenter = try Child(.present(item: "Documents/p.txt"), root: root.path, group: group)
    await presenter.line { $0.hasPrefix("ready") }
    let holder = try Child(.hold(mode: .write, item: "Documents/p.txt"), root: root.path, group: group)
    await holder.line { $0 == "locked" }
    let result = try await run(["status", group, "--json", "--root", root.path])
    #expect(result.status == 0)
    let status = try JSONDecoder().decode(ContainerStatus.self, from: Data(result.out.utf8))
    #expect(Set(status.processes.map(\.pid)).isSuperset(of: [presenter.pid, holder.pid]))
    #expect(status.presenters.map(\.item) == ["Documents/p.txt"])
    #expect(
      status.locks.contains {
        $0.pid == holder.pid && $0.item == "Documents/p.txt" && $0.kind == "item" && $0.exclusive
      })
    #expect(
      status.locks.contains { $0.pid == holder.pid && $0.item == "Documents" && $0.kind == "tree" && !$0.exclusive })
    presenter.kill()
    holder.kill()
  }

  @Test func presentPrintsOneFlushedJSONLinePerCallback() async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let presenter = try Child(["present", group, "Documents/j.txt", "--root", root.path], executable: "groupctl")
    await presenter.line { $0.contains("\"ready\"") }
    await #expect(try run(["write", group, "Documents/j.txt", "--root", root.path], stdin: "1").status == 0)
    await presenter.line { $0.contains("\"reacquire\"") }
    try Data("2".utf8).write(to: container.documentsURL.appendingPathComponent("j.txt"))
    let line = await presenter.line { $0.contains("\"coordinated\":false") }
    #expect(line?.contains("\"event\":\"didChange\"") == true)
    await presenter.stop(SIGINT)
    #expect(presenter.process.terminationStatus == 0)
    // It unregistered on SIGINT.
    #expect(try container.status().presenters.isEmpty)
  }

  /// `--only` keeps the lines of the named callbacks (and "ready"): the presenter benchmarks count reacquires only.
  @Test func presentOnlyPrintsTheNamedCallbacks() async throws {
    let root = try TestRoot()
    _ = try root.container(group)
    let presenter = try Child(
      ["present", group, "Documents/o.txt", "--only", "reacquire", "--only", "didChange", "--root", root.path],
      executable: "groupctl")
    await presenter.line { $0.contains("\"ready\"") }
    for i in 0..<2 {
      await #expect(try run(["write", group, "Documents/o.txt", "--root", root.path], stdin: "\(i)").status == 0)
    }
    // Both writes' callbacks (a didChange may come after its write's reacquire), then a little longer for more.
    await presenter.line { line in
      presenter.output.filter { $0.contains("\"reacquire\"") }.count == 2
        && presenter.output.filter { $0.contains("\"didChange\"") }.count >= 2
    }
    try? await Task.sleep(for: .seconds(0.2))
    let events = presenter.output.map { line in
      line.range(of: "\"event\":\"").map { String(line[$0.upperBound...].prefix { $0 != "\"" }) } ?? line
    }
    #expect(
      events.filter { $0 != "ready" }.sorted() == ["didChange", "didChange", "reacquire", "reacquire"], "\(events)")
    await presenter.stop(SIGINT)
  }

  /// Lines are written by hand (JSONSerialization was too slow for the handshake): any item name stays valid JSON.
  @Test func presentLinesStayValidJSONForAnyItemName() async throws {
    let root = try TestRoot()
    let name = "Documents/say \"hi\" \\ ü\u{1}.txt"
    let presenter = try Child(["present", group, name, "--root", root.path], executable: "groupctl")
    let line = await presenter.line { $0.contains("\"ready\"") } ?? ""
    let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    #expect(object?["item"] as? String == name, "\(line)")
    #expect((object?["pid"] as? NSNumber)?.int32Value == presenter.pid)
    presenter.kill(SIGKILL)
  }

  @Test(arguments: [SIGTERM, SIGINT])
  func presentAndWatchEndCleanlyOnSignals(signal: Int32) async throws {
    let root = try TestRoot()
    let container = try root.container(group)
    let present = try Child(["present", group, "Documents/s.txt", "--root", root.path], executable: "groupctl")
    let watch = try Child(["defaults", "watch", group, "--root", root.path], executable: "groupctl")
    await present.line { $0.contains("\"ready\"") }
    await watch.line { $0.contains("\"ready\"") }
    await present.stop(signal)
    await watch.stop(signal)
    #expect(present.process.terminationStatus == 0 && present.process.terminationReason == .exit)
    #expect(watch.process.terminationStatus == 0 && watch.process.terminationReason == .exit)
    // The presenter removed its own registration on the way out (no liveness reaping needed).
    let records = try FileManager.default.contentsOfDirectory(atPath: container.path + "/.coordination/presenters")
    #expect(records.filter { !$0.hasPrefix(".") }.isEmpty, "\(records)")
  }
}
