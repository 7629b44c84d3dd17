import Foundation
import PropertyList
import SystemLayer  // SplitMix64: a failing run replays from its seed
import TestSupport
import Testing

@testable import SharedDefaults

/// Tiers of changes (SuiteValues.swift): `changes` is sealed when full, sealed tiers are merged in the background,
/// and a compaction freezes them all. A lookup asks the newest tier first; a removal (a change to nil) hides older
/// tiers and the image.
///
/// Mutants this suite catches (each made once by hand):
/// - sealed tiers asked oldest first (`sealed` not reversed in `change(forKey:)`): `theNewestTierWins`,
///   `aRemovalHidesOlderTiersAndTheImage`, `randomSequencesMatchAPlainDictionary`;
/// - a merge installed without its identity check (`installMerged` replacing the first tiers whatever they are):
///   `aMergeIsInstalledOnlyOverTheTiersItWasBuiltFrom`, `randomSequencesMatchAPlainDictionary`;
/// - `freeze()` forgetting the sealed tiers (only `changes` frozen): `freezeTakesTheSealedTiersAndInstallKeepsNewer`,
///   `randomSequencesMatchAPlainDictionary`.
@Suite(.runSlot(.minutes(2))) struct SuiteValuesTierTests {
  func image(_ values: [String: PropertyListValue]) throws -> SuiteImage {
    try SuiteImage(bytes: SuiteImage.merged(base: nil, changes: values, generation: 1, position: 0))
  }

  /// The image `values` builds for a compaction: its image with its frozen tiers folded in.
  func compacted(_ values: SuiteValues) throws -> SuiteImage {
    try SuiteImage(
      bytes: SuiteImage.merged(
        base: values.image, changes: SuiteValues.mergedTable(values.frozen), generation: 1, position: 0))
  }

  @Test func aFullTableIsSealedAndNeverGrows() {
    var values = SuiteValues(image: nil, capacity: 4)
    for i in 0..<4 { values.set(.integer(PropertyListInteger(i)), forKey: "k\(i)") }
    #expect(values.sealed.isEmpty && values.changes.count == 4)
    values.set(.integer(40), forKey: "k0")  // already in the table: changed in place
    #expect(values.sealed.isEmpty && values.changes.count == 4)
    values.set(.integer(5), forKey: "k5")
    #expect(values.sealed.count == 1 && values.changes.count == 1)
    #expect(values.sealed[0].table.count == 4 && values.changeCount == 5)
    #expect(values["k0"] == .integer(40) && values["k5"] == .integer(5))
  }

  @Test func theNewestTierWins() throws {
    var values = SuiteValues(image: nil, capacity: 2)
    // Tiers: {a:1, b:1}, {a:2, c:2}, {a:3, d:3}; changes {e:4}.
    for (round, keys) in [["a", "b"], ["a", "c"], ["a", "d"], ["e"]].enumerated() {
      for key in keys { values.set(.integer(PropertyListInteger(round + 1)), forKey: key) }
      if round < 3 { values.seal() }
    }
    #expect(values.sealed.count == 3)
    #expect(values["a"] == .integer(3) && values["b"] == .integer(1) && values["c"] == .integer(2))
    #expect(values.change(forKey: "a") == .some(.integer(3)))
    #expect(
      try values.dictionary() == [
        "a": .integer(3), "b": .integer(1), "c": .integer(2), "d": .integer(3),
        "e": .integer(4),
      ])
    #expect(values.imageParts.changes["a"] == .some(.integer(3)))
  }

  @Test func aRemovalHidesOlderTiersAndTheImage() throws {
    var values = SuiteValues(image: try image(["a": .integer(0), "b": .integer(0), "kept": .integer(0)]), capacity: 2)
    values.set(.integer(1), forKey: "a")
    values.seal()
    values.set(nil, forKey: "a")  // hides the older tier's 1 and the image's 0
    values.set(nil, forKey: "b")  // hides the image's 0
    values.seal()
    values.set(.integer(2), forKey: "c")
    #expect(values["a"] == nil && values["b"] == nil && values["kept"] == .integer(0))
    #expect(values.change(forKey: "a") == .some(nil))
    #expect(try values.dictionary() == ["kept": .integer(0), "c": .integer(2)])
    // Merged, the removal stays (it still hides the image's value).
    let merged = SuiteValues.Tier(SuiteValues.mergedTable(values.sealed))
    let installed = values.installMerged(merged, replacing: values.sealed)
    #expect(installed)
    #expect(values.sealed.count == 1 && values["a"] == nil && values["b"] == nil)
    #expect(try values.dictionary() == ["kept": .integer(0), "c": .integer(2)])
  }

  @Test func aMergeIsInstalledOnlyOverTheTiersItWasBuiltFrom() throws {
    var values = SuiteValues(image: nil, capacity: 1)
    for i in 0..<12 { values.set(.integer(PropertyListInteger(i)), forKey: "k\(i % 3)") }
    #expect(values.tiersToMerge?.count == 11)
    let tiers = try #require(values.tiersToMerge)
    let merged = SuiteValues.Tier(SuiteValues.mergedTable(tiers))
    #expect(merged.table == ["k0": .some(.integer(9)), "k1": .some(.integer(10)), "k2": .some(.integer(8))])
    // Sealed meanwhile: stays after the merged tier, newer.
    values.set(.integer(100), forKey: "k1")
    let installed = values.installMerged(merged, replacing: tiers)
    #expect(installed)
    #expect(values.sealed.count == 2 && values.sealed[0] === merged)
    #expect(values["k0"] == .integer(9) && values["k1"] == .integer(100) && values["k2"] == .integer(11))

    // A merge built before a freeze moved its tiers, and newer tiers sealed since: dropped.
    var other = SuiteValues(image: nil, capacity: 1)
    for i in 0..<10 { other.set(.integer(PropertyListInteger(i)), forKey: "k\(i % 2)") }
    let stale = try #require(other.tiersToMerge)
    let staleMerged = SuiteValues.Tier(SuiteValues.mergedTable(stale))
    let frozenToken = other.freeze()
    #expect(frozenToken != nil)
    for i in 0..<10 { other.set(.integer(PropertyListInteger(100 + i)), forKey: "k\(i % 2)") }
    let before = other.sealed
    let staleInstalled = other.installMerged(staleMerged, replacing: stale)
    #expect(!staleInstalled)
    #expect(other.sealed.count == before.count && zip(other.sealed, before).allSatisfy { $0 === $1 })
    #expect(other["k0"] == .integer(108) && other["k1"] == .integer(109))
  }

  @Test func freezeTakesTheSealedTiersAndInstallKeepsNewer() throws {
    var values = SuiteValues(image: try image(["old": .integer(0), "gone": .integer(0)]), capacity: 2)
    values.set(.integer(1), forKey: "a")
    values.set(nil, forKey: "gone")
    values.set(.integer(1), forKey: "b")  // seals {a, gone}
    values.set(.integer(2), forKey: "a")
    #expect(values.sealed.count == 1)
    let frozenToken = values.freeze()
    let token = try #require(frozenToken)
    let again = values.freeze()
    #expect(again == nil)  // one compaction at a time
    #expect(values.sealed.isEmpty && values.changes.isEmpty && values.frozen.count == 2)
    // What the compaction folds holds every change made before the freeze.
    let replacement = try compacted(values)
    #expect(
      try SuiteValues(image: replacement).dictionary() == ["old": .integer(0), "a": .integer(2), "b": .integer(1)])
    // Changes after the freeze, sealed and not: newer than the frozen tiers.
    values.set(.integer(3), forKey: "a")
    values.set(.integer(3), forKey: "c")
    values.set(nil, forKey: "b")  // seals {a: 3, c: 3}
    #expect(values["a"] == .integer(3) && values["b"] == nil && values["gone"] == nil)
    let expected: [String: PropertyListValue] = ["old": .integer(0), "a": .integer(3), "c": .integer(3)]
    #expect(try values.dictionary() == expected)
    #expect(values.changeCount == 4 + 2 + 1)  // per tier: a key changed in two counts twice

    // Thawed (the compaction did not install): the frozen tiers go back under the newer ones.
    var thawed = values
    thawed.thaw(token: token)
    #expect(thawed.frozen.isEmpty && thawed.sealed.count == 3 && thawed.frozenToken == 0)
    #expect(try thawed.dictionary() == expected)

    // Installed: the image holds the frozen tiers; the newer changes stay over it.
    let wrong = values.install(replacement, token: token &+ 1)
    #expect(wrong == nil)
    let installedTiers = values.install(replacement, token: token)
    let dropped = try #require(installedTiers)
    #expect(dropped.frozen.count == 2 && values.frozen.isEmpty && values.sealed.count == 1)
    #expect(try values.dictionary() == expected)
    #expect(values["a"] == .integer(3) && values["b"] == nil && values["gone"] == nil)
    let (base, changes) = values.imageParts
    #expect(base === replacement && changes.count == 3)
  }

  /// Random sets, removals, seals, merges (built at one step, installed at a later one, perhaps over a freeze or
  /// a thaw), freezes, installs and thaws, from a fixed seed, against a plain dictionary.
  @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
  func randomSequencesMatchAPlainDictionary(seed: UInt64) throws {
    var random = SplitMix64(seed: seed)
    let keys = (0..<12).map { "k\($0)" }
    var reference: [String: PropertyListValue] = [:]
    for key in keys.prefix(6) where random.next() % 2 == 0 { reference[key] = .integer(-1) }
    var values = SuiteValues(image: try image(reference), capacity: 1 + Int(random.next() % 4))
    var pendingMerge: (tiers: [SuiteValues.Tier], merged: SuiteValues.Tier)?
    var frozen: (token: UInt64, image: SuiteImage)?
    for step in 0..<600 {
      let roll = random.next() % 100
      let key = keys[Int(random.next() % UInt64(keys.count))]
      switch roll {
      case 0..<45:
        let value = PropertyListValue.integer(PropertyListInteger(step))
        values.set(value, forKey: key)
        reference[key] = value
      case 45..<65:
        values.set(nil, forKey: key)
        reference[key] = nil
      case 65..<72:
        values.seal()
      case 72..<80:
        if let tiers = values.sealed.count > 1 ? values.sealed : nil, pendingMerge == nil {
          pendingMerge = (tiers, SuiteValues.Tier(SuiteValues.mergedTable(tiers)))
        }
      case 80..<88:
        if let (tiers, merged) = pendingMerge {
          let there = tiers.allSatisfy { tier in values.sealed.contains { $0 === tier } }
          let installed = values.installMerged(merged, replacing: tiers)
          #expect(!installed || there, "step \(step): installed over tiers that were gone")
          pendingMerge = nil
        }
      case 88..<93:
        if frozen == nil, let token = values.freeze() {
          #expect(values.sealed.isEmpty && values.changes.isEmpty, "step \(step)")
          frozen = (token, try compacted(values))
        }
      case 93..<97:
        if let (token, image) = frozen {
          let dropped = values.install(image, token: token)
          #expect(dropped != nil, "step \(step)")
          frozen = nil
        }
      default:
        if let (token, _) = frozen {
          values.thaw(token: token)
          frozen = nil
        }
      }
      #expect(try values.dictionary() == reference, "step \(step) (roll \(roll))")
      for key in keys where values[key] != reference[key] {
        Issue.record(
          "step \(step) (roll \(roll)): \(key) reads \(String(describing: values[key])), not \(String(describing: reference[key]))"
        )
      }
      if let (token, image) = frozen {
        // A compaction's image holds the frozen tiers over the image; the newer tiers over it give the state.
        var after = values
        _ = after.install(image, token: token)
        #expect(try after.dictionary() == reference, "step \(step): the compaction's image")
      }
    }
  }
}
