// `gc-bench-defaults-reader GROUP SUITE ROOT KEYS`: an app that uses only shared defaults, for the memory rows of
// DefaultsBenchmarks — opens the suite, reads 10 random keys `w0-k<i>` (i < KEYS), each timed, and prints
// `max_us=<n> found=<n> peak_rss_kb=<n>`. It links SharedDefaults alone (not groupctl's SwiftNIO, argument parser and
// download code), so linked statically (`make static-programs`) its peak is what such an app pays — the figure set
// beside MMKV's in issue #32.
import FileCoordination  // opening a container (GroupContainer.init)
import Foundation
import GroupContainerCore
import SharedDefaults

let arguments = CommandLine.arguments
guard arguments.count == 5, let keys = Int(arguments[4]), keys > 0 else {
  FileHandle.standardError.write(Data("usage: gc-bench-defaults-reader GROUP SUITE ROOT KEYS\n".utf8))
  exit(2)
}
let container = try GroupContainer(
  identifier: arguments[1], root: URL(fileURLWithPath: arguments[3], isDirectory: true))
let defaults = try SharedDefaults(suiteName: arguments[2], container: container)
var slowest: UInt64 = 0
var found = 0
for _ in 0..<10 {
  let before = DispatchTime.now().uptimeNanoseconds
  if defaults.value(forKey: "w0-k\(Int.random(in: 0..<keys))") != nil { found += 1 }
  slowest = max(slowest, DispatchTime.now().uptimeNanoseconds - before)
}
// VmHWM: this process's peak resident memory since it started.
let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?.split(separator: " ").dropFirst().first
print("max_us=\(slowest / 1000) found=\(found) peak_rss_kb=\(peak ?? "0")")
