import PropertyList

let settings: PropertyListValue = .dictionary([
  "timeLeft": .integer(60),
  "sound": .string("bell"),
  "volumes": .array([.real(0.5), .real(0.8)]),
])
let bytes = try settings.encoded(as: .binary)  // [UInt8], starts with "bplist00"
let back = try PropertyListValue(bytes: bytes)  // detects binary or XML
assert(back == settings)
print(back.dictionaryValue?["timeLeft"]?.intValue ?? 0)  // 60

do {
  _ = try PropertyListValue(bytes: Array("bplist00 not really".utf8))
} catch {
  print(error)  // what is wrong, and at which byte
}
