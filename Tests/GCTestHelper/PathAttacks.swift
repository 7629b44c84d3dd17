// Helper sub-commands that attack container paths (PathSafetyTests, HostileFilesTests).
import FileCoordination
import Foundation
import SystemLayer

/// Runs a path-attack sub-command; never returns (the test kills the helper).
///
/// - `swap <root> <group> <a> <b>`: swaps the container-relative names `a` and `b` with
///   `renameat2(RENAME_EXCHANGE)` in a tight loop; says "swapping" once started.
/// - `relink <root> <group> <item> <target>`: puts a symlink to `target` in the place of `item`, then a plain file,
///   each renamed over whatever is there, every ~20 µs (the writes under test replace either); says
///   "relinking" once started.
/// - `exchange <root> <group> <a> <b>`: swaps `a` and `b` once (`renameat2(RENAME_EXCHANGE)`), says "exchanged"
///   and exits.
/// - `plant-link <root> <group> <item> <target>`: renames a symlink to `target` over `item` once, says "planted"
///   and exits.
/// - `remake <root> <group> <directory>`: moves `directory` aside and makes it again with an empty directory
///   `deeper` in it, says "remade" and exits.
/// - `pause-write <root> <group> <item> [staged]`: starts a replace of `item` and stops after creating its temp
///   file (next to the item, or with `staged` in the container's staging directory, as replaces do), as a writer
///   that dies there would; says "created <temp name>".
func runPathAttack(_ args: [String], container: GroupContainer) throws -> Never {
  switch args[1] {
  case "swap":
    let a = container.path + "/" + args[4]
    let b = container.path + "/" + args[5]
    FileHandle.standardOutput.write(Data("swapping\n".utf8))
    var failures = 0
    while true {
      do { try FileSystem.exchange(a, b) } catch {
        failures += 1
        if failures == 1 { FileHandle.standardError.write(Data("\(error)\n".utf8)) }
      }
    }
  case "relink":
    let item = container.path + "/" + args[4]
    let link = item + ".gc-test-link"
    let file = item + ".gc-test-file"
    FileHandle.standardOutput.write(Data("relinking\n".utf8))
    while true {
      // A link, then a plain file again (a write refused at its check would otherwise leave the link for good).
      _ = unlink(link)
      guard symlink(args[5], link) == 0, rename(link, item) == 0 else {
        FileHandle.standardError.write(Data("relink: errno \(errno)\n".utf8))
        exit(1)
      }
      usleep(20)
      guard FileManager.default.createFile(atPath: file, contents: Data("plain".utf8)), rename(file, item) == 0 else {
        FileHandle.standardError.write(Data("relink: errno \(errno)\n".utf8))
        exit(1)
      }
      usleep(20)
    }
  case "exchange":
    try FileSystem.exchange(container.path + "/" + args[4], container.path + "/" + args[5])
    FileHandle.standardOutput.write(Data("exchanged\n".utf8))
    exit(0)
  case "plant-link":
    let item = container.path + "/" + args[4]
    guard symlink(args[5], item + ".gc-test-link") == 0, rename(item + ".gc-test-link", item) == 0 else {
      FileHandle.standardError.write(Data("plant-link: errno \(errno)\n".utf8))
      exit(1)
    }
    FileHandle.standardOutput.write(Data("planted\n".utf8))
    exit(0)
  case "remake":
    let directory = container.path + "/" + args[4]
    guard rename(directory, directory + ".gc-test-old") == 0, mkdir(directory, 0o700) == 0,
      mkdir(directory + "/deeper", 0o700) == 0
    else {
      FileHandle.standardError.write(Data("remake: errno \(errno)\n".utf8))
      exit(1)
    }
    FileHandle.standardOutput.write(Data("remade\n".utf8))
    exit(0)
  case "pause-write":
    let (parent, name) = ContainerDirectory.split(args[4])
    let directory = try container.directory().openDirectory(args.count > 5 ? ".coordination/staging" : parent)
    let temp = try AtomicReplace.createTemporary(in: directory, for: name, mode: 0o600)
    try temp.fd.writeAll(Array("half".utf8))
    FileHandle.standardOutput.write(Data("created \(temp.name)\n".utf8))
    while true { sleep(60) }
  default:
    FileHandle.standardError.write(Data("unknown path attack \(args[1])\n".utf8))
    exit(2)
  }
}
