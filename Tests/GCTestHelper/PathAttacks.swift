// Helper sub-commands that attack container paths (PathSafetyTests, HostileFilesTests).
import FileCoordination
import Foundation
import GroupContainerCore
import HelperCommand
import SystemLayer

/// Runs a path attack (`.swap`, `.relink`, `.exchange`, `.plantLink`, `.remake`, `.pauseWrite`: HelperCommand.swift
/// says what each does and prints).
func runPathAttack(_ command: HelperCommand, container: GroupContainer) throws -> Never {
  switch command {
  case .swap(let a, let b):
    let a = container.path + "/" + a
    let b = container.path + "/" + b
    FileHandle.standardOutput.write(Data("swapping\n".utf8))
    var failures = 0
    while true {
      do { try FileSystem.exchange(a, b) } catch {
        failures += 1
        if failures == 1 { FileHandle.standardError.write(Data("\(error)\n".utf8)) }
      }
    }
  case .relink(let item, let target):
    let item = container.path + "/" + item
    let link = item + ".gc-test-link"
    let file = item + ".gc-test-file"
    FileHandle.standardOutput.write(Data("relinking\n".utf8))
    while true {
      // A link, then a plain file again (a write refused at its check would otherwise leave the link for good).
      _ = unlink(link)
      guard symlink(target, link) == 0, rename(link, item) == 0 else {
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
  case .exchange(let a, let b):
    try FileSystem.exchange(container.path + "/" + a, container.path + "/" + b)
    FileHandle.standardOutput.write(Data("exchanged\n".utf8))
    exit(0)
  case .plantLink(let item, let target):
    let item = container.path + "/" + item
    guard symlink(target, item + ".gc-test-link") == 0, rename(item + ".gc-test-link", item) == 0 else {
      FileHandle.standardError.write(Data("plant-link: errno \(errno)\n".utf8))
      exit(1)
    }
    FileHandle.standardOutput.write(Data("planted\n".utf8))
    exit(0)
  case .remake(let directory):
    let directory = container.path + "/" + directory
    guard rename(directory, directory + ".gc-test-old") == 0, mkdir(directory, 0o700) == 0,
      mkdir(directory + "/deeper", 0o700) == 0
    else {
      FileHandle.standardError.write(Data("remake: errno \(errno)\n".utf8))
      exit(1)
    }
    FileHandle.standardOutput.write(Data("remade\n".utf8))
    exit(0)
  case .pauseWrite(let item, let staged):
    let (parent, name) = ContainerDirectory.split(item)
    let directory = try container.directory().openDirectory(staged ? ".coordination/staging" : parent)
    let temp = try AtomicReplace.createTemporary(in: directory, for: name, mode: 0o600)
    try temp.fd.writeAll(Array("half".utf8))
    FileHandle.standardOutput.write(Data("created \(temp.name)\n".utf8))
    while true { sleep(60) }
  default:
    FileHandle.standardError.write(Data("not a path attack: \(command)\n".utf8))
    exit(2)
  }
}
