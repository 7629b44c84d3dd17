extension FileCoordinator {
  /// Closes the lock files this process keeps open, none held, for accesses to come (up to 256 per container): a
  /// process done with a burst of accesses gives back their descriptors and the memory of their entries.
  ///
  /// *Why*: the download agent publishes each download under coordination; after a burst of 10,000 its table kept
  /// 256 idle lock files, their entries, keys and paths (~1,500 small blocks) strewn over the heap pages the burst
  /// used, and those pages stayed resident while it idled (DownloadBenchmarks' `Scale: 10,000 tasks of 4 kB`). The
  /// next access opens its lock file again: one `open` more.
  package static func closeIdleLockFiles() {
    for space in CoordinationSpace.all { space.locks.closeIdleDescriptors() }
  }
}
