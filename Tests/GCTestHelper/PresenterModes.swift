// gc-test-helper sub-commands for presenter semantics, robustness and environment tests (issue #8).
import FileCoordination
import Foundation
import SystemLayer

/// The sub-commands this file handles.
let presenterModes: Set<String> = ["default-root"]

func runPresenterMode(_ command: String, _ args: [String], _ container: GroupContainer) throws {
  let out = FileHandle.standardOutput
  switch command {
  case "default-root":
    // default-root <root> <group>: prints "root <GroupContainer.defaultRoot()>" or "error <description>".
    do { out.write(Data("root \(try GroupContainer.defaultRoot())\n".utf8)) } catch {
      out.write(Data("error \(error)\n".utf8))
    }
  default:
    break
  }
}
