import FileCoordination
import Foundation
import GroupContainerCore

/// One download, as any process of the group sees it: a snapshot of its persisted state, and the requests a
/// process can make of it (`cancel`, `suspend`, `resume`, `priority`), which the agent applies.
///
/// Apple's `URLSessionDownloadTask`, with two differences that come from living in a shared container: a snapshot
/// does not change under you (call ``refreshed()``, or follow ``DownloadSession/observe(container:session:)``), and
/// any process of the group may read or steer any task.
public struct DownloadTask: Sendable, Identifiable, CustomStringConvertible {
  /// Apple's `URLSessionTask.State`, plus `waiting` (queued: before its first byte, between retries, or behind the
  /// per-host connection limit).
  public enum State: String, Sendable, CaseIterable {
    /// Queued (before the first byte, between retries, behind the connection limit), transferring, suspended, being
    /// cancelled, or finished (then see DownloadTask/error).
    case waiting, running, suspended, canceling, completed
  }

  /// Unique in the container: 32 hex digits. Stable across processes and restarts.
  public let id: String
  /// Apple's `taskIdentifier`: unique within the session.
  public let taskIdentifier: Int
  /// The identifier of the session that created the task.
  public let sessionIdentifier: String
  /// Apple's `originalRequest.url`.
  public let originalURL: URL
  /// The destination, relative to the container (e.g. `Downloads/report.pdf`).
  public let destination: String
  /// Where the task is: queued, running, suspended or completed (then see `error`).
  public let state: State
  /// Set when `state` is `.completed` and the task did not succeed (Apple: `error`).
  public let error: DownloadError?
  /// The last HTTP status the server answered (Apple: `(response as? HTTPURLResponse)?.statusCode`).
  public let httpStatus: Int?
  /// Bytes of the body received so far (Apple's `countOfBytesReceived`).
  public let countOfBytesReceived: Int64
  /// The whole length when known, else -1 (Apple's `NSURLSessionTransferSizeUnknown`).
  public let countOfBytesExpectedToReceive: Int64
  /// 0 (lowest) to 1 (highest); Apple's `priority`, default 0.5.
  public let priority: Float
  /// Attempts so far (retries and resumptions count).
  public let attempts: Int
  /// When the task was created.
  public let creationDate: Date
  /// When it completed (successfully or not).
  public let completionDate: Date?

  let store: DownloadStore

  /// The task's destination as a file URL.
  public var destinationURL: URL { store.container.url.appending(path: destination, directoryHint: .notDirectory) }

  /// Received over expected, when the length is known.
  public var fractionCompleted: Double? {
    countOfBytesExpectedToReceive > 0 ? Double(countOfBytesReceived) / Double(countOfBytesExpectedToReceive) : nil
  }

  /// Whether the task completed without error.
  public var succeeded: Bool { state == .completed && error == nil }

  /// One line for logs and `groupctl downloads list`: id, state, bytes and destination.
  public var description: String {
    "DownloadTask(\(id.prefix(8)) #\(taskIdentifier) \(state.rawValue) \(countOfBytesReceived)/"
      + "\(countOfBytesExpectedToReceive) \(originalURL.absoluteString)\(error.map { " error: \($0)" } ?? ""))"
  }

  init(request: TaskRequest, status: TaskStatus?, control: TaskControl?, store: DownloadStore) {
    id = request.id
    taskIdentifier = request.taskIdentifier
    sessionIdentifier = request.session
    originalURL = URL(string: request.url) ?? URL(fileURLWithPath: "/")
    destination = request.destination
    self.store = store
    let phase = status?.phase ?? .waiting
    let pendingControl = control.flatMap { $0.generation > (status?.appliedControl ?? 0) ? $0 : nil }
    switch phase {
    case .completed, .failed, .cancelled: state = .completed
    case _ where pendingControl?.desired == .cancel: state = .canceling
    case .suspended: state = pendingControl?.desired == .run ? .waiting : .suspended
    case .waiting: state = pendingControl?.desired == .suspend ? .suspended : .waiting
    case .running: state = .running
    }
    error = phase == .completed ? nil : status?.error
    httpStatus = status?.httpStatus
    countOfBytesReceived = status?.resume.receivedBytes ?? 0
    countOfBytesExpectedToReceive = status?.resume.expectedBytes ?? request.expectedLength ?? -1
    priority = Float(control?.priority ?? request.priority)
    attempts = status?.attempts ?? 0
    creationDate = Date(timeIntervalSince1970: Double(request.created) / 1e9)
    completionDate = status?.finished.map { Date(timeIntervalSince1970: Double($0) / 1e9) }
  }

  /// The task as it is now.
  public func refreshed() throws(DownloadError) -> DownloadTask {
    guard let task = store.task(id) else { throw .unknownTask(id) }
    return task
  }

  /// Stops the download and discards what it received; its session receives `didCompleteWithError` with
  /// ``DownloadError/cancelled``. A completed task is left as it is.
  public func cancel() throws(DownloadError) { try request(.cancel, priority: nil) }

  /// Pauses the download, keeping what it received (a later ``resume()`` continues with a range request).
  public func suspend() throws(DownloadError) { try request(.suspend, priority: nil) }

  /// Continues a suspended download.
  public func resume() throws(DownloadError) { try request(.run, priority: nil) }

  /// Changes the task's priority (0...1): among queued tasks the agent starts the highest first.
  public func setPriority(_ priority: Float) throws(DownloadError) {
    try request(nil, priority: Double(min(max(priority, 0), 1)))
  }

  private func request(_ desired: TaskControl.Desired?, priority: Double?) throws(DownloadError) {
    try store.request(id, desired: desired, priority: priority)
  }
}

extension DownloadStore {
  /// The task `id` as it is now; nil when there is no such task (or its request is damaged).
  package func task(_ id: String) -> DownloadTask? {
    guard let request = request(id) else { return nil }
    return DownloadTask(request: request, status: status(id), control: control(id), store: self)
  }

  /// Every task in the container (of one session, or all), oldest first, but those in `excluding`.
  package func tasks(session: String? = nil, excluding: Set<String> = []) -> [DownloadTask] {
    Self.oldestFirst(
      taskIDs().compactMap { id -> DownloadTask? in
        guard !excluding.contains(id), let request = request(id), session == nil || request.session == session else {
          return nil
        }
        return DownloadTask(request: request, status: status(id), control: control(id), store: self)
      })
  }

  /// The tasks `ids` that exist, oldest first, without listing `tasks/`.
  package func tasks(_ ids: some Sequence<String>) -> [DownloadTask] {
    Self.oldestFirst(ids.compactMap { task($0) })
  }

  private static func oldestFirst(_ tasks: [DownloadTask]) -> [DownloadTask] {
    tasks.sorted { ($0.creationDate, $0.taskIdentifier) < ($1.creationDate, $1.taskIdentifier) }
  }

  /// Writes a control request: a new generation keeping what is not changed. A finished task is not changed.
  func request(_ id: String, desired: TaskControl.Desired?, priority: Double?) throws(DownloadError) {
    guard let request = request(id) else { throw .unknownTask(id) }
    if let status = status(id), status.phase.isFinal { return }
    let old = control(id)
    let control = TaskControl(
      desired: desired ?? old?.desired ?? .run, priority: priority ?? old?.priority ?? request.priority,
      generation: max(old?.generation ?? 0, status(id)?.appliedControl ?? 0) + 1)
    try write(control, for: id)
  }
}
