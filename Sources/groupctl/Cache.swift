import ArgumentParser

/// `groupctl cache …`: the group's image cache (its subcommands live in one file each).
struct Cache: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Use the group's shared image cache and its memory policy.",
    subcommands: [CachePressure.self])
}
