import GroupContainerCore
import LiveActivities
import Testing

private struct PrivateType {}
private enum PrivateEnum { struct Nested {} }
struct Generic<T> {}
enum Outer {
  struct Inner {}
  final class Object {}
}
fileprivate struct FilePrivate {}

private struct PrivateAttributes: ActivityAttributes {
  struct ContentState: Codable, Hashable, Sendable { var n = 0 }
}

/// Activity types (and intents: AppIntentsTests) are named in the container by their type's name
/// (`String(describing:)`), which another process built from the same source must find again; `TypeName.unqualified`
/// names them so without the casts that made a new process's first naming walk the conformance records a dozen times. It must give exactly
/// what `String(describing:)` gives. Mutant: the private discriminator kept (`_typeName` alone) fails.
@Suite struct TypeNameTests {
  @Test func theNameIsStringDescribingOfTheType() {
    func check<T>(_ type: T.Type) {
      #expect(TypeName.unqualified(type) == String(describing: type))
    }
    struct Local {}
    check(Int.self)
    check(Outer.Inner.self)
    check(Outer.Object.self)
    check(Generic<Int>.self)
    check(Generic<[String: Outer.Inner]>.self)
    check(Generic<(Int, String)>.self)
    check(Optional<Outer.Inner>.self)
    check(PrivateType.self)
    check(PrivateEnum.Nested.self)
    check(Generic<PrivateType>.self)
    check(Generic<Generic<PrivateType>>.self)
    check(FilePrivate.self)
    check(Local.self)
    check(Generic<Local>.self)
    check(((Int) -> Void).self)
  }

  /// What an optimized build's `_typeName` gives for private types (a debug build's leaves the discriminators out).
  @Test func discriminatorsAreLeftOut() {
    let hash = "_D6A36D7469E0BCE5B52C2C485393FBA7"
    #expect(TypeName.withoutDiscriminators("(P in \(hash))") == "P")
    #expect(TypeName.withoutDiscriminators("G<(P in \(hash))>") == "G<P>")
    #expect(TypeName.withoutDiscriminators("G<(P in \(hash)), (Q in \(hash))>") == "G<P, Q>")
    #expect(TypeName.withoutDiscriminators("G<((P in \(hash)), Int)>") == "G<(P, Int)>")
    #expect(TypeName.withoutDiscriminators("(Int, String)") == "(Int, String)")
    #expect(TypeName.withoutDiscriminators("(Int) -> ()") == "(Int) -> ()")
    #expect(TypeName.withoutDiscriminators("(P in _xyz)") == "(P in _xyz)")  // not hex: not a discriminator
  }

  @Test func aPrivateActivityTypeIsNamedAsBefore() {
    #expect(PrivateAttributes.activityTypeName == "PrivateAttributes")
  }
}
