import Foundation
import Synchronization

/// What a session hears about its tasks: Apple's `URLSessionDownloadDelegate` calls, as values.
///
/// `didFinishDownloadingTo` and `didCompleteWithError` are queued in the container by the agent and delivered at
/// least once: to the attached process, or to the next process that attaches with the session's identifier
/// (started for it when the session registered an app). Their ``id`` is stable across deliveries, so a handler can
/// make them idempotent. `didWriteData` is live progress, only while attached, and never queued.
public enum DownloadEvent: Sendable, CustomStringConvertible {
  /// Apple's `urlSession(_:downloadTask:didWriteData:totalBytesWritten:totalBytesExpectedToWrite:)`.
  case didWriteData(
    DownloadTask, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
  /// Apple's `urlSession(_:downloadTask:didFinishDownloadingTo:)`; the file is already at its destination in the
  /// container (no need to move it before returning, as on iOS).
  case didFinishDownloadingTo(DownloadTask, location: URL, id: String)
  /// Apple's `urlSession(_:task:didCompleteWithError:)`: nil on success.
  case didCompleteWithError(DownloadTask, error: DownloadError?, id: String)
  /// Apple's `urlSessionDidFinishEvents(forBackgroundURLSession:)`: every event queued while no process was attached
  /// has been delivered.
  case didFinishEvents

  /// The stable id of a queued event; nil for live progress and `didFinishEvents`.
  public var id: String? {
    switch self {
    case .didFinishDownloadingTo(_, _, let id), .didCompleteWithError(_, _, let id): id
    case .didWriteData, .didFinishEvents: nil
    }
  }

  /// The task the event is about.
  public var task: DownloadTask? {
    switch self {
    case .didWriteData(let t, _, _, _), .didFinishDownloadingTo(let t, _, _), .didCompleteWithError(let t, _, _): t
    case .didFinishEvents: nil
    }
  }

  /// The event in one line, for logs.
  public var description: String {
    switch self {
    case .didWriteData(let t, let n, let total, let expected):
      "didWriteData(\(t.id.prefix(8)), +\(n), \(total)/\(expected))"
    case .didFinishDownloadingTo(let t, let location, _): "didFinishDownloadingTo(\(t.id.prefix(8)), \(location.path))"
    case .didCompleteWithError(let t, let error, _):
      "didCompleteWithError(\(t.id.prefix(8)), \(error.map { "\($0)" } ?? "nil"))"
    case .didFinishEvents: "didFinishEvents"
    }
  }
}

/// Apple's `URLSessionDownloadDelegate` names, for a ``DownloadSession``. Every method has a default that does
/// nothing. Calls come one at a time, in order, on a queue of the session; a queued event counts as handled (and
/// is removed from the container) when its method returns.
public protocol DownloadSessionDelegate: AnyObject, Sendable {
  /// Progress of a running task: bytes in this write, received so far, and the whole length (-1 when unknown). Live
  /// only, never queued.
  func urlSession(
    _ session: DownloadSession, downloadTask: DownloadTask, didWriteData bytesWritten: Int64,
    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
  /// The task's file is verified and published at `location`, in the container (no need to move it).
  func urlSession(_ session: DownloadSession, downloadTask: DownloadTask, didFinishDownloadingTo location: URL)
  /// The task ended: `error` is nil on success, else why it failed (with the HTTP status when there was one).
  func urlSession(_ session: DownloadSession, task: DownloadTask, didCompleteWithError error: DownloadError?)
  /// Every event queued while no process was attached has been delivered.
  func urlSessionDidFinishEvents(forBackgroundURLSession session: DownloadSession)
}

extension DownloadSessionDelegate {
  /// Does nothing: implement it to show progress.
  public func urlSession(
    _ session: DownloadSession, downloadTask: DownloadTask, didWriteData bytesWritten: Int64,
    totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64
  ) {}
  /// Does nothing: implement it to use the file, which is already at its destination.
  public func urlSession(_ session: DownloadSession, downloadTask: DownloadTask, didFinishDownloadingTo location: URL) {
  }
  /// Does nothing: implement it to learn how a task ended.
  public func urlSession(_ session: DownloadSession, task: DownloadTask, didCompleteWithError error: DownloadError?) {}
  /// Does nothing: implement it to finish work started for the events (iOS's completion handler).
  public func urlSessionDidFinishEvents(forBackgroundURLSession session: DownloadSession) {}
}

/// The events of a session as an `AsyncSequence` (when the session has no delegate). A queued event counts as
/// handled when the loop asks for the next one, or when ``DownloadSession/acknowledge(_:)`` is called for it (before
/// leaving a loop early): a process killed while handling an event gets it again at its next attach.
public final class DownloadEvents: AsyncSequence, Sendable {
  /// Each element is one event of the session.
  public typealias Element = DownloadEvent

  struct State {
    var buffer: [DownloadEvent] = []
    var waiter: CheckedContinuation<DownloadEvent?, Never>?
    var finished = false
    /// The queued event handed out last, acknowledged when the next is asked for.
    var handedOut: DownloadEvent?
  }
  let state = Mutex(State())
  /// Removes a handled queued event from the container.
  let acknowledge: @Sendable (DownloadEvent) -> Void

  init(acknowledge: @escaping @Sendable (DownloadEvent) -> Void) { self.acknowledge = acknowledge }

  func yield(_ event: DownloadEvent) {
    let waiter = state.withLock { s -> CheckedContinuation<DownloadEvent?, Never>? in
      guard !s.finished else { return nil }
      if let w = s.waiter {
        s.waiter = nil
        if event.id != nil { s.handedOut = event }
        return w
      }
      // Progress coalesces: a slow consumer sees the latest figure, not a backlog.
      if case .didWriteData(let t, _, _, _) = event, case .didWriteData(let u, _, _, _)? = s.buffer.last, t.id == u.id {
        s.buffer[s.buffer.count - 1] = event
      } else {
        s.buffer.append(event)
      }
      return nil
    }
    waiter?.resume(returning: event)
  }

  func finish() {
    let waiter = state.withLock { s -> CheckedContinuation<DownloadEvent?, Never>? in
      s.finished = true
      defer { s.waiter = nil }
      return s.waiter
    }
    waiter?.resume(returning: nil)
  }

  func next() async -> DownloadEvent? {
    let previous = state.withLock { s -> DownloadEvent? in
      defer { s.handedOut = nil }
      return s.handedOut
    }
    if let previous { acknowledge(previous) }
    return await withTaskCancellationHandler {
      await withCheckedContinuation { (c: CheckedContinuation<DownloadEvent?, Never>) in
        let ready = state.withLock { s -> DownloadEvent?? in
          if !s.buffer.isEmpty {
            let e = s.buffer.removeFirst()
            if e.id != nil { s.handedOut = e }
            return .some(e)
          }
          if s.finished || Task.isCancelled { return .some(nil) }
          s.waiter = c
          return nil
        }
        if let ready { c.resume(returning: ready) }
      }
    } onCancel: {
      let waiter = state.withLock { s -> CheckedContinuation<DownloadEvent?, Never>? in
        defer { s.waiter = nil }
        return s.waiter
      }
      waiter?.resume(returning: nil)
    }
  }

  /// Iterates the session's events; ends when the session is invalidated or the task is cancelled.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let events: DownloadEvents
    /// The next event, waiting for it; marks the previous queued event as handled.
    public mutating func next() async -> DownloadEvent? { await events.next() }
  }

  /// An iterator over the session's events (one loop at a time per session).
  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(events: self) }
}
