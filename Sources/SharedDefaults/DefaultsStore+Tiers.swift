import Synchronization

/// Merging sealed tiers of changes (SuiteValues.swift) in the background: a reader that follows a growing suite
/// seals a table every `SuiteValues.tierCapacity` changes, and each lookup asks every tier; past
/// `SuiteValues.mergeAbove` they are merged into one, off the readers' threads.
extension DefaultsStore {
  /// With `state` held: when `s` holds more sealed tiers than `SuiteValues.mergeAbove`, merges them on the
  /// background queue, without `state` (reads and writes go on, sealing newer tiers), and installs the merged
  /// tier if the tiers it was built from are still there, in a row (`installMerged`; else drops it: a freeze or a
  /// rebase moved them). The replaced tables are freed after `state` is unlocked (freeing one takes milliseconds).
  /// `waitForBackgroundWork` waits for it.
  func mergeTiersIfNeeded(_ s: State) {
    guard let tiers = s.values.tiersToMerge, !mergePending.exchange(true, ordering: .acquiringAndReleasing) else {
      return
    }
    compactions.enter()
    background.async { [weak self, compactions] in
      defer { compactions.leave() }
      guard let self else { return }
      let merged = SuiteValues.Tier(SuiteValues.mergedTable(tiers))
      state.withLock { s in
        mergePending.store(false, ordering: .releasing)
        if s.values.installMerged(merged, replacing: tiers) { Self.tiersMerged.add() }
        mergeTiersIfNeeded(s)  // sealed meanwhile, or the merge was dropped
      }
      // `tiers` (and `merged` when it was dropped) are freed here, when this closure ends: outside `state`.
    }
  }
}
