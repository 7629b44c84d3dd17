import Foundation
import GroupContainer

let container = try GroupContainer(identifier: "group.com.example.reader")

if let file = CommandLine.arguments.dropFirst().first {
  // The sender (or `groupctl send <group-id> report.pdf reader`): the copy's path in the Inbox.
  let copy = try await container.send(file: URL(fileURLWithPath: file), toScheme: "reader")
  print("handed over as \(copy.path)")
} else {
  // The receiver, early in main:
  try container.registerURLScheme("reader", launching: Bundle.main.executableURL!)
  try container.onOpenURL(schemes: ["reader"]) { url in
    guard url.isFileURL else { return false }  // a reader:// URL of its own would be handled here
    let received = container.documentsURL.appendingPathComponent(url.lastPathComponent)
    try? FileCoordinator().coordinate(
      writingItemAt: url, options: .forMoving, writingItemAt: received, options: .forReplacing
    ) { from, to in
      try FileManager.default.moveItem(at: from, to: to)  // out of the Inbox to change it
    }
    return true
  }
}
