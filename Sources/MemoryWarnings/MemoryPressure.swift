/// The low-memory eviction policy (issue #10): levels from Linux's signals, handlers like
/// `didReceiveMemoryWarning`. (Being built.)
public enum MemoryPressureLevel: Int, Sendable, Hashable, Comparable, Codable, CaseIterable {
  case normal = 0
  case warning = 1
  case critical = 2

  public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}
