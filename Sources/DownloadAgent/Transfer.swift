// TEMPORARY (replaced by helper "transfer"'s engine at merge): enough to run the agent loop end to end.
import AsyncHTTPClient
import BackgroundDownloads
import FileCoordination
import Foundation
import Logging
import NIOCore
import SystemLayer

package struct TransferPolicy: Sendable {
  var maxAttempts = 6
  var stallTimeout: Duration = .seconds(30)
  var connectTimeout: Duration = .seconds(15)
  var checkpointBytes: Int64 = 8 << 20
  var checkpointInterval: Duration = .seconds(2)
  var progressInterval: Duration = .milliseconds(250)
  package init() {}
}

package enum TransferOutcome: Sendable, Equatable {
  case published(ResumeState, httpStatus: Int)
  case failed(DownloadError, ResumeState, httpStatus: Int?)
  case stopped(ResumeState)
}

package final class TransferEngine: Sendable {
  let container: GroupContainer
  let client: HTTPClient
  let policy: TransferPolicy
  let logger: Logger

  package init(container: GroupContainer, client: HTTPClient, policy: TransferPolicy, logger: Logger) {
    self.container = container
    self.client = client
    self.policy = policy
    self.logger = logger
  }

  package static func makeClient(maxConnectionsPerHost: Int, policy: TransferPolicy) -> HTTPClient {
    HTTPClient(eventLoopGroupProvider: .singleton)
  }

  package func run(
    _ request: TaskRequest, resume: ResumeState, partial: String,
    progress: @escaping @Sendable (_ state: ResumeState, _ attempts: Int, _ httpStatus: Int?) -> Void
  ) async -> TransferOutcome {
    var state = ResumeState()
    do {
      let response = try await client.execute(HTTPClientRequest(url: request.url), timeout: .seconds(30))
      let status = Int(response.status.code)
      guard (200..<300).contains(status) else { return .failed(.httpStatus(status), state, httpStatus: status) }
      var body: [UInt8] = []
      for try await chunk in response.body {
        body += chunk.readableBytesView
        state.receivedBytes = Int64(body.count)
        progress(state, 1, status)
      }
      state.expectedBytes = state.receivedBytes
      let root = try container.directory()
      let path = try ContainerPath(request.destination)
      var prefix = ""
      for component in path.components.dropLast() {
        prefix += (prefix.isEmpty ? "" : "/") + component
        try root.makeDirectory(prefix, mode: container.sharing.directoryMode)
      }
      try root.replaceFile(request.destination, with: body, mode: container.sharing.fileMode, durability: .powerLoss)
      return .published(state, httpStatus: status)
    } catch is CancellationError {
      return .stopped(state)
    } catch {
      if Task.isCancelled { return .stopped(state) }
      return .failed(.network("\(error)"), state, httpStatus: nil)
    }
  }
}
