import Foundation
import GroupContainerCore
import Synchronization
import SystemLayer

/// The presenter record rule for tools that only look (`groupctl doctor`): where records are and whether a file
/// is one.
package enum PresenterRecordCheck {
  /// The records' directory, relative to the container.
  package static let directory = CoordinationPaths.presenters
  /// The largest record.
  package static let maximumBytes = PresenterRecord.maxBytes
  /// The largest index of a bucket (PresenterBucketIndex).
  package static let maximumIndexBytes = PresenterBucketIndex.maxBytes

  /// Why `bytes`, read from the record file `fileName`, are not a valid presenter record; nil when they are.
  package static func problem(_ bytes: [UInt8], fileName: String) -> String? {
    do { _ = try PresenterRecord.decode(bytes, fileName: fileName) } catch { return "\(error)" }
    return nil
  }
}
