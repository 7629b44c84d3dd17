// The video widget's shared state and its pieces both processes use: the history and image list in the group's
// suite, the thumbnails in the group's image cache, the widget's background download, the demo's images.
import Foundation
import GroupContainer
import SimpleTimerKit
import Synchronization

/// The video widget's keys in the group's defaults suite (written by the host, read by the widget).
public enum VideoKeys {
  /// What was watched: title → percent watched (0...100).
  public static let history = DefaultsKey<[String: Int]>("video.history", default: [:])
  /// The titles in the order the host lists them (a dictionary has no order).
  public static let historyOrder = DefaultsKey<[String]>("video.historyOrder", default: [])
  /// The images the widget rotates, by URL (the image cache's keys).
  public static let imageURLs = DefaultsKey<[String]>("video.imageURLs", default: [])
}

/// One step of the widget's rotation.
public enum Slide: Sendable, Hashable {
  /// The image was in the cache.
  case image(url: String, thumbnail: Thumbnail)
  /// Not in the cache, or it could not be decoded: the widget shows a placeholder and says why.
  case placeholder(url: String, reason: String)

  /// The image's URL.
  public var url: String {
    switch self {
    case .image(let url, _), .placeholder(let url, _): url
    }
  }

  /// The last component of the URL.
  public var name: String { URL(string: url)?.lastPathComponent ?? url }
}

/// The video widget over one group: the suite, the image cache, the rotation.
public struct VideoWidget: Sendable {
  /// The image cache's name (`Library/Caches/video-thumbnails/`).
  public static let cacheName = "video-thumbnails"
  /// The memory tier's limit in both processes: fixed, so a warning (which trims a tier to half its limit) visibly
  /// gives memory back in the demo, and the widget's 32 MB budget has room for it.
  public static let memoryCost = 3 << 20
  /// The thumbnail: 32 columns of half blocks, 16 rows of cells (32 x 32 pixels at most).
  public static let thumbnailColumns = 32
  public static let thumbnailRows = 16
  /// The rotation period on screen.
  public static let rotationInterval: Duration = .seconds(5)

  public let container: GroupContainer
  public let defaults: SharedDefaults
  public let cache: SharedImageCache
  public let decoder: ThumbnailDecoder

  public init(container: GroupContainer? = nil) throws {
    let container = try container ?? GroupContainer(identifier: SimpleTimer.groupIdentifier)
    self.container = container
    defaults = try SharedDefaults(container: container)
    cache = try SharedImageCache(
      name: Self.cacheName, container: container, limits: SharedImageCache.Limits(memoryCost: Self.memoryCost))
    decoder = ThumbnailDecoder(maxWidth: Self.thumbnailColumns, maxHeight: Self.thumbnailRows * 2)
  }

  /// The history in the host's order, with any title the order misses after it.
  public func history() -> [(title: String, percent: Int)] {
    let history = defaults[VideoKeys.history]
    let order = defaults[VideoKeys.historyOrder].filter { history[$0] != nil }
    let rest = history.keys.filter { !order.contains($0) }.sorted()
    return (order + rest).map { ($0, history[$0] ?? 0) }
  }

  /// The host's side: the history and the image list, in one commit.
  public func save(history: [(title: String, percent: Int)], imageURLs: [String]) throws {
    var dictionary: [String: Int] = [:]
    for item in history { dictionary[item.title] = item.percent }
    try defaults.set(values: [
      VideoKeys.history.name: dictionary.propertyListValue,
      VideoKeys.historyOrder.name: history.map(\.title).propertyListValue,
      VideoKeys.imageURLs.name: imageURLs.propertyListValue,
    ])
  }

  /// The images to rotate.
  public var imageURLs: [String] { defaults[VideoKeys.imageURLs] }

