/// An integer's decimal digits appended in place to bytes being written (the JSON of messages and of activity
/// records): `String(value)` of a generic integer made a string per number and went through generic code — a
/// twentieth of a Live Activity update.
package enum DecimalDigits {
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
