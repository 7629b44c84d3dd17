import AsyncHTTPClient
import BackgroundDownloads
import Crypto
import Dispatch
import NIOCore
import NIOHTTP1
import Synchronization
import SystemLayer

/// One HTTP attempt of a download: decides what the head means (`ResumePolicy`) and streams the body into the
/// partial file at exact offsets.
///
/// AsyncHTTPClient's `FileDownloadDelegate` is unusable here (TRAPS.md): it writes whatever the status, to the
/// final path, without truncating and without ranges. This one writes each body part synchronously before its
/// future completes, so AsyncHTTPClient reads no more from the socket while the disk is behind (backpressure:
/// memory never grows with the file), and the byte count in `state` is always exactly what the file holds.
///
/// Durability never stalls the socket: every `writebackBytes` the kernel is asked to start writing (a hint that
/// returns at once), and checkpoints (`fdatasync`) run on a queue of their own, one at a time; a checkpoint makes
/// durable what was written before it started. `finish()` waits for the one in flight, so the engine never
/// truncates, closes or renames the file under it.
final class TransferDelegate: HTTPClientResponseDelegate {
  typealias Response = Void

  /// Why the delegate stopped the response itself (the decision or the failed write says more).
  struct Stop: Error {}

  /// Everything the attempt learnt; guarded by `state`'s lock, read by the engine once the attempt is over.
  struct State: Sendable {
    var resume: ResumeState
    var decision: ResumePolicy.Decision?
    var httpStatus: Int?
    /// SHA-256 of bytes 0..<hashedUpTo of the partial, while the file has been written from 0 in this run.
    var hasher: StreamHash?
    var hashedUpTo: Int64
    var writeError: FileSystemError?
    /// Set by `finish()`: later body parts (a race with cancellation) are not written.
    var closed = false
    /// When the last checkpoint started, and whether one runs now.
    var lastSync: UInt64
    var syncing = false
    /// Writeback was asked for the bytes before this offset.
    var writebackFrom: Int64
    var lastProgress: UInt64
    /// The byte count of the last report: bytes after it are reported by `flushProgress` once arrivals stop.
    var reportedBytes: Int64 = -1
    /// The last report was the head's, with no byte: `flushProgress` repeats it once (the agent may have left a
    /// report of no byte unwritten, waiting for the next).
    var repeatHead = false
  }

  private let file: SystemFD
  private let requestedFrom: Int64
  private let wantsHash: Bool
  private let policy: TransferPolicy
  private let attempts: Int
  private let progress: @Sendable (ResumeState, Int, Int?) -> Void
  private let state: Mutex<State>
  /// When the last byte (or the attempt's start) was seen, in NIO uptime nanoseconds: the stall watchdog reads it.
  let lastActivity: Atomic<UInt64>
  /// The checkpoint in flight, if any: `finish()` waits on it.
  private let checkpoints = DispatchGroup()
  private static let checkpointQueue = DispatchQueue(
    label: "GroupContainer.DownloadAgent.checkpoints", attributes: .concurrent)

  init(
    file: borrowing SystemFD, requestedFrom: Int64, resume: ResumeState, hasher: StreamHash?, hashedUpTo: Int64,
    wantsHash: Bool,
    policy: TransferPolicy, attempts: Int, progress: @escaping @Sendable (ResumeState, Int, Int?) -> Void
  ) {
    self.file = file.borrowedView  // a view: the transfer owns the partial and keeps it open past the request
    self.requestedFrom = requestedFrom
    self.wantsHash = wantsHash
    self.policy = policy
    self.attempts = attempts
    self.progress = progress
    let now = Self.now()
    state = Mutex(
      State(
        resume: resume, hasher: hasher, hashedUpTo: hashedUpTo, lastSync: now, writebackFrom: resume.receivedBytes,
        lastProgress: now))
    lastActivity = Atomic(now)
  }

  static func now() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

