import AppIntents
import Testing

private struct PrivateIntent: AppIntent {
  static let title = "Private"
  func perform() async throws -> some IntentResult { .result() }
}

/// An intent is identified by its type's unqualified name (`String(describing:)`, now `TypeName.unqualified`,
/// LiveActivitiesTests' TypeNameTests): a private type's name leaves its discriminator out, so the widget's copy of
/// the type finds the app's.
@Suite struct IntentIdentifierTests {
  @Test func aPrivateIntentIsNamedAsBefore() {
    #expect(PrivateIntent.intentIdentifier == "PrivateIntent")
    #expect(EchoIntent.intentIdentifier == String(describing: EchoIntent.self))
  }
}
