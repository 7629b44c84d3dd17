import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import PropertyList
import SharedDefaults

/// `HelperCommand.domainReader(suite:)`; `directory` holds the stop file.
func runDomainReader(suite: String, directory: String, _ container: GroupContainer) throws -> Never {
  let defaults = try SharedDefaults(suiteName: suite, container: container)
  let stop = directory + "/stop"
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