  func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
    lastActivity.store(Self.now(), ordering: .relaxed)
    let fields = ResumePolicy.Head(
      status: Int(head.status.code), contentRange: head.headers.first(name: "content-range"),
      contentLength: head.headers.first(name: "content-length"), etag: head.headers.first(name: "etag"),
      lastModified: head.headers.first(name: "last-modified"), date: head.headers.first(name: "date"))
    let report: (ResumeState, Int?)? = state.withLock { s in
      s.httpStatus = fields.status
      let decision = ResumePolicy.decide(fields, requestedFrom: requestedFrom, state: s.resume)
      s.decision = decision
      do throws(FileSystemError) {
        switch decision {
        case .append(let from, let next):
          // Bytes past `from` (a kill between a write and its report) are not the entity's: drop them.
          try file.truncate(to: from)
          s.resume = next
          s.writebackFrom = from
          if s.hashedUpTo != from { s.hasher = nil }
        case .replace(let next):
          try file.truncate(to: 0)
          s.resume = next
          s.writebackFrom = 0
          s.hasher = wantsHash ? StreamHash() : nil
          s.hashedUpTo = 0
        case .complete, .restart, .httpError:
          return nil
        }
      } catch {
        s.writeError = error
        return nil
      }
      s.reportedBytes = s.resume.receivedBytes
      s.repeatHead = s.resume.receivedBytes == 0
      return (s.resume, s.httpStatus)
    }
    guard let report else { return task.eventLoop.makeFailedFuture(Stop()) }
    progress(report.0, attempts, report.1)
    return task.eventLoop.makeSucceededVoidFuture()
  }

  func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
    let now = Self.now()
    lastActivity.store(now, ordering: .relaxed)
    let outcome: (ok: Bool, report: (ResumeState, Int?)?) = state.withLock { s in
      guard !s.closed, s.writeError == nil else { return (false, nil) }
      do throws(FileSystemError) {
        let offset = s.resume.receivedBytes
        var failure: FileSystemError?
        buffer.withUnsafeReadableBytes { raw in
          do throws(FileSystemError) { try file.writeAll(raw, at: offset) } catch { failure = error }
        }
        if let failure { throw failure }
        if s.hasher != nil {
          buffer.withUnsafeReadableBytes { raw in s.hasher!.sha.update(bufferPointer: raw) }
          s.hashedUpTo += Int64(buffer.readableBytes)
        }
        s.resume.receivedBytes += Int64(buffer.readableBytes)
        if s.resume.receivedBytes - s.writebackFrom >= policy.writebackBytes {
          // Only a hint: a refusal changes nothing that the checkpoint's and the publisher's fsync do not do.
          try? file.startWriteback(offset: s.writebackFrom, length: s.resume.receivedBytes - s.writebackFrom)
          s.writebackFrom = s.resume.receivedBytes
        }
        if !s.syncing,
          s.resume.receivedBytes - s.resume.durableBytes >= policy.checkpointBytes
            || now &- s.lastSync >= policy.checkpointInterval.nanoseconds
        {
          s.syncing = true
          s.lastSync = now
          let upTo = s.resume.receivedBytes
          checkpoints.enter()
          Self.checkpointQueue.async { self.checkpoint(upTo: upTo) }
        }
        if now &- s.lastProgress >= policy.progressInterval.nanoseconds {
          s.lastProgress = now
          s.reportedBytes = s.resume.receivedBytes
          s.repeatHead = false
          return (true, (s.resume, s.httpStatus))
        }
        return (true, nil)
      } catch {
        s.writeError = error
        return (false, nil)
      }
    }
    if let report = outcome.report { progress(report.0, attempts, report.1) }
    return outcome.ok ? task.eventLoop.makeSucceededVoidFuture() : task.eventLoop.makeFailedFuture(Stop())
  }

  /// A checkpoint, off the event loop: fsyncs the partial; the `upTo` bytes written before it started survive a
  /// reboot (ResumeState.durableBytes), and a report says so. A failed fsync fails the attempt like a failed write.
  private func checkpoint(upTo: Int64) {
    defer { checkpoints.leave() }
    var failure: FileSystemError?
    do throws(FileSystemError) { try file.dataSync() } catch { failure = error }
    let report: (ResumeState, Int?)? = state.withLock { s in
      s.syncing = false
      if let failure {
        if s.writeError == nil { s.writeError = failure }
        return nil
      }
      s.resume.durableBytes = max(s.resume.durableBytes, upTo)
      guard !s.closed else { return nil }
      s.lastProgress = Self.now()
      s.reportedBytes = s.resume.receivedBytes
      s.repeatHead = false
      return (s.resume, s.httpStatus)
    }
    if let report { progress(report.0, attempts, report.1) }
  }

  /// Reports bytes that arrived after the last report once arrivals stop (a server pausing mid-body): reports come
  /// only with data, so without this an observer would show a stale count for as long as the pause lasts. Repeats
  /// a head's report of no byte once (a server pausing before the body), so "running" reaches the status file.
  func flushProgress() {
    let now = Self.now()
    let report: (ResumeState, Int?)? = state.withLock { s in
      guard !s.closed, s.writeError == nil, s.reportedBytes >= 0,
        s.resume.receivedBytes != s.reportedBytes || s.repeatHead,
        now &- s.lastProgress >= policy.progressInterval.nanoseconds
      else { return nil }
      s.lastProgress = now
      s.reportedBytes = s.resume.receivedBytes
      s.repeatHead = false
      return (s.resume, s.httpStatus)
    }
    if let report { progress(report.0, attempts, report.1) }
  }

  func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {}

  func didFinishRequest(task: HTTPClient.Task<Void>) throws {}

  /// Closes the attempt and returns what it learnt, once the checkpoint in flight (if any) is over; body parts
  /// arriving later are dropped.
  func finish() async -> State {
    state.withLock { $0.closed = true }
    // Most attempts (every small file) end with no checkpoint in flight: no hop to the checkpoint queue and back.
    if checkpoints.wait(timeout: .now()) != .success {
      await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        checkpoints.notify(queue: Self.checkpointQueue) { done.resume() }
      }
    }
    return state.withLock { $0 }
  }
}

/// SHA-256 of a download as it streams. Crypto's `SHA256` is a copy-on-write value, not marked `Sendable` on
/// Linux (it holds a BoringSSL context class): unchecked, because it is only touched under
/// `TransferDelegate.state`'s lock, or by the one task running the download between attempts.
struct StreamHash: @unchecked Sendable {
  var sha = SHA256()
}
