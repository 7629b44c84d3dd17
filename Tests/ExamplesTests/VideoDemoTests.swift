import Foundation
import GroupContainer
import TestSupport
import Testing

/// The video widget and its host as real processes: images from the file server into the shared cache, the
/// widget's rotation (with a placeholder), the group's memory warning in both, the widget's background download
/// handed to a relaunched host, and the widget's resident memory across a rotation.
///
/// Mutants this suite catches (each tried once):
/// - the widget's decoder keeping the whole decoded image instead of a 32x32 thumbnail (`ThumbnailDecoder` with
///   `maxWidth`/`maxHeight` of 100,000): `theWidgetStaysWithinItsBudgetAcrossARotation` fails (VmHWM over 32 MB).
/// - the host without its HTTP status check (FoundationNetworking hands a 404 body over as data):
///   `theVideoScenarioRunsEveryStep` fails (no "could not fetch lost-episode.jpg: HTTP 404"; the cache refuses the
///   body as an image instead).
@Suite(.runSlot(.minutes(10))) struct VideoDemoTests {
  static let budget = 32 << 20

  /// Serves the demo's images, as `make demo` does.
  static func imageServer(_ root: TestRoot) async throws -> FileServer {
    let images = root.url.appendingPathComponent("images")
    _ = try await Demo.writeImages(to: images)
    return try await FileServer.start(root: images.path)
  }

  // Four processes and a 10 s download (plus the agent): two minutes under a loaded machine.
  @Test(.runSlot(.minutes(5))) func theVideoScenarioRunsEveryStep() async throws {
    let root = try TestRoot()
    let server = try await Self.imageServer(root)
    let env = [
      "GROUP_CONTAINER_ROOT": root.path + "/containers",
      "VIDEO_IMAGES_URL": server.url("/files/").absoluteString,
      // 40 MB at 4 MB/s: it ends after the widget (about 2 s of rotation) has gone, with room on a loaded machine.
      "VIDEO_DOWNLOAD_URL": server.url("/gen/40000000?seed=9&rate=4000000").absoluteString,
    ]
    try FileManager.default.createDirectory(atPath: root.path + "/containers", withIntermediateDirectories: true)
    let host = try Child(["video", "--headless"], executable: "host", environment: env)
    await host.line() { $0.hasPrefix("[host] images cached: ") }
    #expect(
      host.output.contains("[host] images cached: 4 of 5 in the shared cache 'video-thumbnails'"), "\(host.output)")
    #expect(host.output.contains { $0.hasPrefix("[host] could not fetch lost-episode.jpg: HTTP 404") })
    let widget = try Child(["video", "--headless", "--interval", "0.3"], executable: "widget", environment: env)
    await widget.line() { $0.hasPrefix("[widget] peak memory after a full rotation") }
    await host.line() { $0.hasPrefix("[host] following the widget's download") }
    let container = try GroupContainer(
      identifier: Demo.groupIdentifier, root: URL(fileURLWithPath: root.path + "/containers"))
    try MemoryPressure.send(.warning, to: container)
    #expect(await widget.exit() == 0, "\(widget.output)")
    #expect(await host.exit() == 0, "\(host.output)")
    let shown = widget.output
    for name in ["sunrise.jpg", "ocean.png", "forest.jpg", "city.png"] {
      #expect(shown.contains { $0.contains(": \(name) — image ") }, "\(name) not shown: \(shown)")
    }
    #expect(shown.contains("[widget] showing 5/5: lost-episode.jpg — placeholder (not in the cache)"), "\(shown)")
    #expect(shown.contains { $0.hasPrefix("[widget] history: Sunrise over the Bay [########--]  85 %") })
    // Both gave memory back: the image cache's memory tier, in each process.
    for output in [shown, host.output] {
      #expect(
        output.contains {
          $0.contains("memory warning (group): released") && $0.contains("image cache 'video-thumbnails'")
        },
        "\(output)")
    }
    #expect(shown.contains { $0.hasPrefix("[widget] leaving with the episode at [") }, "\(shown)")
    #expect(host.output.contains { $0.hasPrefix("[host] the widget's episode: [") })

    // The agent relaunches the host for the finished download (its output goes to the agent's log).
    let log = container.url.appendingPathComponent(".coordination/downloads/agent.log").path
    var text = ""
    for _ in 0..<600 {
      text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
      if text.contains("[host] every video download event handled") { break }
      try await Task.sleep(for: .milliseconds(50))
    }
    #expect(
      text.contains("[host] relaunched for the video download session \(Demo.videoSessionIdentifier)"), "\(text)")
    #expect(text.contains("[host] the widget's episode arrived while the host was away: episode.video, 40000000 bytes"))
    #expect(text.contains("[host] every video download event handled"))
    let file = FileManager.default.contents(
      atPath: container.url.appendingPathComponent(Demo.videoDestination).path)
    #expect(FileServer.mismatch(file.map { [UInt8]($0) }, size: 40_000_000, seed: 9) == nil)
    for process in (try? container.status().processes) ?? [] where !process.isCurrent { kill(process.pid, SIGTERM) }
  }

  /// The widget's resident memory (VmHWM, read from /proc by this test) stays within its 32 MB budget over a full
  /// rotation of the demo's images, the largest a 1920x1080 JPEG. A bound on memory, not on time.
  @Test(.runSlot(.minutes(3))) func theWidgetStaysWithinItsBudgetAcrossARotation() async throws {
    let root = try TestRoot()
    let container = try GroupContainer(identifier: Demo.groupIdentifier, root: root.url)
    // What the host leaves for the widget (VideoWidget.save and its cache), written here with the library's API.
    let cache = try SharedImageCache(name: Demo.videoCacheName, container: container)
    let defaults = try SharedDefaults(container: container)
    let images = root.url.appendingPathComponent("images")
    let names = try await Demo.writeImages(to: images)
    var urls: [String] = []
    for name in names {
      let url = "http://127.0.0.1/files/\(name)"
      try await cache.store(try Data(contentsOf: images.appendingPathComponent(name)), forKey: url)
      urls.append(url)
    }
    try defaults.set(["Sunrise over the Bay": 85, "City Lights": 100], for: Demo.videoHistory)
    try defaults.set(["Sunrise over the Bay", "City Lights"], for: Demo.videoHistoryOrder)
    try defaults.set(urls, for: Demo.videoImageURLs)
    let widget = try Child(
      ["video", "--headless", "--interval", "0.2"], executable: "widget",
      environment: ["GROUP_CONTAINER_ROOT": root.path])
    let line = await widget.line() { $0.hasPrefix("[widget] peak memory after a full rotation") }
    let status = (try? String(contentsOfFile: "/proc/\(widget.pid)/status", encoding: .utf8)) ?? ""
    let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
      .flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) }.map { $0 * 1024 }
    try MemoryPressure.send(.warning, to: container)
    #expect(await widget.exit() == 0, "\(widget.output)")
    let shown = widget.output.filter { $0.contains(" — image ") }.count
    #expect(shown == names.count, "a full rotation: \(widget.output)")
    let measured = try #require(peak, "no VmHWM for the widget: \(status)")
    #expect(
      measured <= Self.budget, "the widget's peak resident memory \(measured) bytes is over its budget (\(line ?? ""))")
    print("widget VmHWM after a full rotation: \(measured) bytes (budget \(Self.budget))")
  }
}
