import ArgumentParser
import Foundation
import GroupContainer
import SystemLayer

// The macOS `defaults` verbs beyond read/write/delete: read-type, rename, domains, find, export, import.

struct DefaultsReadType: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "read-type", abstract: "Print the type of a key's value: 'Type is integer' and so on.",
    discussion: """
      The types: string, integer, float, boolean, date, data, array, dictionary. A missing container, suite or key \
      is an error (exit status 1); nothing is created.
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key.") var key: String
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.openExisting(container)
    guard let value = defaults.value(forKey: key) else {
      throw CommandFailure("the key '\(key)' does not exist in suite '\(defaults.suiteName)'")
    }
    Output.line("Type is \(TypeName.of(value))")
  }
}

struct DefaultsRename: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "rename", abstract: "Rename a key, keeping its value.",
    discussion: """
      One commit: a reader sees the old key or the new one, never both or neither. A missing container, suite \
      or key is an error (exit status 1).
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The key to rename.") var oldKey: String
  @Argument(help: "Its new name.") var newKey: String
  @OptionGroup var suite: SuiteOptions

  func run() throws {
    let defaults = try suite.openExisting(container)
    // The suite's own value: a registered default is not the suite's to rename (there are none in groupctl).
    guard let value = defaults.propertyListRepresentation()[oldKey] else {
      throw CommandFailure("the key '\(oldKey)' does not exist in suite '\(defaults.suiteName)'")
    }
    guard oldKey != newKey else { return }
    try defaults.set(values: [newKey: value], removing: [oldKey])
  }
}

struct DefaultsDomains: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "domains", abstract: "List the container's suites, one per line, sorted.",
    discussion: """
      One per line (macOS prints one comma-separated line; lines suit scripts). A suite is listed once written \
      (or once its plist is in Library/Preferences). A missing container is an error (exit status 1).
      """)
  @OptionGroup var container: ContainerOptions

  func run() throws {
    for name in try Self.suites(of: try container.openExisting()) { Output.line(name) }
  }

  /// The suites of `group`: the names of `<suite>.lock` and `<suite>.plist` in Library/Preferences (its files).
  static func suites(of group: GroupContainer) throws -> [String] {
    let directory = group.preferencesURL.path
    guard try FileSystem.status(directory) != nil else { return [] }
    var names = Set<String>()
    for file in try FileSystem.listDirectory(directory) {
      for suffix in [".lock", ".plist"] where file.hasSuffix(suffix) {
        let name = String(file.dropLast(suffix.count))
        if (try? SharedDefaults.validate(suiteName: name)) != nil { names.insert(name) }
      }
    }
    return names.sorted()
  }
}

struct DefaultsFind: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "find", abstract: "Find a word in the keys and values of every suite of the container.",
    discussion: """
      Case-insensitive, as on macOS. For each suite with matches: "Found N keys in domain 'S': { … }" and the \
      matching entries (every entry when the suite's name matches). Nothing found: "No domain, key, nor value \
      containing 'W'" (exit status 0, as on macOS). A missing container is an error (exit status 1).
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The word to look for.") var word: String

  func run() throws {
    let group = try container.openExisting()
    var found = false
    for name in try DefaultsDomains.suites(of: group) {
      guard let defaults = try SharedDefaults(existingSuiteName: name, container: group) else { continue }
      let all = defaults.propertyListRepresentation()
      let matches =
        Self.contains(name, word) ? all : all.filter { Self.contains($0.key, word) || Self.contains($0.value, word) }
      guard !matches.isEmpty else { continue }
      found = true
      Output.line("Found \(matches.count) keys in domain '\(name)': " + OldStylePlist.render(.dictionary(matches)))
    }
    if !found { Output.line("No domain, key, nor value containing '\(word)'") }
  }

  static func contains(_ text: String, _ word: String) -> Bool {
    text.range(of: word, options: .caseInsensitive) != nil
  }

  /// Whether a string, number or date of `value`, or a key of one of its dictionaries, contains `word`.
  static func contains(_ value: PropertyListValue, _ word: String) -> Bool {
    switch value {
    case .array(let items): return items.contains { contains($0, word) }
    case .dictionary(let entries): return entries.contains { contains($0.key, word) || contains($0.value, word) }
    case .string(let text): return contains(text, word)
    default: return contains(OldStylePlist.render(value), word)
    }
  }
}

struct DefaultsExport: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "export", abstract: "Write a suite as an XML plist to a file, or to stdout with '-'.",
    discussion: "A missing container or suite is an error (exit status 1); nothing is created in the container.")
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The suite.") var suiteName: String
  @Argument(help: "The file to write, or '-' for stdout.") var path: String

  func run() throws {
    let defaults = try SuiteOptions.openExisting(suiteName, in: try container.openExisting())
    let bytes = try PropertyListValue.dictionary(defaults.propertyListRepresentation()).encoded(as: .xml)
    if path == "-" {
      FileHandle.standardOutput.write(Data(bytes))
    } else {
      // The user's own file, outside the container: their path, links followed, as a shell redirect would.
      let file = try SystemFD.open(path, [.writeOnly, .create, .truncate, .followSymlink], mode: 0o644)
      try file.writeAll(bytes)
    }
  }
}

struct DefaultsImport: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "import", abstract: "Replace a suite's contents with the dictionary of a plist file ('-': stdin).",
    discussion: """
      The file: a binary, XML or old-style plist whose top level is a dictionary. One commit \
      (setPersistentDomain): a reader in any process sees the suite's old contents or the file's, never a mix. \
      Creates the container and suite when missing, as macOS does.
      """)
  @OptionGroup var container: ContainerOptions
  @Argument(help: "The suite.") var suiteName: String
  @Argument(help: "The plist file, or '-' for stdin.") var path: String

  func run() throws {
    let data: Data
    if path == "-" {
      data = FileHandle.standardInput.readDataToEndOfFile()
    } else {
      data = try InputFile.read(path, limit: PropertyListLimits.default.maxBytes)
    }
    let value: PropertyListValue
    do {
      value =
        PropertyListFormat.detect(data) == nil
        ? try OpenStepPropertyListReader.read(data) : try PropertyListValue(bytes: data)
    } catch {
      throw CommandFailure("'\(path)' is not a property list: \(error)")
    }
    guard case .dictionary(let entries) = value else {
      throw CommandFailure("'\(path)' holds \(TypeName.of(value)), not a dictionary: import needs one")
    }
    let defaults = try SharedDefaults(suiteName: suiteName, container: try container.open())
    try defaults.setPersistentDomain(values: entries, forName: suiteName)
    defaults.waitForBackgroundWork()  // the compaction a large import starts: the next reader maps, not decodes
  }
}
