import Dispatch

/// Runs blocking file work (fsync above all) on a Dispatch worker thread and waits for it without holding a thread of
/// Swift's cooperative pool, which has one thread per core: on 2 cores, two fsyncs in flight would stop every other
/// task of the process, and fsyncs queued behind each other could not share a journal commit. The caller's
/// `SyscallRecorder` log follows the work (a task-local does not cross to Dispatch by itself).
package func offload<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
  let result: Result<T, E> = await withCheckedContinuation { continuation in
    let work = SyscallRecorder.carryingLog {
      do throws(E) { continuation.resume(returning: .success(try body())) } catch {
        continuation.resume(returning: .failure(error))
      }
    }
    DispatchQueue.global().async { work() }
  }
  return try result.get()
}
