import Foundation
import GroupContainer
import TestSupport
import Testing

/// The Timer host and widget as a newcomer runs them (`DEMO_HEADLESS=1 make demo`), and the host's URL rules.
@Suite(.runSlot(.minutes(3))) struct TimerDemoTests {
  @Test func theHeadlessScenarioRunsEveryStep() async throws {
    let root = try TestRoot()
    let env = ["GROUP_CONTAINER_ROOT": root.path]
    let widget = try Child(["--headless"], executable: "widget", environment: env)
    await widget.line { $0.contains("waiting for the host") }
    let host = try Child(
      ["--headless", "--seconds", "3", "--background-after", "1"], executable: "host", environment: env)
    #expect(await host.exit() == 0)
    #expect(host.output.contains("[host] going to the background with 2 s left (saved to the suite)"), "\(host.output)")
    #expect(await widget.exit() == 0, "\(widget.output)")
    // The host launched by the URL writes into the widget's output (it inherited it).
    await widget.line { $0.hasPrefix("[host] the timer finished in the widget") }
    let lines = widget.output
    for step in [
      "[widget] read from the suite: 2 s left when the host went away", "[widget] time left: ",
      "[widget] time is up: opening simpletimer://finished?source=widget",
      "[host] launched by simpletimer://finished?source=widget", "[widget] the host answered true",
    ] {
      #expect(lines.contains { $0.hasPrefix(step) }, "missing \(step) in \(lines)")
    }
    // The end was claimed once, by the widget.
    let container = try GroupContainer(identifier: Demo.groupIdentifier, root: root.url)
    #expect(try SharedDefaults(container: container)[Demo.finishedBy] == "widget")
    stopLaunchedHosts(in: container)
  }

  @Test func theHostOpensOnlyTheURLItExpects() async throws {
    let root = try TestRoot()
    let host = try Child(["--serve"], executable: "host", environment: ["GROUP_CONTAINER_ROOT": root.path])
    await host.line { $0.contains("ready") }
    let container = try GroupContainer(identifier: Demo.groupIdentifier, root: root.url)
    #expect(try await container.open(URL(string: "simpletimer://finished?source=widget")!))
    for refused in [
      "simpletimer://finished?source=evil", "simpletimer://finished", "simpletimer://other?source=widget",
      "simpletimer://finished?source=widget&extra=1", "simpletimer://finished/path?source=widget",
      "simpletimer://user@finished?source=widget",
    ] {
      #expect(try await !container.open(URL(string: refused)!), "\(refused)")
    }
    host.kill()
  }

  /// The demo's background download: the host starts it and goes away; the widget follows it from its own process;
  /// the agent starts the host again for the events (its output goes to the agent's log, as it has no terminal).
  @Test func theAlarmSoundArrivesAfterTheHostLeft() async throws {
    let root = try TestRoot()
    let server = try await FileServer.start()
    let env = [
      "GROUP_CONTAINER_ROOT": root.path,
      "SIMPLETIMER_ASSET_URL": server.url("/gen/300000?seed=42&rate=300000").absoluteString,
    ]
    let widget = try Child(["--headless"], executable: "widget", environment: env)
    await widget.line { $0.contains("waiting for the host") }
    let host = try Child(
      ["--headless", "--seconds", "3", "--background-after", "0"], executable: "host", environment: env)
    #expect(await host.exit() == 0)
    #expect(host.output.contains { $0.hasPrefix("[host] downloading the alarm sound in the background") })
    #expect(await widget.exit() == 0, "\(widget.output)")
    let container = try GroupContainer(identifier: Demo.groupIdentifier, root: root.url)
    let log = container.url.appendingPathComponent(".coordination/downloads/agent.log").path
    _ = await eventually {
      ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("[host] every background event handled")
    }
    let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    #expect(text.contains("[host] relaunched for the background session \(Demo.alarmSessionIdentifier)"), "\(text)")
    #expect(text.contains("[host] the alarm sound arrived while the host was away: alarm.sound, 300000 bytes"))
    #expect(text.contains("[host] every background event handled"))
    let sound = FileManager.default.contents(atPath: container.url.appendingPathComponent(Demo.alarmDestination).path)
    #expect(FileServer.mismatch(sound.map { [UInt8]($0) }, size: 300_000, seed: 42) == nil)
    stopLaunchedHosts(in: container)
  }

  func stopLaunchedHosts(in container: GroupContainer) {
    for process in (try? container.status().processes) ?? [] where !process.isCurrent {
      kill(process.pid, SIGTERM)
    }
  }
}
