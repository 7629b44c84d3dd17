import CInotifyTools
import Glibc
import SystemPackage

/// libinotifytools' inotify instance behind the few calls the watcher thread makes: add, remove and read watches,
/// queue a marker, and a wake-up descriptor that the thread polls beside the instance's own.
///
/// The library keeps one global, non-thread-safe instance: one backend per process, whose `add`, `remove`, `next`
/// and `queueMarker` are called by one thread (the watcher's). `wake` and `queuedBytes` may be called from any thread.
///
/// Where the library (3.22.6, Debian's; the same in 4.25.9) has no call for what is needed, and what is done instead:
/// - No function gives its descriptor (`inotify_fd` is `static` in inotifytools.c), which the thread must poll with
///   its wake-up and the descriptors it serves. `inotify_init` takes the lowest free descriptor: that number is taken
///   just before the library is initialised and checked to be the library's instance (`isLibraryInstance`); should
///   another thread have opened a descriptor in between, the library is initialised again.
/// - `inotifytools_watch_file` answers 1 or 0, never the watch descriptor; `inotifytools_wd_from_filename` keeps
///   answering the descriptor of a watch the kernel dropped (its directory deleted), and no function forgets one:
///   `inotifytools_remove_watch_by_wd` keeps the entry when `inotify_rm_watch` fails, as it does for a dropped watch
///   (renaming the entry in place, the way out used before, left its sorted table out of order: a crash). So
///   watches are added and removed on the instance's descriptor (`inotify_add_watch`, `inotify_rm_watch`); the
///   library's table of names stays empty.
/// - `inotifytools_next_events` waits with `select`, which cannot take a descriptor ≥ `FD_SETSIZE` (glibc aborts the
///   process): an instance that would get such a descriptor is refused (`start`), and the thread polls the
///   descriptor itself and asks the library only when there is something to read, never waiting in it.
package final class InotifyTools: Sendable {
  /// The library's inotify descriptor: readable when an event is queued.
  package let descriptor: Int32
  /// Signalled by `wake`: readable until `consumeWakeUps`.
  private let wakeUp: EventFD
  /// A pipe nobody else watches or writes: markers are watches of it (`queueMarker`).
  private let marker: ProcessSpawn.Pipe

  /// `FD_SETSIZE`: the library's `select` cannot wait on a descriptor this high or higher.
  package static let selectLimit: Int32 = 1024

  /// Initialises the library, and makes the wake-up and marker descriptors. Throws when no inotify instance is left
  /// for the user (`inotify_init`, `EMFILE`), when the instance would get a descriptor the library's `select` cannot
  /// take, or when its descriptor cannot be told (another thread kept opening descriptors meanwhile).
  package init() throws(FileSystemError) {
    // The instance first, to take the lowest free descriptor (below FD_SETSIZE if any is): the others may be higher.
    let instance = try Self.initialiseLibrary()
    do {
      marker = try ProcessSpawn.pipe()
      wakeUp = try EventFD(name: "watcher wake-up")
    } catch {
      inotifytools_cleanup()
      throw error  // a pipe made closes here
    }
    descriptor = instance
  }

  /// Initialises the library and answers its descriptor.
  private static func initialiseLibrary() throws(FileSystemError) -> Int32 {
    for _ in 0..<3 {
      // The lowest free descriptor, taken and given back at once: the one `inotify_init` takes next.
      let expected = try valueOrErrno { Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC) }.get("open", "/dev/null")
      _ = Glibc.close(expected)
      guard expected < selectLimit else {
        throw FileSystemError(
          "select", "", .tooManyOpenFiles,
          reason: "libinotifytools waits with select(), which takes no descriptor ≥ \(selectLimit) (FD_SETSIZE), and "
            + "the inotify instance would get \(expected): start watching before the process has \(selectLimit) "
            + "descriptors open")
      }
      guard inotifytools_initialize() != 0 else {
        throw FileSystemError("inotify_init", "", Errno(rawValue: inotifytools_error()))
      }
      if isLibraryInstance(expected) { return expected }
      inotifytools_cleanup()  // another thread opened a descriptor in between: the library took another one
    }
    throw FileSystemError(
      "inotify_init", "", .resourceTemporarilyUnavailable,
      reason: "libinotifytools' descriptor could not be told (other threads kept opening descriptors)")
  }

  /// Whether `fd` is the library's new instance: its queue is empty, and holds exactly one event (an `IN_IGNORED`
  /// without a name, 16 bytes) once the library has added and removed a watch (of `/`, nothing else watched in the
  /// new instance). The loop reads that event later and drops it (no handler has its watch descriptor).
  private static func isLibraryInstance(_ fd: Int32) -> Bool {
    guard queuedBytes(fd) == 0, inotifytools_watch_file("/", Int32(Watcher.attrib)) != 0 else { return false }
    let wd = inotifytools_wd_from_filename("/")
    guard wd >= 0, inotifytools_remove_watch_by_wd(wd) != 0 else { return false }
    return queuedBytes(fd) == 16
  }

  /// Watches the inode `path` names now for `mask` — added to what that inode is watched for already, unless
  /// `replacing` (a watch narrowed again, where no I/O fault is injected) — and answers its watch descriptor (the
  /// same for every path that names the inode). The corresponding C function is `inotify_add_watch`.
  package func add(_ path: String, mask: UInt32, replacing: Bool = false) throws(FileSystemError) -> Int32 {
    let flags = replacing ? mask : mask | Watcher.maskAdd
    return try valueOrErrno(replacing ? nil : .inotifyAddWatch) { inotify_add_watch(descriptor, path, flags) }
      .get("inotify_add_watch", path)
  }

  /// Stops watching `wd` (its `IN_IGNORED` is queued). A watch the kernel dropped already is gone: nothing to do.
  /// The corresponding C function is `inotify_rm_watch`.
  package func remove(_ wd: Int32) {
    _ = inotify_rm_watch(descriptor, wd)
  }

  /// The next event, copied out of the library's static buffer, or nil when none is queued. Never waits (the library
  /// is asked for one event with no timeout: more than one spins).
  package func next() -> (wd: Int32, event: Watcher.Event)? {
    guard let raw = inotifytools_next_events(0, 1) else { return nil }
    let event = Watcher.Event(
      mask: raw.pointee.mask, cookie: raw.pointee.cookie, name: String(cString: gc_inotify_event_name(raw)))
    return (raw.pointee.wd, event)
  }

  /// Queues, behind every event queued now, an `IN_IGNORED` with a watch descriptor of its own, and answers that
  /// descriptor (nil when no watch could be made): a watch of the marker pipe, removed at once. Watch descriptors
  /// are not reused soon, so the descriptor names this marker only.
  package func queueMarker() -> Int32? {
    let wd = inotify_add_watch(descriptor, "/proc/self/fd/\(marker.read.rawValue)", Watcher.attrib)
    guard wd >= 0, inotify_rm_watch(descriptor, wd) == 0 else { return nil }
    return wd
  }

  /// The bytes of events in the kernel's queue (-1 when that cannot be told). The corresponding C function is
  /// `ioctl` with `FIONREAD`.
  package func queuedBytes() -> Int32 { Self.queuedBytes(descriptor) }

  private static func queuedBytes(_ fd: Int32) -> Int32 {
    var bytes: Int32 = 0
    return ioctl(fd, UInt(FIONREAD), &bytes) == 0 ? bytes : -1
  }

  /// The wake-up descriptor, to poll beside `descriptor`: readable once `wake` was called, until `consumeWakeUps`.
  package var wakeUpDescriptor: Int32 { wakeUp.fd.rawValue }

  /// Wakes the thread polling `wakeUpDescriptor` (from any thread).
  package func wake() { wakeUp.signal() }

  /// Takes the wake-ups signalled so far (`wakeUpDescriptor` stops being readable).
  package func consumeWakeUps() { wakeUp.consume() }

  /// Closes the library's instance; nothing of it may be used afterwards. The wake-up and marker descriptors close
  /// with this object: a `wake` from another thread after `close` then signals an eventfd still ours, never a
  /// number reused since.
  package func close() {
    inotifytools_cleanup()
  }
}
