import Atomics
import CSystemShims
import Foundation
import Glibc
import Synchronization

/// "Something changed" between processes, through a futex on a word of a `MappedCounters` file: for changes made
/// by stores through a shared mapping, which inotify never sees.
///
/// Two counters: a sequence (its low 32 bits are the futex word) and the number of listening processes. `post()`
/// costs nothing while nobody listens; otherwise one increment and one `futex(FUTEX_WAKE)`. Each `Listener` owns a
/// thread that sleeps in `futex(FUTEX_WAIT)` and calls its handler after every change of the sequence (several
/// posts while the handler runs coalesce into one more call).
///
/// A process killed while listening leaves the count one too high: posts then make one futex call that wakes
/// nobody, which costs a fraction of a microsecond and harms nothing.
///
/// With a `sleepers` counter, a post makes the futex call only when a listener went to sleep in `FUTEX_WAIT` since
/// the last post that woke them (a Dekker pair: the poster bumps the sequence, then takes the sleepers' count,
/// setting it to 0; a listener counts itself, then reads the sequence — each with a full fence between, so at
/// least one sees the other). Taking the count, not reading it, matters: a woken listener may wait milliseconds for
/// a core, and 4 writers posting 2 million times a second made a futex call each until it ran (half their
/// throughput). A listener never uncounts itself; one woken by its timeout costs the next post one call that wakes
/// nobody. Listeners that `coalesce` pause that long
/// after a handler call during which more posts came: a flood of posts then costs each listener a wake-up per
/// pause, not per post, and the posters no system call — while a post after a quiet spell is handled at once.
package struct ChangeSignal: @unchecked Sendable {  // the words are shared memory, touched only through atomics
  private let counters: MappedCounters
  private let sequence: Int
  private let listeners: Int
  private let sleepers: Int?

  package init(_ counters: MappedCounters, sequence: Int, listeners: Int, sleepers: Int? = nil) {
    self.counters = counters
    self.sequence = sequence
    self.listeners = listeners
    self.sleepers = sleepers
  }

  /// Wakes every listener in every process (none is woken when none listens).
  package func post() {
    guard counters.atomic(listeners).load(ordering: .relaxed) != 0 else { return }
    counters.increment(sequence)
    if let sleepers {
      Atomics.atomicMemoryFence(ordering: .sequentiallyConsistent)
      guard counters.atomic(sleepers).load(ordering: .sequentiallyConsistent) != 0,
        counters.atomic(sleepers).exchange(0, ordering: .sequentiallyConsistent) != 0
      else { return }
    }
    _ = gc_futex_wake(counters.futexWord(sequence), Int32.max)
  }

  /// Counts this process as a listener for good: for a signal whose only listener is the process that owns the
  /// file and waits with `wait(whileSequenceIs:nanoseconds:)` on its own threads.
  package func listenForever() { counters.increment(listeners) }

  /// The sequence now; read it before checking for work, then `wait` with it, so no post is missed in between.
  package var sequenceValue: UInt32 { UInt32(truncatingIfNeeded: counters.load(sequence)) }

  /// Sleeps the calling thread until a post changes the sequence from `seen`, or `nanoseconds` pass.
  /// The corresponding C function is `futex` (`FUTEX_WAIT`).
  package func wait(whileSequenceIs seen: UInt32, nanoseconds: UInt64) {
    var timeout = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    _ = gc_futex_wait(counters.futexWord(sequence), seen, &timeout)
  }

  /// Starts a thread that calls `handler` after each post by any process, until `cancel()`; with `coalesce`
  /// (nanoseconds), it pauses that long after a call during which more posts came.
  package func listen(name: String, coalesce: UInt64 = 0, _ handler: @escaping @Sendable () -> Void) -> Listener {
    Listener(signal: self, name: name, coalesce: coalesce, handler: handler)
  }

  package final class Listener: Sendable {
    private let signal: ChangeSignal
    private let cancelled = ManagedAtomic<Bool>(false)
    /// The file this listener is counted in: its identity and epoch (nil once cancelled). A file replaced under the
    /// mapping (`MappedCounters.rebind`: the container made anew) or emptied by a truncation counts nobody, and a
    /// post then skips the wake and the sequence both: the listener counts itself in it again (within one bounded
    /// sleep) and calls its handler once for what it may have missed.
    private let registration: Counted

    fileprivate final class Counted: Sendable {
      let file: Mutex<Registration?>
      init(_ file: Registration) { self.file = Mutex(file) }
    }

    fileprivate struct Registration: Equatable {
      var device: UInt64, inode: UInt64, epoch: UInt64
      init(_ counters: MappedCounters) {
        (device, inode) = counters.identity
        epoch = counters.epoch
      }
    }

    fileprivate init(signal: ChangeSignal, name: String, coalesce: UInt64, handler: @escaping @Sendable () -> Void) {
      self.signal = signal
      // Noted before counting: a file replaced in between is then counted in twice (a spare futex call per post),
      // never left uncounted.
      registration = Counted(Registration(signal.counters))
      signal.counters.increment(signal.listeners)
      let seen = signal.counters.load(signal.sequence)
      let thread = Thread { [signal, cancelled, registration] in
        Self.yieldToWakers()
        var last = UInt32(truncatingIfNeeded: seen)
        // Bounded sleeps: a cancel that races with the wait is noticed within this time.
        var timeout = timespec(tv_sec: 0, tv_nsec: 200_000_000)
        while !cancelled.load(ordering: .acquiring) {
          let current = Registration(signal.counters)
          let counted = registration.file.withLock { registered -> Bool in
            guard let known = registered, known != current else { return false }
            signal.counters.increment(signal.listeners)
            registered = current
            return true
          }
          if counted {
            last = UInt32(truncatingIfNeeded: signal.counters.load(signal.sequence))
            handler()
            continue
          }
          let now = UInt32(truncatingIfNeeded: signal.counters.load(signal.sequence))
          if now != last {
            last = now
            handler()
            if coalesce > 0, UInt32(truncatingIfNeeded: signal.counters.load(signal.sequence)) != now {
              MonotonicClock.sleep(nanoseconds: coalesce)  // busy: let posts gather
            }
            continue
          }
          guard let sleepers = signal.sleepers else {
            _ = gc_futex_wait(signal.counters.futexWord(signal.sequence), now, &timeout)
            continue
          }
          _ = signal.counters.increment(sleepers)
          Atomics.atomicMemoryFence(ordering: .sequentiallyConsistent)
          let again = signal.counters.atomic(signal.sequence).load(ordering: .sequentiallyConsistent)
          if UInt32(truncatingIfNeeded: again) == now {
            _ = gc_futex_wait(signal.counters.futexWord(signal.sequence), now, &timeout)
          }
        }
      }
      thread.name = name
      thread.start()
    }

    /// Makes the calling thread `SCHED_BATCH`: woken by a post, it no longer preempts the thread running on its
    /// core — which, on a machine with fewer cores than busy processes, is often a writer holding the suite's lock,
    /// and every other writer then waits for the time slice to come back (4 observing processes cost 4 writers
    /// 20–40 % that way, far more than the CPU they used). On an idle core it runs at once, as before.
    private static func yieldToWakers() {
      _ = gc_sched_batch_self()
    }

    /// Stops the thread (after a handler call in progress, if any) and stops counting this listener.
    package func cancel() {
      guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
      // Uncounted only from the file it is counted in (a file replaced meanwhile never counted it).
      registration.file.withLock { registered in
        if registered == Registration(signal.counters) {
          _ = signal.counters.atomic(signal.listeners).loadThenWrappingDecrement(ordering: .relaxed)
        }
        registered = nil
      }
      // Wakes our thread (and, harmlessly, other processes' listeners, which find the sequence unchanged).
      _ = gc_futex_wake(signal.counters.futexWord(signal.sequence), Int32.max)
    }

    deinit { cancel() }
  }
}
