import FileCoordination
import GroupContainerCore
import SystemLayer

/// The words of `.coordination/downloads/signal`, the `MappedCounters` file of the downloads' two change signals
/// (created and sized by `DownloadStore`). Declared once, here; a test checks the ranges are disjoint and fit
/// (`layout`). The agent and sessions of older builds may map the same file: never move a word.
///
/// Free today: 4–510 (511 is the file's epoch, `MappedCounters`).
enum DownloadSignals {
  static let fileName = "signal"
  /// Requests (`DownloadStore.requests`): sessions post after writing a task or a control; the agent listens.
  static let requestsSequence = 0, requestsListeners = 1
  /// Updates (`DownloadStore.updates`): the agent posts after writing a status or an event; sessions and observers
  /// listen.
  static let updatesSequence = 2, updatesListeners = 3

  static let layout = MappedLayout(
    file: DownloadStore.directory + "/" + fileName,
    [
      ("requests sequence", MappedLayout.word(requestsSequence)),
      ("requests listeners", MappedLayout.word(requestsListeners)),
      ("updates sequence", MappedLayout.word(updatesSequence)),
      ("updates listeners", MappedLayout.word(updatesListeners)),
    ])
}
