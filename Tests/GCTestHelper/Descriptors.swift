// Helper sub-command that reports what this process inherited (ChildProcessTests).
import Foundation
import HelperCommand

/// `HelperCommand.descriptors(stay:)`.
func runDescriptors(stay: Bool) -> Never {
  let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
  var lines: [String] = []
  for entry in entries.compactMap(Int.init).sorted() {
    // The directory listing's own descriptor is gone by now: skip what no longer resolves.
    if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)") {
      lines.append("fd \(entry) \(target)")
    }
  }
  FileHandle.standardOutput.write(Data((lines + ["done"]).map { $0 + "\n" }.joined().utf8))
  if stay {
    while true { Thread.sleep(forTimeInterval: 60) }
  }
  exit(0)
}
