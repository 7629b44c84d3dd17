import CSystemShims
import Glibc
import SystemPackage

/// The system calls behind memory pressure (MemoryWarnings' policy): the process's memory cgroup and its files,
/// `/proc/meminfo`, `/proc/self/statm`, PSI triggers, cgroup v1 pressure events through `cgroup.event_control`
/// and an eventfd, `poll`, `statvfs` and `malloc_trim`. Linux only, as everything in this module.
package enum MemorySignals {
  /// The memory cgroup this process is in and where its files are.
  package struct Cgroup: Sendable, Equatable, CustomStringConvertible {
    package enum Version: Int, Sendable { case v1 = 1, v2 = 2 }
    package var version: Version
    /// The cgroup's directory, e.g. `/sys/fs/cgroup/memory/user.slice` (v1) or `/sys/fs/cgroup/app.slice` (v2).
    package var directory: String
    package var description: String { "cgroup v\(version.rawValue) \(directory)" }
  }

  /// The process's memory cgroup from `/proc/self/cgroup`: the v1 `memory` controller's line (`N:memory:/path`),
  /// else the v2 line (`0::/path`) when that hierarchy has the memory controller. Nil when neither has its files
  /// (no cgroup file system mounted, as in some containers).
  package static func memoryCgroup(procFile: String = "/proc/self/cgroup") -> Cgroup? {
    guard let text = try? readText(procFile, limit: 64 << 10) else { return nil }
    var v2Path: String?
    for line in text.split(separator: "\n") {
      let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
      guard fields.count == 3 else { continue }
      let path = String(fields[2])
      if fields[1].split(separator: ",").contains("memory") {
        for mount in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/memory,cpuset"] {
          let directory = normalized(mount + path)
          if (try? FileSystem.status(directory + "/memory.limit_in_bytes")) ?? nil != nil {
            return Cgroup(version: .v1, directory: directory)
          }
        }
      } else if fields[0] == "0" && fields[1].isEmpty {
        v2Path = path
      }
    }
    guard let v2Path else { return nil }
    for mount in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
      let directory = normalized(mount + v2Path)
      if (try? FileSystem.status(directory + "/memory.current")) ?? nil != nil {
        return Cgroup(version: .v2, directory: directory)
      }
    }
    return nil
  }

  private static func normalized(_ path: String) -> String {
    path.hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path
  }

  /// A small text file of /proc or /sys, read whole (these report size 0, so no size check applies).
  package static func readText(_ path: String, limit: Int = 1 << 20) throws(FileSystemError) -> String {
    let fd = try SystemFD.open(path, .readOnly)
    return String(decoding: try fd.readAll(limit: limit), as: UTF8.self)
  }

  /// A file holding one number (`memory.limit_in_bytes`, `memory.current`); nil for `max` (no limit).
  package static func readNumber(_ path: String) throws(FileSystemError) -> Int64? {
    let text = try readText(path, limit: 256).trimmingSpaces
    if text == "max" { return nil }
    guard let value = Int64(text) else { throw FileSystemError("read (not a number)", path, .invalidArgument) }
    return value
  }

  /// `key value` lines (`memory.stat`), or `Key: value kB` lines (`/proc/meminfo`, `/proc/self/status`, whose
  /// separator is a tab; converted to bytes).
  package static func readTable(_ path: String) throws(FileSystemError) -> [String: Int64] {
    var table: [String: Int64] = [:]
    for line in try readText(path).split(separator: "\n") {
      let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
      guard fields.count >= 2, let value = Int64(fields[1]) else { continue }
      var key = fields[0]
      if key.hasSuffix(":") { key = key.dropLast() }
      table[String(key)] = fields.count >= 3 && fields[2] == "kB" ? value * 1024 : value
    }
    return table
  }

  /// The process's own footprint in bytes: its resident anonymous memory (`resident − shared` pages of
  /// `/proc/self/statm`, i.e. `RssAnon`): the heap and stacks it dirtied, not the code and file pages the kernel
  /// can drop and read again — the counterpart of the footprint iOS holds an extension to.
  package static func footprint() throws(FileSystemError) -> Int64 {
    let fields = try readText("/proc/self/statm", limit: 512).split(separator: " ")
    guard fields.count >= 3, let resident = Int64(fields[1]), let shared = Int64(fields[2].trimmingSpaces) else {
      throw FileSystemError("read (unexpected format)", "/proc/self/statm", .invalidArgument)
    }
    return max(0, resident - shared) * Int64(pageSize)
  }

  /// The process's resident memory in bytes (`/proc/self/statm`, all of it: anonymous and file pages).
  package static func residentBytes() throws(FileSystemError) -> Int64 {
    let fields = try readText("/proc/self/statm", limit: 512).split(separator: " ")
    guard fields.count >= 2, let resident = Int64(fields[1]) else {
      throw FileSystemError("read (unexpected format)", "/proc/self/statm", .invalidArgument)
    }
    return resident * Int64(pageSize)
  }

  /// The most memory this process has had resident since it started, in bytes (`VmHWM` of `/proc/self/status`:
  /// this program's own, unlike `ru_maxrss` of a child started by `posix_spawn`, which counts the parent's memory
  /// shared before the exec).
  package static func peakResidentBytes() throws(FileSystemError) -> Int64 {
    guard let peak = try readTable("/proc/self/status")["VmHWM"] else {
      throw FileSystemError("read (no VmHWM)", "/proc/self/status", .invalidArgument)
    }
    return peak
  }

  /// The page size. The corresponding C function is `sysconf(_SC_PAGESIZE)`.
  package static var pageSize: Int { Int(sysconf(Int32(_SC_PAGESIZE))) }

  /// Gives the heap's free memory back to the kernel, so memory released on a warning leaves the footprint (glibc
  /// keeps freed chunks otherwise). The corresponding C function is `malloc_trim`.
  package static func returnFreedMemory() { _ = gc_malloc_trim(0) }

  /// Caps glibc's malloc arenas at `count` (it makes up to 8 per core, one for each thread that allocates while the
  /// others hold theirs, and each keeps what was freed in it): for a long-lived helper whose threads come and go.
  /// Call before starting threads. The corresponding C function is `mallopt(M_ARENA_MAX)`.
  package static func limitMallocArenas(_ count: Int32) { _ = gc_malloc_arena_max(count) }

  /// Fixes glibc's trim and mmap thresholds at `trim` and `mmap` bytes. Left to glibc, both rise each time a large
  /// block is freed (up to 64 and 32 MB), and then the free top of a thread's arena stays resident for good: `free`
  /// trims it only beyond the trim threshold, and `malloc_trim` trims the main arena's top only (10,000 downloads:
  /// 4.6 MB of free top kept by the agent). Fixed, a block of `mmap` bytes or more gets a mapping of its own, unmapped
  /// when freed, and an arena's free top beyond `trim` goes back to the kernel. Call before starting threads. The
  /// corresponding C function is `mallopt` (`M_TRIM_THRESHOLD`, `M_MMAP_THRESHOLD`).
  package static func fixMallocThresholds(trim: Int, mmap: Int) { _ = gc_malloc_fixed_thresholds(trim, mmap) }

  /// Bytes the heap has handed out and not had back (live allocations, of every arena): what a process keeps, as
  /// opposed to its resident size, which also counts pages the allocator holds free or that libraries map. The
  /// corresponding C function is `mallinfo2`.
  package static func heapBytesInUse() -> Int { Int(gc_malloc_bytes_in_use()) }

  /// Space of the file system holding `path`: its size and what an unprivileged user may still use, in bytes.
  /// The corresponding C functions are `open` and `fstatvfs`.
  package static func diskSpace(of path: String) throws(FileSystemError) -> (size: Int64, available: Int64) {
    let directory = try SystemFD.open(path, [.readOnly, .directory, .followSymlink])
    var st = statvfs()
    _ = try valueOrErrno { fstatvfs(directory.rawValue, &st) }.get("fstatvfs", path)
    let unit = Int64(st.f_frsize)
    return (Int64(st.f_blocks) * unit, Int64(st.f_bavail) * unit)
  }
}

