import Foundation
import GroupContainer
import TestSupport
import Testing

/// The names the demo kits define, spelled here: the kits live in the Examples package (their libpng/libjpeg must
/// not be a build requirement of the root), so these tests run their programs and cannot import them.
enum Demo {
  static let groupIdentifier = "group.com.example.simpletimer"
  static let finishedBy = DefaultsKey("finishedBy", default: "")
  static let alarmSessionIdentifier = "com.example.simpletimer.assets"
  static let alarmDestination = "Downloads/alarm.sound"
  static let videoSessionIdentifier = "com.example.simpletimer.video-widget"
  static let videoDestination = "Downloads/episode.video"
}

extension Demo {
  static let videoCacheName = "video-thumbnails"
  static let videoHistory = DefaultsKey<[String: Int]>("video.history", default: [:])
  static let videoHistoryOrder = DefaultsKey<[String]>("video.historyOrder", default: [])
  static let videoImageURLs = DefaultsKey<[String]>("video.imageURLs", default: [])

  /// Writes the demo's images into `directory` as `make demo` does (`host video --make-images`); their names.
  static func writeImages(to directory: URL) async throws -> [String] {
    let host = try Child(["video", "--make-images", directory.path], executable: "host")
    let status = await host.exit()
    guard status == 0, let line = host.output.first(where: { $0.contains("wrote the demo's images: ") }) else {
      throw DemoFailure(
        description: "host video --make-images exited \(String(describing: status)): \(host.errors.text)")
    }
    return line.components(separatedBy: "wrote the demo's images: ")[1].components(separatedBy: ", ")
  }
}

struct DemoFailure: Error, CustomStringConvertible {
  var description: String
}