  /// Step `index` of the rotation (modulo the list): the cached thumbnail, or a placeholder when the image is
  /// missing from the cache or does not decode. nil when the host listed no image yet.
  public func slide(at index: Int) -> Slide? {
    let urls = imageURLs
    guard !urls.isEmpty else { return nil }
    let url = urls[((index % urls.count) + urls.count) % urls.count]
    do {
      guard let thumbnail = try cache.decodedImage(forKey: url, using: decoder) else {
        return .placeholder(url: url, reason: "not in the cache")
      }
      return .image(url: url, thumbnail: thumbnail)
    } catch {
      return .placeholder(url: url, reason: "\(error)")
    }
  }

  /// The widget's screen for a slide: the picture (half blocks on a terminal, words elsewhere), then the history
  /// with progress bars.
  public func frame(_ slide: Slide, position: Int, count: Int, terminal: Bool) -> [String] {
    var lines = ["\(position)/\(count)  \(slide.name)"]
    switch slide {
    case .image(_, let thumbnail):
      lines += terminal ? TerminalArt.halfBlocks(thumbnail) : ["image: " + TerminalArt.describe(thumbnail)]
    case .placeholder(_, let reason):
      lines +=
        terminal
        ? TerminalArt.placeholder(columns: Self.thumbnailColumns, rows: Self.thumbnailRows, label: reason)
        : ["placeholder: \(reason)"]
    }
    lines.append("Continue watching")
    for item in history() {
      lines.append("  \(TerminalArt.progressBar(Double(item.percent) / 100, width: 16))  \(item.title)")
    }
    return lines
  }

  /// A memory warning's report in one line: what each handler released.
  public static func describe(_ report: MemoryWarningReport) -> String {
    let parts = report.entries.map { "\($0.name) \(TerminalArt.bytes($0.bytesReleased))" }.joined(separator: ", ")
    return "memory \(report.level) (\(report.source.rawValue)): released \(TerminalArt.bytes(report.bytesReleased))"
      + (parts.isEmpty ? "" : " — \(parts)")
  }

  /// The process's peak resident memory (VmHWM of /proc/self/status), in bytes.
  public static func peakResidentBytes() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
      return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
    }
    return nil
  }
}

/// The video the widget downloads in the background: started by the widget, finished after it has gone, handed to
/// the host (relaunched by the agent, or attached if it runs).
public enum VideoDownload {
  /// The session's identifier: the widget creates it, the host attaches to it for the events.
  public static let sessionIdentifier = "com.example.simpletimer.video-widget"
  /// Where the video lands in the container.
  public static let destination = "Downloads/episode.video"
  /// `$VIDEO_DOWNLOAD_URL` (`make demo` points it at a large throttled file of its `gc-file-server`); nil: none.
  public static var sourceURL: URL? {
    ProcessInfo.processInfo.environment["VIDEO_DOWNLOAD_URL"].flatMap { URL(string: $0) }
  }
  /// What the agent starts for the session's events when nobody is attached: the host, in video mode.
  public static let relaunchArguments = ["video", "--download-events"]

  /// The host's executable: `$VIDEO_HOST_EXECUTABLE`, else `host` beside this process's executable (the widget
  /// and the host are built side by side, as an extension sits inside its app's bundle).
  public static var hostExecutable: URL {
    if let path = ProcessInfo.processInfo.environment["VIDEO_HOST_EXECUTABLE"] { return URL(fileURLWithPath: path) }
    let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    return me.deletingLastPathComponent().appendingPathComponent("host")
  }

  /// Follows the session's download from any process (iOS cannot; here any process of the group may): keeps the
  /// latest fraction in `progress`, calls `first` with the task at its first report and `quarter` with the
  /// fraction each time a new quarter is reached. Does nothing when the session cannot be observed.
  public static func follow(
    in container: GroupContainer, progress: Locked<Double?>,
    first: @escaping @Sendable (DownloadTask) -> Void = { _ in },
    quarter: @escaping @Sendable (Double) -> Void
  ) {
    guard let updates = try? DownloadSession.observe(container: container, session: sessionIdentifier) else { return }
    Task.detached {
      var lastQuarter = -1
      for await task in updates {
        guard let fraction = task.fractionCompleted else { continue }
        progress.withLock { $0 = fraction }
        if lastQuarter < 0 { first(task) }
        if Int(fraction * 4) > lastQuarter {
          lastQuarter = Int(fraction * 4)
          quarter(fraction)
        }
      }
    }
  }

