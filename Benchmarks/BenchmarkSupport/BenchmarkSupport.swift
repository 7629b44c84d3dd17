// What both benchmark targets share: temp roots, errors, and finding groupctl.
import Foundation
import Glibc
import Synchronization

public struct BenchmarkSetupError: Error, CustomStringConvertible {
  public var description: String
  public init(_ description: String) { self.description = description }
}

/// Where the temp roots go: `$GC_BENCH_TMPDIR` (e.g. /dev/shm, to see the framework's cost without ext4's),
/// else /tmp.
public let temporaryBase: String = {
  let base = ProcessInfo.processInfo.environment["GC_BENCH_TMPDIR"] ?? ""
  return base.hasPrefix("/") ? base : "/tmp"
}()

/// A fresh directory `<base>/gc-bench-XXXXXX` (`base` defaults to `temporaryBase`), removed again when this
/// process exits.
public func makeTemporaryRoot(base: String? = nil) throws -> String {
  let base = base ?? temporaryBase
  var template = Array("\(base)/gc-bench-XXXXXX".utf8CString)
  guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
    throw BenchmarkSetupError("mkdtemp in \(base) failed: errno \(errno)")
  }
  let root = String(cString: made)
  _ = removeRootsAtExit
  madeRoots.withLock { $0.append(root) }
  return root
}

/// Every root made, for the exit handler: a teardown's removal does not last while this process still has the
/// container open — the framework makes a removed container's layout again (its liveness tick notices), which
/// left hundreds of `gc-bench-*` directories in /tmp.
private let madeRoots = Mutex<[String]>([])
private let removeRootsAtExit: Void = { atexit { for root in madeRoots.withLock({ $0 }) { removeTree(root) } } }()

public func removeTree(_ path: String?) {
  guard let path, path.hasPrefix(temporaryBase + "/gc-bench-") || path.hasPrefix("/dev/shm/gc-bench-") else { return }
  try? FileManager.default.removeItem(atPath: path)
}

/// The root package's directory: this file is <root>/Benchmarks/BenchmarkSupport/BenchmarkSupport.swift.
private let rootPackage = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent().path

/// `groupctl` for "the other process": `$GROUPCTL`; the one built next to this benchmark executable (the
/// benchmark targets list it as a dependency, so it is built in the same configuration); else the root's builds.
public func locateGroupctl() throws -> String {
  let fm = FileManager.default
  if let path = ProcessInfo.processInfo.environment["GROUPCTL"], !path.isEmpty {
    guard fm.isExecutableFile(atPath: path) else { throw BenchmarkSetupError("GROUPCTL=\(path) is not executable") }
    return path
  }
  var candidates: [String] = []
  if let exe = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
    candidates.append((exe as NSString).deletingLastPathComponent + "/groupctl")
  }
  candidates += [rootPackage + "/.build/release/groupctl", rootPackage + "/.build/debug/groupctl"]
  guard let found = candidates.first(where: { fm.isExecutableFile(atPath: $0) }) else {
    let tried = candidates.joined(separator: ", ")
    throw BenchmarkSetupError("groupctl not found (tried \(tried)): set GROUPCTL or `swift build --product groupctl`")
  }
  return found
}

/// A program of the memory rows — `gc-bench-defaults-reader` or `gc-bench-idle-widget` — linked fully static (`make
/// static-programs`, built in Benchmarks/.build/static), or as the benchmarks are, beside this executable.
/// package-benchmark's malloc interposer is a shared object, so the benchmark targets themselves cannot be linked
/// statically.
public func locateProgram(_ name: String, linkedStatically: Bool) throws -> String {
  let fm = FileManager.default
  let path: String
  if linkedStatically {
    path = rootPackage + "/Benchmarks/.build/static/release/" + name
  } else {
    let exe = (try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
    path = (exe as NSString).deletingLastPathComponent + "/" + name
  }
  guard fm.isExecutableFile(atPath: path) else {
    throw BenchmarkSetupError(
      "no \(path)" + (linkedStatically ? ": run `make static-programs` at the root" : ": build the Benchmarks package"))
  }
  return path
}

/// Calls `body` with the Unix socket address of `path` (for `bind` and `connect`); nil when `path` does not fit.
public func withUnixSocketAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R? {
  var address = sockaddr_un()
  address.sun_family = sa_family_t(AF_UNIX)
  let bytes = Array(path.utf8)
  guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
  withUnsafeMutableBytes(of: &address.sun_path) { raw in
    for (offset, byte) in bytes.enumerated() { raw[offset] = byte }
  }
  return withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
  }
}

/// Reads a child's output until it holds `marker`; returns what was read. Throws when the child closes it first
/// (it exited), naming `who`.
@discardableResult
public func readUntil(_ marker: String, from output: Pipe, who: String) throws -> String {
  var text = ""
  while !text.contains(marker) {
    let chunk = output.fileHandleForReading.availableData  // blocks until bytes or end of file
    guard !chunk.isEmpty else { throw BenchmarkSetupError("\(who) exited before printing '\(marker)': \(text)") }
    text += String(decoding: chunk, as: UTF8.self)
  }
  return text
}
