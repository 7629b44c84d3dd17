import Foundation
import GroupContainer

let groupID = "group.com.example.notes"
let defaults = SharedUserDefaults(suiteName: groupID)!
defaults.set(42, forKey: "unreadCount")
defaults.set("Groceries", forKey: "lastNoteTitle")
print("unread: \(defaults.integer(forKey: "unreadCount")), title: \(defaults.string(forKey: "lastNoteTitle") ?? "-")")

let containerURL = FileManager.default.containerURL(forSecurityApplicationGroupIdentifier: groupID)!
let notesURL = containerURL.appendingPathComponent("notes.txt")

final class NotesPresenter: NSObject, NSFilePresenter {
  let presentedItemURL: URL?
  let presentedItemOperationQueue = OperationQueue()
  init(url: URL) { presentedItemURL = url }
  func presentedItemDidChange() { print("notes changed elsewhere") }
}

let presenter = NotesPresenter(url: notesURL)
try NSFileCoordinator.addFilePresenter(presenter)

var error: NSError?
let coordinator = NSFileCoordinator(filePresenter: presenter)
coordinator.coordinate(writingItemAt: notesURL, options: .forReplacing, error: &error) { url in
  try? "Buy milk".write(to: url, atomically: true, encoding: .utf8)
}
coordinator.coordinate(readingItemAt: notesURL, options: [], error: &error) { url in
  print("notes: \((try? String(contentsOf: url, encoding: .utf8)) ?? "")")
}
if let error { print("coordination failed: \(error.localizedDescription)") }
NSFileCoordinator.removeFilePresenter(presenter)
