import Foundation
import GroupContainer

/// A fresh container root per test, removed at the end (the root's TestSupport is not a product: this package cannot
/// import it, and these in-process tests need only this).
final class TestRoot: Sendable {
  let url: URL

  init() throws {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("gc-tests", isDirectory: true)
    url = base.appendingPathComponent(UUID().uuidString, isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  }

  var path: String { url.path }

  deinit { try? FileManager.default.removeItem(at: url) }
}
