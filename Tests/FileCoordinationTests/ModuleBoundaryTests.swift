import Foundation
import Testing

/// SystemLayer is the only module that calls the C library (CONTRIBUTING: "one module owns all syscalls"), and the
/// wall clock is read through its `RealtimeClock` (the time-units rule). Read from the sources: a call added in
/// another module fails here with its file and line.
///
/// Mutant caught (made once by hand, seen failing, restored): `memcmp` called again in SuiteImageFormat.swift.
@Suite struct ModuleBoundaryTests {
  static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../Sources").standardizedFileURL

  /// C functions the other modules once called directly, and the imports that bring the C library in.
  static let pattern =
    #"(^import (Glibc|Musl)\b)|((^|[^.\w])(getpid|getppid|geteuid|getuid|usleep|sched_yield|nanosleep|memcmp|memcpy|getenv|setenv|clock_gettime|flock|fsync|fdatasync|mmap|munmap|kill|inotify_\w+)\()|(Date\(\)\.timeIntervalSince1970)"#

  /// Modules that may: SystemLayer owns the calls, the C targets are C.
  static let exempt: Set<String> = ["SystemLayer", "CSystemShims", "CInotifyTools"]

  @Test func onlySystemLayerCallsTheCLibrary() throws {
    let modules = try FileManager.default.contentsOfDirectory(atPath: Self.sources.path).filter {
      !Self.exempt.contains($0)
    }
    #expect(modules.contains("SharedDefaults") && modules.contains("FileCoordination"))
    let forbidden = try Regex(Self.pattern)
    var found: [String] = []
    var files = 0
    for module in modules {
      let root = Self.sources.appendingPathComponent(module)
      guard let walker = FileManager.default.enumerator(atPath: root.path) else { continue }
      for case let path as String in walker where path.hasSuffix(".swift") {
        files += 1
        let text = try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
          let code = line.trimmingCharacters(in: .whitespaces)
          guard !code.hasPrefix("//"), !code.contains("func "), line.contains(forbidden) else { continue }
          found.append("\(module)/\(path):\(number + 1): \(code)")
        }
      }
    }
    #expect(files > 100, "read \(files) source files")
    #expect(found.isEmpty, "C library calls outside SystemLayer:\n\(found.joined(separator: "\n"))")
  }
}