  /// Attaches to the session (one process at a time: the widget while it runs, then the host).
  public static func session(in container: GroupContainer) throws -> DownloadSession {
    var configuration = DownloadSession.Configuration()
    configuration.relaunch = .executable(hostExecutable, arguments: relaunchArguments)
    configuration.agentIdleTimeout = .seconds(5)
    return try DownloadSession(identifier: sessionIdentifier, container: container, configuration: configuration)
  }
}

/// The demo's images, made at demo time with libpng and libjpeg-turbo (no network, no binary files in git):
/// scenes of gradients and grain in PNG and JPEG, large enough that the widget's memory tier fills.
public enum DemoImages {
  /// Name, size, and the scene's two colours.
  public static let catalog: [(name: String, width: Int, height: Int)] = [
    ("sunrise.jpg", 1280, 720), ("ocean.png", 640, 480), ("forest.jpg", 1920, 1080), ("city.png", 800, 450),
  ]
  /// Listed by the host, never served: the widget's placeholder.
  public static let missing = "lost-episode.jpg"

  /// The history the demo's host saves.
  public static let history: [(title: String, percent: Int)] = [
    ("Sunrise over the Bay", 85), ("Ocean Deep, episode 2", 40), ("The Forest at Night", 10), ("City Lights", 100),
  ]

  /// Scene `index` as RGB pixels: a diagonal gradient between two colours, a sun, and grain (so PNGs stay large).
  public static func scene(_ index: Int, width: Int, height: Int) -> Thumbnail {
    let palettes: [((Int, Int, Int), (Int, Int, Int))] = [
      ((250, 140, 40), (60, 20, 90)), ((20, 90, 200), (0, 30, 60)), ((30, 120, 40), (10, 40, 20)),
      ((240, 200, 60), (30, 30, 50)),
    ]
    let (a, b) = palettes[index % palettes.count]
    var pixels = [UInt8](repeating: 0, count: width * height * 3)
    var state = UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15
    let sunX = width * (index + 1) / 5
    let sunY = height / 3
    let sunR2 = (height / 6) * (height / 6)
    pixels.withUnsafeMutableBufferPointer { p in
      for y in 0..<height {
        for x in 0..<width {
          let t = (x + y) * 256 / (width + height)
          state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
          let grain = Int(truncatingIfNeeded: (state >> 59)) - 16
          let dx = x - sunX
          let dy = y - sunY
          let sun = dx * dx + dy * dy < sunR2
          let i = (y * width + x) * 3
          p[i] = UInt8(clamping: sun ? 255 : (a.0 * (256 - t) + b.0 * t) / 256 + grain)
          p[i + 1] = UInt8(clamping: sun ? 230 : (a.1 * (256 - t) + b.1 * t) / 256 + grain)
          p[i + 2] = UInt8(clamping: sun ? 150 : (a.2 * (256 - t) + b.2 * t) / 256 + grain)
        }
      }
    }
    return Thumbnail(width: width, height: height, pixels: pixels)
  }

  /// Writes every image of the catalog into `directory`; returns their names.
  @discardableResult
  public static func write(to directory: URL) throws -> [String] {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    for (index, item) in catalog.enumerated() {
      let pixels = scene(index, width: item.width, height: item.height)
      let data =
        item.name.hasSuffix(".png") ? try ImageEncoding.png(pixels) : try ImageEncoding.jpeg(pixels, quality: 92)
      try data.write(to: directory.appendingPathComponent(item.name))
    }
    return catalog.map(\.name)
  }
}

/// A value shared by the examples' tasks and threads (a `Mutex` itself cannot be captured by an escaping closure).
public final class Locked<Value: Sendable>: Sendable {
  private let mutex: Mutex<Value>
  public init(_ value: Value) { mutex = Mutex(value) }
  public func withLock<R>(_ body: (inout sending Value) -> sending R) -> sending R { mutex.withLock(body) }
}