/// An eventfd: a counter the kernel (a cgroup v1 pressure event) or another thread signals, read by `poll`ers.
/// Closed when the last reference goes.
package final class EventFD: Sendable {
  package let fd: SystemFD

  /// A non-blocking, close-on-exec eventfd. The corresponding C function is `eventfd`.
  package init(name: String) throws(FileSystemError) {
    let raw = try valueOrErrno { gc_eventfd(0, 1) }.get("eventfd", name)
    fd = SystemFD(rawValue: raw, path: name)
  }

  /// Reads and resets the counter (this re-arms `poll`: a counter left unread keeps the descriptor readable).
  /// Returns 0 when nothing was signalled. The corresponding C function is `read`.
  @discardableResult
  package func consume() -> UInt64 {
    var value: UInt64 = 0
    switch valueOrErrno({ Glibc.read(fd.rawValue, &value, 8) }) {
    case .success(8): return value
    default: return 0
    }
  }

  /// Adds one to the counter (wakes a poller). The corresponding C function is `write`.
  package func signal() {
    var one: UInt64 = 1
    _ = valueOrErrno { Glibc.write(fd.rawValue, &one, 8) }
  }
}

/// A registration of cgroup v1's `memory.pressure_level`: the kernel signals the eventfd each time reclaim in the
/// cgroup reaches `level` or above (`low`, `medium`, `critical`). The registration ends when the last reference
/// goes (closing the eventfd ends it in the kernel).
package final class CgroupV1PressureEvent: Sendable {
  package let level: String
  package let event: EventFD
  private let control: SystemFD

  /// Writes `"<eventfd> <pressure_level fd> <level>"` to the cgroup's `cgroup.event_control` (root, or the owner
  /// of the cgroup). The corresponding C functions are `eventfd`, `open` and `write`.
  package init(cgroupDirectory: String, level: String) throws(FileSystemError) {
    self.level = level
    let pressure = try SystemFD.open(cgroupDirectory + "/memory.pressure_level", .readOnly)
    let event = try EventFD(name: "eventfd for \(cgroupDirectory)/memory.pressure_level \(level)")
    let control = try SystemFD.open(cgroupDirectory + "/cgroup.event_control", .writeOnly)
    try control.writeAll(Array("\(event.fd.rawValue) \(pressure.rawValue) \(level)".utf8))
    self.event = event
    self.control = pressure
  }
}

