import Foundation
import SystemLayer

/// A file the user names on the command line (not a container item): read it whole, or fail with
/// `cannot read 'PATH': <reason>` — Foundation's `Data(contentsOf:)` reports a missing file as an
/// NSCocoaErrorDomain dump.
enum InputFile {
  static func read(_ path: String, limit: Int = 1 << 30) throws -> Data {
    do throws(FileSystemError) {
      let file = try SystemFD.open(path, [.readOnly, .followSymlink])
      return Data(try file.readRegularFile(limit: limit).bytes)
    } catch {
      throw CommandFailure("cannot read '\(path)': \(error.reason ?? error.errno.description)")
    }
  }
}
