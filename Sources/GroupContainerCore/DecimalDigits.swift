/// An integer's decimal digits appended in place to bytes being written (the JSON of messages and of activity
/// records): `String(value)` of a generic integer made a string per number and went through generic code — a
/// twentieth of a Live Activity update.
package enum DecimalDigits {
  @inlinable package static func append(_ value: UInt64, to out: inout [UInt8]) {
    let start = out.count
    var rest = value
    repeat {
      out.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10))
      rest /= 10
    } while rest > 0
    out[start...].reverse()
  }

  @inlinable package static func append(_ value: Int64, to out: inout [UInt8]) {
    if value < 0 { out.append(UInt8(ascii: "-")) }
    append(value.magnitude, to: &out)
  }
}
