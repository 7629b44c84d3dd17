import FileCoordination
import SystemLayer

/// Why an activity request, update or end failed. Each case says what, where and what to do.
///
/// Apple's counterparts: ``denied(group:)`` and ``attributesTooLarge(bytes:limit:)`` are
/// `ActivityAuthorizationError.denied` and `.attributesTooLarge`; iOS drops an oversized update silently, where
/// ``contentStateTooLarge(bytes:limit:)`` says so.
public enum ActivityError: Error, CustomStringConvertible, Sendable, Equatable {
  /// Live Activities are turned off for the group (the user's switch, `groupctl activities disable`).
  case denied(group: String)
  /// The encoded attributes are larger than the limit.
  case attributesTooLarge(bytes: Int, limit: Int)
  /// The encoded content state is larger than the limit (4,096 bytes).
  case contentStateTooLarge(bytes: Int, limit: Int)
  /// The attributes or state could not be encoded or decoded as JSON; `reason` says why.
  case encodingFailed(String)
  /// An activity's record in the container is damaged (garbage, truncated, a FIFO or a link in its place).
  case damagedRecord(path: String, reason: String)
  /// No activity with this id in the container.
  case unknownActivity(String)
  /// The container could not be opened.
  case container(GroupContainerError)
  /// A system call on the container's files failed.
  case system(FileSystemError)

  /// What failed and what to do.
  public var description: String {
    switch self {
    case .denied(let group):
      "Live Activities are turned off for group '\(group)': the user turns them on with "
        + "`groupctl activities enable \(group)` (Settings on iOS)"
    case .attributesTooLarge(let bytes, let limit):
      "the activity's attributes encode to \(bytes) bytes of JSON, more than the limit of \(limit): keep them small"
    case .contentStateTooLarge(let bytes, let limit):
      "the activity's content state encodes to \(bytes) bytes of JSON, more than the limit of \(limit) (4 KB, as "
        + "on iOS): send less, e.g. identifiers the widget looks up in the container instead of the data itself"
    case .encodingFailed(let reason): "cannot encode or decode the activity: \(reason)"
    case .damagedRecord(let path, let reason):
      "the activity record '\(path)' is damaged (\(reason)): it is skipped; end the activity with "
        + "`groupctl activities end` or remove the file"
    case .unknownActivity(let id): "no activity '\(id)' in the container (`groupctl activities list` shows them)"
    case .container(let error): "\(error)"
    case .system(let error): "\(error)"
    }
  }
}
