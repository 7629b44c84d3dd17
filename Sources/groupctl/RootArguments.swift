import ArgumentParser
import SystemLayer

/// What groupctl does with its arguments before ArgumentParser sees them: `--root` before the subcommand, and a
/// suggestion for a mistyped subcommand.
enum RootArguments {
  /// `groupctl --root DIR <subcommand> …`: ArgumentParser gives the root command's options to the root command only,
  /// and the groupctl article (`Sources/GroupContainer/Documentation.docc/Groupctl.md`) says every subcommand takes
  /// `--root`. A leading `--root DIR` (or `--root=DIR`) is removed and becomes GROUP_CONTAINER_ROOT, which is what
  /// a missing `--root` falls back to (and what the processes groupctl starts inherit). A `--root` after the
  /// subcommand still wins.
  static func hoistRoot(_ arguments: [String]) -> [String] {
    var rest = arguments[...]
    while let first = rest.first {
      if first == "--root", rest.count >= 2 {
        Environment.set("GROUP_CONTAINER_ROOT", rest[rest.startIndex + 1])
        rest = rest.dropFirst(2)
      } else if first.hasPrefix("--root=") {
        Environment.set("GROUP_CONTAINER_ROOT", String(first.dropFirst("--root=".count)))
        rest = rest.dropFirst()
      } else {
        break
      }
    }
    return Array(rest)
  }

  /// When the first word that is not an option names no subcommand where one is expected: the message, with the
  /// closest names (`groupctl: unknown command 'stauts' (did you mean 'status'?)`) and where to see them all.
  static func unknownSubcommand(in arguments: [String]) -> String? {
    var command: ParsableCommand.Type = Groupctl.self
    var path = ["groupctl"]
    for argument in arguments where !argument.hasPrefix("-") {
      let subcommands = command.configuration.subcommands
      guard !subcommands.isEmpty else { return nil }
      if let next = subcommands.first(where: { names(of: $0).contains(argument) }) {
        command = next
        path.append(next._commandName)
        continue
      }
      let candidates = subcommands.flatMap(names(of:))
      let close = candidates.filter { distance($0, argument) <= (argument.count > 5 ? 2 : 1) || $0.hasPrefix(argument) }
      let hint = close.isEmpty ? "" : " (did you mean \(close.map { "'\($0)'" }.joined(separator: " or "))?)"
      let listing = (path + ["--help"]).joined(separator: " ")
      return "groupctl: unknown command '\(argument)'\(hint)\n  See '\(listing)' for the commands."
    }
    return nil
  }

  private static func names(of command: ParsableCommand.Type) -> [String] {
    [command._commandName] + command.configuration.aliases
  }

  /// Edits between two names: insertions, deletions, substitutions and swaps of neighbours ("stauts", "raed": one
  /// each), the optimal string alignment distance.
  static func distance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
    var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { d[i][0] = i }
    for j in 0...b.count { d[0][j] = j }
    for i in 1...a.count {
      for j in 1...b.count {
        d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1) }
      }
    }
    return d[a.count][b.count]
  }
}
