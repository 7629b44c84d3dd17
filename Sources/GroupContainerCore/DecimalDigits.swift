/// An integer's decimal digits appended in place to bytes being written (the JSON of messages and of activity
/// records): `String(value)` of a generic integer made a string per number and went through generic code — a
/// twentieth of a Live Activity update. And read back from bytes, for the names every received message carries.
package enum DecimalDigits {
  /// The value of 1 to 20 ASCII digits (leading zeros taken); nil for anything else, or past `UInt64.max`.
  package static func value(of digits: UnsafeBufferPointer<UInt8>) -> UInt64? {
    guard !digits.isEmpty, digits.count <= 20 else { return nil }
    var value: UInt64 = 0
    for byte in digits {
      guard byte &- UInt8(ascii: "0") < 10 else { return nil }
      let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
      let (next, overflow2) = times10.addingReportingOverflow(UInt64(byte &- UInt8(ascii: "0")))
      guard !overflow1, !overflow2 else { return nil }
      value = next
    }
    return value
  }

  @inlinable package static func append(_ value: UInt64, to out: inout [UInt8]) {
    // Last digit first, into a buffer on the stack (reversing `out[start...]` in place copied the array).
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
      var rest = value
      var first = digits.count
      repeat {
        first -= 1
        digits[first] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
        rest /= 10
      } while rest > 0
      out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[first...]))
    }
  }

  @inlinable package static func append(_ value: Int64, to out: inout [UInt8]) {
    if value < 0 { out.append(UInt8(ascii: "-")) }
    append(value.magnitude, to: &out)
  }
}
