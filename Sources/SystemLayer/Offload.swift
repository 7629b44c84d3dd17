import Dispatch
import Synchronization

/// Runs blocking file work (fsync above all) on a Dispatch thread and waits for it without holding a thread of
/// Swift's cooperative pool, which has one thread per core: on 2 cores, two fsyncs in flight would stop every other
/// task of the process. The caller's `SyscallRecorder` log follows the work (a task-local does not cross to
/// Dispatch by itself).
///
/// The work runs on an idle queue of `OffloadQueues`, not on `DispatchQueue.global()`: the global queue gets about
/// one thread per core, so concurrent fsyncs waited for each other and could not share a journal commit (200
/// downloads at once: 1.3 fsyncs in flight on average, most of the time one).
package func offload<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
  let result: Result<T, E> = await withCheckedContinuation { continuation in
    let work = SyscallRecorder.carryingLog {
      do throws(E) { continuation.resume(returning: .success(try body())) } catch {
        continuation.resume(returning: .failure(error))
      }
    }
    let queue = OffloadQueues.shared.take()
    queue.async {
      work()
      OffloadQueues.shared.put(queue)
    }
  }
  return try result.get()
}

/// Serial queues for `offload`, each lent to one piece of work at a time. Dispatch serves a busy serial queue with
/// a thread of its own ("overcommit": a blocked fsync does not hold back the next one), and reuses idle threads. At
/// most `limit` queues are made; past that, work waits behind others in turn (round-robin).
final class OffloadQueues: Sendable {
  static let shared = OffloadQueues()
  private static let limit = 64
  private struct State {
    var idle: [DispatchQueue] = []
    var made: [DispatchQueue] = []
    var next = 0
  }
  private let state = Mutex(State())

  func take() -> DispatchQueue {
    state.withLock { s in
      if let queue = s.idle.popLast() { return queue }
      if s.made.count < Self.limit {
        let queue = DispatchQueue(label: "GroupContainer.offload.\(s.made.count)")
        s.made.append(queue)
        return queue
      }
      s.next = (s.next + 1) % s.made.count
      return s.made[s.next]
    }
  }

  /// Gives a queue back once its work ended (a queue lent twice past the limit is put back once per loan; a
  /// duplicate in `idle` only means it may be lent twice again, which is the round-robin case).
  func put(_ queue: DispatchQueue) {
    state.withLock { s in
      if !s.idle.contains(where: { $0 === queue }) { s.idle.append(queue) }
    }
  }
}
