import GroupContainerCore
import SystemLayer

/// The Inbox rule: `Documents/Inbox/` holds the files other apps handed over (FileHandOver.swift), as on iOS. An
/// app may read what is there, delete it, and move it out — but not change it in place or add to it: to edit a
/// received file, move it out of the Inbox first.
///
/// Every container write is checked here: a coordinated write (`CoordinatedAccess`, for each written item) and
/// ``GroupContainerCore/GroupContainer/write(_:to:durable:)``. A write of the Inbox or of anything in it is refused with
/// `GroupContainerError.inboxIsReadOnly(_:)`, unless it deletes (`.forDeleting`) or moves the item away
/// (`.forMoving`, the source of a move: Apple's coordinated move marks its destination `.forReplacing`, which is
/// refused here). The path is judged as written and, when a symbolic link is on the way, as it resolves: a link
/// to the Inbox does not open a way in. The hand-over itself is the one writer of the Inbox, beneath the
/// container's descriptor and outside these APIs.
///
/// *What if it were not refused*: a widget and an app writing a received document in place would race the
/// sender's next hand-over of the same name, and the app could not tell received files from its own.
package enum InboxRule {
  /// `Documents/Inbox`.
  package static let inbox = ContainerPath(unchecked: ["Documents", "Inbox"])

  /// Whether `item` is the Inbox or lies in it (by bytes).
  static func contains(_ item: ContainerPath) -> Bool { item == inbox || item.isDescendant(of: inbox) }

  /// Refuses a write of `item` (and of `resolved`, where a link on the way leads) into the Inbox; see the type.
  static func check(
    writing item: ContainerPath, resolved: ContainerPath? = nil, options: FileCoordinator.WritingOptions = []
  ) throws(GroupContainerError) {
    guard options.isDisjoint(with: [.forDeleting, .forMoving]) else { return }
    // No array: this runs on every coordinated write.
    if contains(item) || resolved.map(contains) == true { throw .inboxIsReadOnly(item.string) }
  }
}

extension GroupContainer {
  /// Refuses now what a container write of `item` would refuse when it happens: a path whose existing part leads
  /// out of the container or into its private directory through a symbolic link, and an item in the Inbox, as
  /// written or where a link on the way leads (InboxRule). For work that writes much later (a download's
  /// destination, checked when the task is created): the write itself judges the links again.
  package func checkWritable(_ item: ContainerPath) throws(GroupContainerError) {
    try InboxRule.check(writing: item, resolved: try resolveBeneath(item, containerPath: path))
  }
}
