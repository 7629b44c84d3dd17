import FileCoordination
import Foundation
import GroupContainerCore
import Synchronization

extension DownloadSession {
  /// Every download task in `container` (of one session, or of all), oldest first, from any process.
  public static func allTasks(in container: GroupContainer, session: String? = nil) throws(DownloadError)
    -> [DownloadTask]
  {
    try DownloadStore(container: container).tasks(session: session)
  }

  /// The tasks of `container` (of one session, or all) as they change, from any process of the group, attached or
  /// not: first every task as it is, then each task again whenever its state, byte count or error changes. Not
  /// possible on iOS, where a session belongs to one process. Ends when the consuming task is cancelled.
  public static func observe(container: GroupContainer, session: String? = nil) throws(DownloadError)
    -> AsyncStream<DownloadTask>
  {
    let store = try DownloadStore(container: container)
    let (stream, continuation) = AsyncStream<DownloadTask>.makeStream(bufferingPolicy: .unbounded)
    struct Seen {
      var tasks: [String: String] = [:]
      /// Completed tasks never change again: their files are not read again.
      var settled: Set<String> = []
    }
    let seen = Mutex(Seen())
    let queue = DispatchQueue(label: "GroupContainer.DownloadSession.observe")
    let scan: @Sendable () -> Void = {
      for task in store.tasks(session: session, excluding: seen.withLock { $0.settled }) {
        let key =
          "\(task.state) \(task.countOfBytesReceived) \(task.countOfBytesExpectedToReceive) \(task.error.map { "\($0)" } ?? "")"
        let changed = seen.withLock { s in
          defer {
            s.tasks[task.id] = key
            if task.state == .completed { s.settled.insert(task.id) }
          }
          return s.tasks[task.id] != key
        }
        if changed { continuation.yield(task) }
      }
    }
    // One scan queued at a time: a burst of posts while one waits needs no other.
    let scanQueued = Atomic<Bool>(false)
    let listener = store.updates.listen(name: "downloads observer") {
      guard !scanQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
      queue.async {
        scanQueued.store(false, ordering: .releasing)
        scan()
      }
    }
    let stopped = Atomic<Bool>(false)
    // A status written while the counters file was being replaced posts nothing we hear: look every second too.
    @Sendable func tick() {
      guard !stopped.load(ordering: .relaxed) else { return }
      scan()
      queue.asyncAfter(deadline: .now() + .seconds(1), execute: tick)
    }
    queue.async(execute: tick)
    continuation.onTermination = { _ in
      stopped.store(true, ordering: .relaxed)
      listener.cancel()
    }
    return stream
  }
}
