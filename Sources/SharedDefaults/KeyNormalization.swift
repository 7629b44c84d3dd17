import Foundation

/// The one rule for a key's spelling, at every layer (journal records, the image's index, the export, an outside
/// edit, observers): canonically equivalent spellings — `café` as one precomposed scalar (NFC) or as `e` plus a
/// combining accent (NFD) — are one key, stored and looked up in NFC.
///
/// Why one key, although Apple's CFPreferences compares keys without normalizing (two keys): Swift compares
/// `String`s by canonical equivalence, so every `[String: …]` a key passes through — `dictionaryRepresentation()`,
/// `register(defaults:)`, a plist's dictionary, the in-memory changes — can hold only one of the two spellings,
/// while the files compare bytes. Two rules made a new process read one spelling's value from the image and
/// another from the export (#32 item 3). Normalizing where a key enters a byte-compared layer makes them agree.
extension String {
  /// This key in NFC (the spelling the files hold). ASCII — nearly every key — is returned as it is, unchecked.
  var normalizedKey: String {
    utf8.allSatisfy { $0 < 0x80 } ? self : precomposedStringWithCanonicalMapping
  }
}