/// A PSI trigger (`/proc/pressure/memory`, or a cgroup v2 `memory.pressure`): the kernel raises `POLLPRI` on the
/// descriptor when tasks stalled for `stallMicroseconds` within a `windowMicroseconds` window; it re-arms itself
/// (at most one event per window). Unprivileged triggers need Linux ≥ 6.5 and a window that is a multiple of 2 s.
/// The trigger ends when the last reference goes (closing its file ends it).
package final class PressureTrigger: Sendable {
  package let fd: SystemFD
  package let specification: String

  /// The corresponding C functions are `open` and `write` (`"some 150000 2000000"`).
  package init(path: String, kind: String, stallMicroseconds: Int, windowMicroseconds: Int) throws(FileSystemError) {
    specification = "\(kind) \(stallMicroseconds) \(windowMicroseconds)"
    let fd = try SystemFD.open(path, .readWrite)
    do {
      // The kernel wants the terminating NUL as part of the write.
      try fd.writeAll(Array(specification.utf8) + [0])
    } catch {
      throw FileSystemError("write '\(specification)' to", path, error.errno)
    }
    self.fd = fd
  }
}

/// `poll` over a few descriptors.
package enum Poll {
  package static let readable = Int16(POLLIN)
  package static let priority = Int16(POLLPRI)
  package static let error = Int16(POLLERR)

  /// Sleeps until one of `descriptors` has one of its events or `timeoutMilliseconds` pass; returns the events
  /// each one has (0 for none). The corresponding C function is `poll`.
  package static func wait(
    _ descriptors: [(fd: Int32, events: Int16)], timeoutMilliseconds: Int32
  ) throws(FileSystemError) -> [Int16] {
    var fds = descriptors.map { pollfd(fd: $0.fd, events: $0.events, revents: 0) }
    _ = try fds.withUnsafeMutableBufferPointer { buffer in
      valueOrErrno { Glibc.poll(buffer.baseAddress, nfds_t(buffer.count), timeoutMilliseconds) }
    }.get("poll", "")
    return fds.map(\.revents)
  }
}

extension StringProtocol {
  fileprivate var trimmingSpaces: String {
    String(self).split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" }).joined(separator: " ")
  }
}
