// `gc-bench-idle-widget GROUP ROOT` / `gc-bench-idle-widget --floor`: the process of issue #37 item 6, for the memory
// rows of DefaultsBenchmarks. A widget-like process opens a container, a defaults suite (reading a key), an image
// cache (storing and reading one image), a download session and the activities' updates, then idles; it prints
// `rss_kb=<n> peak_rss_kb=<n>` once its background threads have settled. `--floor` prints the same for a process that
// only starts (Foundation loaded, nothing of this package used): the cost of being a Swift process at all, measured in
// the same run. `make static-programs` links it fully static too.
import BackgroundDownloads
import FileCoordination  // opening a container (GroupContainer.init)
import Foundation
import GroupContainerCore
import ImageCache
import LiveActivities
import SharedDefaults

struct IdleAttributes: ActivityAttributes {
  struct ContentState: Codable, Hashable, Sendable { var score: Int }
  var name: String
}

/// VmRSS and VmHWM of this process, in kB.
func memory() -> (resident: String, peak: String) {
  let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
  func field(_ name: String) -> String {
    status.split(separator: "\n").first { $0.hasPrefix(name) }?.split(separator: " ").dropFirst().first.map(String.init)
      ?? "0"
  }
  return (field("VmRSS:"), field("VmHWM:"))
}

let arguments = CommandLine.arguments
if arguments.count == 2, arguments[1] == "--floor" {
  Thread.sleep(forTimeInterval: 1)
  let (resident, peak) = memory()
  print("rss_kb=\(resident) peak_rss_kb=\(peak)")
  exit(0)
}
guard arguments.count == 3 else {
  FileHandle.standardError.write(Data("usage: gc-bench-idle-widget GROUP ROOT | --floor\n".utf8))
  exit(2)
}
let container = try GroupContainer(
  identifier: arguments[1], root: URL(fileURLWithPath: arguments[2], isDirectory: true))
let defaults = try SharedDefaults(container: container)
try defaults.set(1, forKey: "opened")
_ = defaults.integer(forKey: "opened")
let cache = try SharedImageCache(name: "thumbnails", container: container)
// A 1×1 PNG: the cache stores and reads image files as they are.
let png: [UInt8] = [
  0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
  0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0B, 0x49,
  0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x60, 0x00, 0x02, 0x00, 0x00, 0x05, 0x00, 0x01, 0x7A, 0x5E, 0xAB, 0x3F, 0x00,
  0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
]
try cache.store(Data(png), forKey: "pixel")
_ = try cache.image(forKey: "pixel")
let session = try DownloadSession(identifier: "idle", container: container)
let updates = try Activity<IdleAttributes>.activityUpdates(in: container)
_ = try Activity<IdleAttributes>.activities(in: container)
// Settled: the watcher, the pressure monitor and the session's listener have started and gone quiet.
Thread.sleep(forTimeInterval: 2)
let (resident, peak) = memory()
print("rss_kb=\(resident) peak_rss_kb=\(peak)")
withExtendedLifetime((defaults, cache, session, updates)) {}
exit(0)
