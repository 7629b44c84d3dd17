import Foundation
import GroupContainer
import Synchronization

// An error ends the program with its message and status 1 (a top-level `try` would crash with a stack dump).
do {
  let container = try GroupContainer(identifier: "group.com.example.timer")

  // Cached images: one disk cache in Library/Caches/<name>/ for the whole group, and a memory tier per process.
  let cache = try SharedImageCache(name: "thumbnails", container: container)
  let png = Data(
    base64Encoded: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")!
  try cache.store(png, forKey: "https://example.com/a.png", expiresAfter: .seconds(86_400))
  if let image = try cache.image(forKey: "https://example.com/a.png") {  // from any process of the group
    print("cached: \(image.format), \(image.pixelWidth)x\(image.pixelHeight)")  // read from the headers, not decoded
  }

  // Memory warnings (Linux has none): from the cgroup's events, PSI, MemAvailable and the process's budget.
  MemoryPressure.shared.budget = 32 << 20  // a widget's limit, as on iOS
  let thumbnails = Mutex<[String: Data]>(["a": png])  // something this process can make again
  let registration = MemoryPressure.shared.onMemoryWarning(name: "thumbnails") { level in
    thumbnails.withLock { kept in  // didReceiveMemoryWarning
      defer { kept.removeAll() }
      return kept.values.reduce(0) { $0 + $1.count }  // reported: who gave back how much
    }
  }
  // `groupctl cache pressure warning <group-id>` sends one to every process of the group; here, to this one.
  // The image cache's memory tier has its own handler: it trims on a warning, empties on critical.
  if let report = await MemoryPressure.shared.simulate(.warning) {
    for entry in report.entries { print("memory \(report.level): \(entry.name) released \(entry.bytesReleased) bytes") }
  }
  registration.cancel()
} catch {
  FileHandle.standardError.write(Data("tour-images: \(error)\n".utf8))
  exit(1)
}
