import SystemLayer

/// The container's `.coordination/` directory, named in one place: every entry directly in it, and its path
/// relative to the container. Modules that keep files there (defaults excepted, which live in `Library/`) build
/// their paths from these; the entries' own layouts are their owners' (`DownloadStore`, `ActivityStore`, …).
///
/// Architecture.md draws the tree; the names are on disk and shared with processes of other builds.
package enum CoordinationPaths {
  /// The directory, relative to the container.
  package static let directory = ContainerPath.privateDirectory

  /// The names of the entries of `.coordination/`.
  package enum Name {
    /// The mapped counters (`CoordinationCounters`).
    package static let counters = "counters"
    /// Lock files, one per coordinated item and kind (LockOrder.swift).
    package static let locks = "locks"
    /// `<pid>.<start>.lock`, held `LOCK_SH` by each live process (Liveness.swift).
    package static let processes = "processes"
    /// Presenter records (PresenterRegistry.swift).
    package static let presenters = "presenters"
    /// One listing per presenter bucket, `<bucket>[.below]` (PresenterBucketIndex.swift).
    package static let presenterIndex = "presenter-index"
    /// One directory per process: its messages, `.socket` and `.acks` (MessageProtocol.swift).
    package static let inbox = "inbox"
    /// The ack boards, `<n>`, each held by one live process and linked into its inbox as `.acks` (AckBoard.swift).
    package static let acks = "acks"
    /// How to launch the app that opens a scheme (URLOpening.swift).
    package static let schemes = "schemes"
    /// Processes that handle a scheme now (URLOpening.swift).
    package static let handlers = "handlers"
    /// Intent deliveries (DeliveryLedger.swift).
    package static let deliveries = "deliveries"
    /// Temp files of atomic replaces (AtomicReplace.swift).
    package static let staging = "staging"
    /// The image caches' shard counters (ImageCache, `CacheCounters`).
    package static let caches = "caches"
    /// Background downloads (BackgroundDownloads, `DownloadStore`).
    package static let downloads = "downloads"
    /// Live Activities (LiveActivities, `ActivityStore`).
    package static let activities = "activities"
    /// A memory warning sent to the group (MemoryWarnings).
    package static let memoryPressure = "memory-pressure"
  }

  package static let counters = directory + "/" + Name.counters
  package static let locks = directory + "/" + Name.locks
  package static let processes = directory + "/" + Name.processes
  package static let presenters = directory + "/" + Name.presenters
  package static let presenterIndex = directory + "/" + Name.presenterIndex
  package static let inbox = directory + "/" + Name.inbox
  package static let acks = directory + "/" + Name.acks
  package static let schemes = directory + "/" + Name.schemes
  package static let handlers = directory + "/" + Name.handlers
  package static let deliveries = directory + "/" + Name.deliveries
  package static let staging = directory + "/" + Name.staging
  package static let caches = directory + "/" + Name.caches
  package static let downloads = directory + "/" + Name.downloads
  package static let activities = directory + "/" + Name.activities
  package static let memoryPressure = directory + "/" + Name.memoryPressure

  /// The inbox of `process` (`<pid>.<start>`).
  package static func inbox(of process: some CustomStringConvertible) -> String { inbox + "/\(process)" }

  /// The directories every coordination space makes when it opens (and again after the container was removed).
  package static let spaceDirectories = [directory, locks, processes, presenters, inbox, acks]
  /// … and once it is started.
  package static let startedDirectories = [schemes, handlers]
}
