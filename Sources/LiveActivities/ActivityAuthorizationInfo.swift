import GroupContainerCore

/// Whether the user allows Live Activities for a group (ActivityKit's `ActivityAuthorizationInfo`). The switch is
/// the user's, as in Settings on iOS: `groupctl activities enable|disable <group-id>`. Activities are enabled
/// unless turned off.
public struct ActivityAuthorizationInfo: Sendable {
  let store: ActivityStore

  /// The switch of `container`'s group (Apple's initializer takes no argument: the app's own group is implied).
  public init(container: GroupContainer) throws(ActivityError) {
    store = try ActivityStore(container: container)
  }

  /// Whether ``Activity/request(attributes:content:pushType:in:)`` may start activities now.
  public var areActivitiesEnabled: Bool { store.areActivitiesEnabled }

  /// The switch's value each time the user changes it, from any process.
  public var activityEnablementUpdates: AsyncStream<Bool> {
    let (stream, continuation) = AsyncStream<Bool>.makeStream()
    let store = store
    do {
      let cancel = try ActivityWatch.onChange(of: ActivityStore.authorizationName, in: store) {
        continuation.yield(store.areActivitiesEnabled)
      }
      continuation.onTermination = { _ in cancel() }
    } catch {
      ActivityStore.logger.error("cannot observe the activities switch: \(error)")
      continuation.finish()
    }
    return stream
  }
}
