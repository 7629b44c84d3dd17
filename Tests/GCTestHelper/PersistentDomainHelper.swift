import FileCoordination
import Foundation
import PropertyList
import SharedDefaults

/// `domain-reader <root> <group> <suite> <dir>`: reads the whole suite in a loop until the file `<dir>/stop`
/// exists. Each domain the test writes tags every value with its name ("A" or "B") and has a known key count; a
/// read that shows values of both, or a key count that is neither, is a mix. Prints "ready", then at the end
/// "seen A=<n> B=<n> empty=<n> mixed=<n>".
func runDomainReader(_ args: [String], _ container: GroupContainer) throws -> Never {
  let defaults = try SharedDefaults(suiteName: args[4], container: container)
  let stop = args[5] + "/stop"
  var seen = ["A": 0, "B": 0, "empty": 0, "mixed": 0]
  FileHandle.standardOutput.write(Data("ready\n".utf8))
  while access(stop, F_OK) != 0 {
    let values = defaults.propertyListRepresentation()
    let tags = Set(values.values.compactMap(\.stringValue))
    if values.isEmpty {
      seen["empty"]! += 1
    } else if tags.count == 1, let tag = tags.first, values.count == (tag == "A" ? 250 : 150) {
      seen[tag, default: 0] += 1
    } else {
      seen["mixed"]! += 1
    }
  }
  let line = "seen A=\(seen["A"]!) B=\(seen["B"]!) empty=\(seen["empty"]!) mixed=\(seen["mixed"]!)\n"
  FileHandle.standardOutput.write(Data(line.utf8))
  exit(0)
}
