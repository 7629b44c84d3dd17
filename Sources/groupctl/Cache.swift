import ArgumentParser

/// `groupctl cache …`: the group's image cache (store/get/list/stats/trim/clear: CacheCommands.swift) and its memory
/// policy (CachePressure.swift).
struct Cache: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "cache",
    abstract: "Use the group's shared image cache and its memory policy.",
    subcommands: [
      CacheStore.self, CacheGet.self, CacheList.self, CacheStats.self, CacheTrim.self, CacheClear.self,
      CachePressure.self,
    ])
}
