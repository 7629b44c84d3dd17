import Foundation
import GroupContainer

// An error ends the program with its message and status 1 (a top-level `try` would crash with a stack dump).
do {
  // The container: <root>/group.com.example.timer/ with Library/Preferences, Library/Caches, Downloads, Documents.
  // root = $GROUP_CONTAINER_ROOT, else $XDG_DATA_HOME/group-containers, else ~/.local/share/group-containers.
  let container = try GroupContainer(identifier: "group.com.example.timer")

  // Shared defaults: UserDefaults(suiteName:) that many processes write at once.
  let defaults = try SharedDefaults(container: container)
  try defaults.set(Date(), forKey: "leftAt")
  try defaults.set(60, forKey: "timeLeft")
  let timeLeft = DefaultsKey("timeLeft", default: 60)  // a typed key
  let left = try defaults.update(timeLeft) { $0 - 1 }  // atomic read-modify-write across processes
  print("time left: \(left) s")

  // Changes: this process's writes and every other process's, and outside edits of the plist.
  let changes = defaults.changes(forKeys: ["timeLeft"])  // listens from here on
  try defaults.set(58, forKey: "timeLeft")
  for await change in changes {
    print("\(change.key) is now \(change.newValue?.intValue ?? 0), written by process \(change.originProcessID ?? 0)")
    break  // a widget would go on listening
  }

  // Codable values, and the plist on disk made current and durable.
  struct Alarm: Codable { var sound: String; var volume: Double }
  try defaults.set(encoded: Alarm(sound: "bell", volume: 0.8), forKey: "alarm")
  try defaults.synchronize()  // Library/Preferences/group.com.example.timer.plist
  print("alarm: \(try defaults.decoded(Alarm.self, forKey: "alarm")!.sound)")
} catch {
  FileHandle.standardError.write(Data("tour-defaults: \(error)\n".utf8))
  exit(1)
}
