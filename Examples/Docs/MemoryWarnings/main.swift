import Foundation
import GroupContainer

let container = try GroupContainer(identifier: "group.com.example.feed")
let pressure = MemoryPressure.shared
pressure.budget = 32 << 20  // the widget's limit, like an iOS extension's
let tierLimit = pressure.memoryLimit / 4  // min(budget, the cgroup's limit, MemTotal): never the host's RAM alone
let thumbnails = MemoryCache<String, [UInt8]>(totalCostLimit: tierLimit)

// On a warning keep half of the limit, on critical nothing; return the bytes released.
let registration = pressure.onMemoryWarning(name: "thumbnails", container: container) { level in
  thumbnails.trim(toCost: level == .critical ? 0 : Int(Double(tierLimit) * MemoryPressure.warningTrimFraction))
}
// … when the cache goes away:
registration.cancel()
