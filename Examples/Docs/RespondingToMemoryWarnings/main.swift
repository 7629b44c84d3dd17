import Foundation
import GroupContainer
import Synchronization

let container = try GroupContainer(identifier: "group.com.example.timer")
MemoryPressure.shared.budget = 32 << 20  // this widget's limit

let thumbnails = Mutex<[String: [UInt8]]>([:])
let registration = MemoryPressure.shared.onMemoryWarning(name: "thumbnails", container: container) { level in
  thumbnails.withLock { kept in
    let bytes = kept.values.reduce(0) { $0 + $1.count }
    kept.removeAll()  // all of it: it can be made again
    return bytes  // the bytes released
  }
}
// … later, when the cache goes away:
registration.cancel()
