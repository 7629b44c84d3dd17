import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

struct CacheOptions: ParsableArguments {
  @Option(help: "The cache's name (a directory of Library/Caches).") var cache = "images"
  @Option(help: "Bytes on disk above which a store trims the cache (default 256 MiB).") var diskLimit: Int?

  func open(_ container: ContainerOptions) throws -> SharedImageCache {
    var limits = SharedImageCache.Limits()
    if let diskLimit { limits.diskBytes = diskLimit }
    return try SharedImageCache(name: cache, container: try container.open(), limits: limits)
  }

  /// The cache if the container and its `Library/Caches/<name>` exist; else exit status 1 with nothing created.
  /// For the commands that only read. (A cache removed between the check and the open is made again: it existed.)
  func openExisting(_ container: ContainerOptions) throws -> SharedImageCache {
    let group = try container.openExisting()
    guard try FileSystem.status(group.cachesURL.appendingPathComponent(cache).path) != nil else {
      throw CommandFailure("no such cache '\(cache)' in \(group.identifier) (at \(group.cachesURL.path)/\(cache))")
    }
    return try SharedImageCache(name: cache, container: group)
  }
}

struct CacheStore: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "store", abstract: "Store an image file (PNG, JPEG, GIF or WebP) under a key.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key (usually the image's URL).") var key: String
  @Argument(help: "The image file ('-' for stdin).") var file: String
  @Option(help: "Seconds after which the entry expires.") var expiresAfter: Int?
  @OptionGroup var cache: CacheOptions

  func run() throws {
    let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try InputFile.read(file)
    let image = try cache.open(container).store(data, forKey: key, expiresAfter: expiresAfter.map { .seconds($0) })
    Output.line("stored \(image.format.rawValue) \(image.pixelWidth)x\(image.pixelHeight) (\(image.data.count) bytes)")
  }
}

struct CacheGet: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "get", abstract: "Write the image of a key to stdout or a file; exit status 1 on a miss.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key.") var key: String
  @Option(name: .shortAndLong, help: "Write to this file instead of stdout.") var output: String?
  @OptionGroup var cache: CacheOptions

  func run() throws {
    guard let image = try cache.openExisting(container).image(forKey: key) else {
      FileHandle.standardError.write(Data("no image for '\(key)'\n".utf8))
      throw ExitCode(1)
    }
    if let output {
      try image.data.write(to: URL(fileURLWithPath: output))
    } else {
      FileHandle.standardOutput.write(image.data)
    }
  }
}

struct CacheList: ParsableCommand {
  static let configuration = CommandConfiguration(commandName: "list", abstract: "List the entries on disk.")
  @OptionGroup var container: ContainerOptions
  @Flag(help: "One JSON object per line.") var json = false
  @OptionGroup var cache: CacheOptions

  func run() throws {
    let entries = try cache.openExisting(container).entries().sorted { $0.lastUsed > $1.lastUsed }
    let time = ISO8601DateFormatter()
    for entry in entries {
      if json {
        Output.json([
          "key": .string(entry.key), "format": .string(entry.info.format.rawValue),
          "width": .int(entry.info.pixelWidth), "height": .int(entry.info.pixelHeight),
          "frames": .int(entry.info.frameCount), "bytes": .int(entry.bytes),
          "lastAccess": .string(time.string(from: entry.lastUsed)),
          "expires": entry.expiresAt.map { .string(time.string(from: $0)) },
        ])
      } else {
        Output.line(
          "\(entry.info.format.rawValue)\t\(entry.info.pixelWidth)x\(entry.info.pixelHeight)\t\(entry.bytes)\t"
            + "\(time.string(from: entry.lastUsed))\t\(entry.key)")
      }
    }
  }
}

struct CacheStats: ParsableCommand {
  static let configuration = CommandConfiguration(commandName: "stats", abstract: "Entries and bytes on disk.")
  @OptionGroup var container: ContainerOptions
  @Flag(help: "Print JSON.") var json = false
  @OptionGroup var cache: CacheOptions

  func run() throws {
    let opened = try cache.openExisting(container)
    let stats = try opened.statistics()
    if json {
      Output.json([
        "entries": .int(stats.diskEntries), "bytes": .int(stats.diskBytes),
        "limit": .int(opened.limits.diskBytes),
      ])
    } else {
      Output.line("\(stats.diskEntries) entries, \(stats.diskBytes) bytes (limit \(opened.limits.diskBytes))")
    }
  }
}

struct CacheTrim: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "trim",
    abstract: "Remove expired and old entries, then least recently used ones when over the limit.")
  @OptionGroup var container: ContainerOptions
  @Flag(help: "Go down to the low watermark even when under the limit.") var toLowWatermark = false
  @Option(help: "Use this disk limit in bytes instead of the default.") var limit: Int?
  @OptionGroup var cache: CacheOptions

  func run() throws {
    let group = try container.open()
    var limits = SharedImageCache.Limits()
    if let limit { limits.diskBytes = limit }
    let opened = try SharedImageCache(name: cache.cache, container: group, limits: limits)
    guard let report = try opened.trim(toLowWatermark: toLowWatermark) else {
      Output.line("another process is trimming this cache")
      return
    }
    Output.line(
      "removed \(report.removedEntries) entries (\(report.removedBytes) bytes); "
        + "\(report.remainingEntries) remain (\(report.remainingBytes) bytes)")
  }
}

struct CacheClear: ParsableCommand {
  static let configuration = CommandConfiguration(commandName: "clear", abstract: "Remove every entry.")
  @OptionGroup var container: ContainerOptions
  @OptionGroup var cache: CacheOptions

  func run() throws {
    try cache.open(container).removeAll()
    Output.line("cleared")
  }
}
