import Foundation

/// The time rules, in one place: what state a record is in at a given time, and when that can next change.
/// Every process derives the state from the record and its clock, so no process has to be running to end an
/// activity after 8 hours, dismiss it 4 hours after its end, or mark it stale.
package enum ActivityRules {
  /// What a reader sees of a record at a time.
  package struct Effective: Equatable, Sendable {
    /// The state a reader reports.
    package var state: ActivityState
    /// When it ended (by `end`, or 8 hours after its start), nil while it runs.
    package var endDate: Double?
    /// When it is (or was) dismissed, nil while it runs.
    package var dismissalDate: Double?
  }

  /// What `r` is at `now` (seconds since 1970): dismissed, ended (8 hours after its start at the latest), stale or active.
  package static func effective(_ r: ActivityRecord, now: Double) -> Effective {
    switch r.lifecycle {
    case .dismissed:
      return Effective(state: .dismissed, endDate: r.endDate, dismissalDate: r.dismissalDate)
    case .ended:
      let end = r.endDate ?? r.startDate
      let dismissal = r.dismissalDate ?? end + ActivityLimits.maximumDismissalDelay
      return Effective(state: now >= dismissal ? .dismissed : .ended, endDate: end, dismissalDate: dismissal)
    case .active:
      let autoEnd = r.startDate + ActivityLimits.maximumDuration
      if now >= autoEnd {
        let dismissal = autoEnd + ActivityLimits.maximumDismissalDelay
        return Effective(state: now >= dismissal ? .dismissed : .ended, endDate: autoEnd, dismissalDate: dismissal)
      }
      if let stale = r.staleDate, now >= stale { return Effective(state: .stale) }
      return Effective(state: .active)
    }
  }

  /// The next time after `now` at which `effective` may give another state; nil when it never will.
  package static func nextChange(_ r: ActivityRecord, now: Double) -> Double? {
    let current = effective(r, now: now)
    var candidates: [Double] = []
    switch current.state {
    case .dismissed: return nil
    case .ended: candidates = [current.dismissalDate].compactMap { $0 }
    case .active, .stale:
      let autoEnd = r.startDate + ActivityLimits.maximumDuration
      candidates = [autoEnd, r.staleDate].compactMap { $0 }
    }
    return candidates.filter { $0 > now }.min()
  }

  /// The record ended now (`now`) with `policy`: an end that already happened (an ended or auto-ended activity)
  /// keeps its date, and the dismissal is counted from it, capped at 4 hours after it.
  package static func end(_ r: inout ActivityRecord, policy: ActivityUIDismissalPolicy, now: Double) {
    let current = effective(r, now: now)
    let end = current.endDate ?? max(now, r.startDate)
    let latest = end + ActivityLimits.maximumDismissalDelay
    let dismissal: Double
    switch policy.kind {
    case .default: dismissal = latest
    case .immediate: dismissal = max(now, end)
    case .after(let date): dismissal = min(max(date.timeIntervalSince1970, now, end), latest)
    }
    r.endDate = end
    r.dismissalDate = dismissal
    r.lifecycle = dismissal <= now ? .dismissed : .ended
  }

  /// The record dismissed now by the user.
  package static func dismiss(_ r: inout ActivityRecord, now: Double) {
    let current = effective(r, now: now)
    let end = current.endDate ?? max(now, r.startDate)
    r.endDate = end
    r.dismissalDate = max(now, end)
    r.lifecycle = .dismissed
  }
}
