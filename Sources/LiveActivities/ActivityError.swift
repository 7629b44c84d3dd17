import GroupContainerCore
import SystemLayer

/// Why an activity request, update or end failed. Each error says what, where and what to do.
///
/// Apple's counterparts: ``denied(group:)`` and ``attributesTooLarge(bytes:limit:)`` are
/// `ActivityAuthorizationError.denied` and `.attributesTooLarge`; iOS drops an oversized update silently, where
/// ``contentStateTooLarge(bytes:limit:)`` says so. Tell errors apart by ``code`` (new codes may be added: a
/// `switch` over it needs a `default`); a failed system call under it is ``underlyingError``.
public struct ActivityError: Error, CustomStringConvertible, Sendable, Equatable {
  /// What kind of failure an ``ActivityError`` is. New codes may be added in any release.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    let name: String
    private init(_ name: String) { self.name = name }
    /// The code's name, e.g. `denied`.
    public var description: String { name }

    /// Live Activities are turned off for the group.
    public static let denied = Code("denied")
    /// The encoded attributes are larger than the limit.
    public static let attributesTooLarge = Code("attributesTooLarge")
    /// The encoded content state is larger than the limit.
    public static let contentStateTooLarge = Code("contentStateTooLarge")
    /// The attributes or state could not be encoded or decoded as JSON.
    public static let encodingFailed = Code("encodingFailed")
    /// An activity's record in the container is damaged.
    public static let damagedRecord = Code("damagedRecord")
    /// No activity with this id in the container.
    public static let unknownActivity = Code("unknownActivity")
    /// The container could not be opened (``ActivityError/containerError``).
    public static let container = Code("container")
    /// A system call on the container's files failed (``ActivityError/underlyingError``).
    public static let system = Code("system")
  }

  /// The failure and its details, as the package matches on them.
  package enum Detail: Sendable, Equatable {
    case denied(group: String)
    case attributesTooLarge(bytes: Int, limit: Int)
    case contentStateTooLarge(bytes: Int, limit: Int)
    case encodingFailed(String)
    case damagedRecord(path: String, reason: String)
    case unknownActivity(String)
    case container(GroupContainerError)
    case system(FileSystemError)
  }

  /// The failure and its details.
  package let detail: Detail

  package init(_ detail: Detail) { self.detail = detail }

  /// Live Activities are turned off for the group (the user's switch, `groupctl activities disable`).
  public static func denied(group: String) -> Self { Self(.denied(group: group)) }
  /// The encoded attributes are larger than the limit.
  public static func attributesTooLarge(bytes: Int, limit: Int) -> Self {
    Self(.attributesTooLarge(bytes: bytes, limit: limit))
  }
  /// The encoded content state is larger than the limit (4,096 bytes).
  public static func contentStateTooLarge(bytes: Int, limit: Int) -> Self {
    Self(.contentStateTooLarge(bytes: bytes, limit: limit))
  }
  /// The attributes or state could not be encoded or decoded as JSON; `reason` says why.
  public static func encodingFailed(_ reason: String) -> Self { Self(.encodingFailed(reason)) }
  /// An activity's record in the container is damaged (garbage, truncated, a FIFO or a link in its place).
  public static func damagedRecord(path: String, reason: String) -> Self {
    Self(.damagedRecord(path: path, reason: reason))
  }
  /// No activity with this id in the container.
  public static func unknownActivity(_ id: String) -> Self { Self(.unknownActivity(id)) }
  /// The container could not be opened.
  public static func container(_ error: GroupContainerError) -> Self { Self(.container(error)) }
  /// A system call on the container's files failed.
  package static func system(_ error: FileSystemError) -> Self { Self(.system(error)) }
  /// A system call failed, as a client's test double or wrapper says it (the package makes these itself).
  public static func system(_ error: SystemError) -> Self { Self(.system(error.base)) }

  /// What kind of failure this is.
  public var code: Code {
    switch detail {
    case .denied: .denied
    case .attributesTooLarge: .attributesTooLarge
    case .contentStateTooLarge: .contentStateTooLarge
    case .encodingFailed: .encodingFailed
    case .damagedRecord: .damagedRecord
    case .unknownActivity: .unknownActivity
    case .container: .container
    case .system: .system
    }
  }

  /// The group whose activities are turned off, for ``Code/denied``.
  public var group: String? {
    if case .denied(let group) = detail { group } else { nil }
  }

  /// The encoded size in bytes, for ``Code/attributesTooLarge`` and ``Code/contentStateTooLarge``.
  public var bytes: Int? {
    switch detail {
    case .attributesTooLarge(let bytes, _), .contentStateTooLarge(let bytes, _): bytes
    default: nil
    }
  }

  /// The limit in bytes, for ``Code/attributesTooLarge`` and ``Code/contentStateTooLarge``.
  public var limit: Int? {
    switch detail {
    case .attributesTooLarge(_, let limit), .contentStateTooLarge(_, let limit): limit
    default: nil
    }
  }

  /// The damaged record (``Code/damagedRecord``), or the file a system call or the container failed on.
  public var path: String? {
    switch detail {
    case .damagedRecord(let path, _): path
    case .system(let error): error.path
    case .container(let error): error.path
    default: nil
    }
  }

  /// The activity's id, for ``Code/unknownActivity``.
  public var activityID: String? {
    if case .unknownActivity(let id) = detail { id } else { nil }
  }

  /// Why the coding failed (``Code/encodingFailed``) or how the record is damaged (``Code/damagedRecord``).
  public var reason: String? {
    switch detail {
    case .encodingFailed(let text), .damagedRecord(_, let text): text
    default: nil
    }
  }

  /// The container's refusal, for ``Code/container``.
  public var containerError: GroupContainerError? {
    if case .container(let error) = detail { error } else { nil }
  }

  /// The failed system call, for ``Code/system`` (and for ``Code/container`` when one is under it).
  public var underlyingError: SystemError? {
    switch detail {
    case .system(let error): SystemError(error)
    case .container(let error): error.underlyingError
    default: nil
    }
  }

  /// What failed and what to do.
  public var description: String {
    switch detail {
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
