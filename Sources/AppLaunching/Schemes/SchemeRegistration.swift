import Foundation
import GroupContainerCore
import Messaging
import Synchronization
import SystemLayer

/// How to start the app that opens a scheme: the `CFBundleURLTypes` analog, stored in the container.
struct SchemeRegistration: Codable, Sendable, Equatable {
  var version = 1
  var scheme: String
  var executable: String
  var arguments: [String]

  static let maxBytes = 64 * 1024

  /// The registration of `scheme` in a file's bytes, nil unless it is one this version wrote for that scheme (the
  /// one parse of the file, reached by the fuzz harness too).
  static func decode(_ bytes: [UInt8], scheme: String) -> SchemeRegistration? {
    guard bytes.count <= maxBytes, let record = try? UntrustedJSON.decode(Self.self, from: bytes),
      record.version == 1, record.scheme == scheme, record.executable.hasPrefix("/")
    else { return nil }
    return record
  }
}
