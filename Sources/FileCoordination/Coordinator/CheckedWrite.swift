import GroupContainerCore
import SystemLayer

/// The checked-write rule: while the accessor of a coordinated write of one item runs, a `GroupContainer.write` of
/// that item on the same thread trusts the coordinator's check of the item's last component.
///
/// Just before the accessor, the coordinator found no symbolic link anywhere on the item's path (`resolveBeneath`).
/// The write still opens the item's parent beneath the container with no link on the way — that is what keeps it
/// inside — and skips only its own `fstatat` of the item ("is the item itself a link?"), 1.2 µs of a 26 µs write
/// on tmpfs. That is safe even when a link appeared since the check: the replace renames over the link itself and
/// never writes through it, so nothing lands outside the container or in its Inbox. The one difference: such a link
/// is replaced, where an unvouched write first judges where it leads (and refuses a way out).
///
/// The mark is per thread (a C thread-local), set only around a synchronous accessor and put back when it returns
/// (nested accesses stack); any other thread, task or later call does the whole check.
enum CheckedWrite {
  /// Runs `body`, the accessor of `access`, with its item marked when it is one written item found free of links.
  static func during<T>(_ access: CoordinatedAccess, _ body: () throws -> T) rethrows -> T {
    try during(mark(of: access), body)
  }

  /// Runs `body` with this thread marked `mark` (a mark made by `mark(of:)`), if any.
  static func during<T>(_ mark: ThreadMark.Value?, _ body: () throws -> T) rethrows -> T {
    guard let mark else { return try body() }
    let previous = ThreadMark.set(mark)
    defer { ThreadMark.set(previous) }
    return try body()
  }

  /// The mark of `access`'s accessor: nil unless it is one written item found free of links.
  static func mark(of access: CoordinatedAccess) -> ThreadMark.Value? {
    // The item's fields read in place: copying the whole `Item` (a URL, a path) cost more than the check.
    guard access.items.count == 1, access.items[0].isWrite, access.items[0].linkFree else { return nil }
    return mark(access.items[0].path, access.space.root)
  }

  /// Whether the accessor running on this thread was given `item` of the container open at `root`, checked.
  static func vouches(for item: ContainerPath, root: ContainerDirectory) -> Bool {
    ThreadMark.current == mark(item, root)
  }

  private static func mark(_ item: ContainerPath, _ root: ContainerDirectory) -> ThreadMark.Value {
    ThreadMark.Value(owner: UInt(bitPattern: ObjectIdentifier(root)), key: item.bytesHash)
  }
}
