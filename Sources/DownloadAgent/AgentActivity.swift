/// Where the agent's loop stands between passes (`DownloadAgent.run`): one value, changed once per pass, that says
/// which trim is due and since when nothing has been unfinished (the idle exit counts from then).
///
/// Rule: memory a burst freed goes back to the kernel when it ends, once more `lateTrimDelay` later with a listing,
/// and after every listing while idle; the idle time restarts with any unfinished task.
/// *Why*: a burst of 10,000 tasks leaves their freed blocks strewn over the heap's pages, and the threads it started
/// end about 5 s later (Dispatch), freeing more; an idle agent still lists `tasks/` now and then, 20,000 names made and
/// freed at 10,000 finished tasks. *What if you don't*: a settled agent stays MBs higher (DownloadBenchmarks'
/// `Scale: 10,000 tasks of 4 kB`), or exits idle while a task waits.
struct AgentActivity: Equatable {
  enum Phase: Equatable {
    /// Tasks are unfinished (running, waiting, suspended, events to queue, a relaunch to retry).
    case busy
    /// A burst ended at `since`; at `lateTrimAt` its freed memory is given back once more.
    case settling(since: UInt64, lateTrimAt: UInt64)
    /// Nothing unfinished since `since`; nil: no pass yet since the loop started.
    case idle(since: UInt64?)
  }

  /// What the loop gives back after a pass.
  enum Trim: Equatable {
    /// The burst just ended: the tables it filled shrink, and what it freed goes back.
    case endOfBurst
    /// `lateTrimDelay` after the burst, its threads ended: a listing (which forgets what the store and the tables
    /// keep of tasks gone), then the trim after it (`afterListing`).
    case late
    /// A pass with nothing unfinished listed `tasks/`: the names it made and freed go back.
    case afterListing
  }

  private(set) var phase = Phase.idle(since: nil)
  /// How long after the end of a burst its freed memory is given back once more (ns).
  let lateTrimDelay: UInt64

  init(lateTrimDelay: UInt64) { self.lateTrimDelay = lateTrimDelay }

  /// The transition after a pass at `now` that found tasks unfinished (`busy`) or not, and listed `tasks/` or not.
  mutating func passed(busy: Bool, listed: Bool, now: UInt64) -> Trim? {
    if busy {
      phase = .busy
      return nil
    }
    switch phase {
    case .busy:
      phase = .settling(since: now, lateTrimAt: now &+ lateTrimDelay)
      return .endOfBurst
    case .settling(let since, let due) where now >= due:
      phase = .idle(since: since)
      return .late
    case .settling:
      return listed ? .afterListing : nil
    case .idle(let since):
      if since == nil { phase = .idle(since: now) }
      return listed ? .afterListing : nil
    }
  }

  /// How long nothing has been unfinished at `now`; nil while busy or before the first pass.
  func idleFor(now: UInt64) -> UInt64? {
    switch phase {
    case .busy, .idle(since: nil): nil
    case .settling(let since, _), .idle(.some(let since)): now &- since
    }
  }

  /// The agent took its lock again after its last look before an idle exit: the idle time starts over at `now` (a
  /// late trim still due stays due).
  mutating func restartIdleTime(now: UInt64) {
    switch phase {
    case .busy, .idle: phase = .idle(since: now)
    case .settling(_, let due): phase = .settling(since: now, lateTrimAt: due)
    }
  }
}
