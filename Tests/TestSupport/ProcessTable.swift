import Foundation

/// The machine's processes whose command line contains `text` (a test's root path names every process of that
/// test: the agent's `--root`, groupctl's arguments). Each with its command line, arguments joined by spaces.
public func processes(commandLineContaining text: String) -> [(pid: Int32, commandLine: String)] {
  ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { name in
    guard let pid = Int32(name), pid != getpid(),
      let line = try? String(contentsOfFile: "/proc/\(name)/cmdline", encoding: .utf8), line.contains(text)
    else { return nil }
    return (pid, line.replacingOccurrences(of: "\0", with: " "))
  }
}
