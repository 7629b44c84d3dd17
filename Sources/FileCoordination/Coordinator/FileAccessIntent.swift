import Foundation
import GroupContainerCore

/// One item and how it will be accessed, for ``FileCoordinator/coordinate(with:byAccessor:)``.
/// Apple's `NSFileAccessIntent`.
public struct FileAccessIntent: Sendable, Hashable {
  enum Kind: Sendable, Hashable {
    case reading(FileCoordinator.ReadingOptions)
    case writing(FileCoordinator.WritingOptions)
  }

  /// The item. Use this URL inside the accessor.
  public let url: URL
  let kind: Kind

  /// An intent to read `url`.
  public static func readingIntent(with url: URL, options: FileCoordinator.ReadingOptions = []) -> FileAccessIntent {
    FileAccessIntent(url: url, kind: .reading(options))
  }

  /// An intent to write `url`.
  public static func writingIntent(with url: URL, options: FileCoordinator.WritingOptions = []) -> FileAccessIntent {
    FileAccessIntent(url: url, kind: .writing(options))
  }
}
