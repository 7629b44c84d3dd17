import Foundation

/// The delivery-id rule of `request` messages: the id names the delivery's record in the container
/// (`.coordination/deliveries/<id>`, DeliveryLedger.swift in AppLaunching), so it becomes a file name. Checked by
/// senders and, on receipt, by the message protocol.
package enum DeliveryID {
  package static let rule = "a delivery id is 1 to 64 letters, digits and '-'"

  /// Whether `id` keeps the rule.
  package static func isValid(_ id: String) -> Bool {
    (1...64).contains(id.utf8.count)
      && id.utf8.allSatisfy {
        (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x2D
      }
  }
}
