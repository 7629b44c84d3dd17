// One connection: answers each request (one at a time: HTTPServerPipelineHandler holds pipelined ones back) and
// streams its body a chunk at a time, writing the next chunk only while the channel is writable.
import NIOCore
import NIOHTTP1

final class FileServerHandler: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPServerRequestPart
  typealias OutboundOut = HTTPServerResponsePart

  /// The most one write carries (drop/stall/rate cut chunks to land on their byte). 256 KiB: writes of a debug
  /// build cost enough that fewer, larger ones double loopback throughput.
  static let chunkSize = 256 * 1024

  private let state: ServerState
  private var request: HTTPRequestHead?
  private var stream: BodyStream?

  init(state: ServerState) { self.state = state }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    switch unwrapInboundIn(data) {
    case .head(let head): request = head
    case .body: break  // request bodies are ignored
    case .end:
      if let head = request {
        request = nil
        respond(context: context, to: head)
      }
    }
  }

  func channelWritabilityChanged(context: ChannelHandlerContext) {
    if context.channel.isWritable { pump(context: context) }
    context.fireChannelWritabilityChanged()
  }

  func channelInactive(context: ChannelHandlerContext) {
    if let stream {
      self.stream = nil
      log(stream, outcome: stream.stalled ? "stalled, closed by the client" : "connection closed mid-body")
    }
    context.fireChannelInactive()
  }

  func errorCaught(context: ChannelHandlerContext, error: any Error) {
    context.close(promise: nil)
  }

  // MARK: - Answering

  private func respond(context: ChannelHandlerContext, to head: HTTPRequestHead) {
    let uri = head.uri
    let target = Target(uri)
    // An HTTP/2 stream carries one request and ends with it; the connection is not this handler's to close.
    let keepAlive = head.version.major >= 2 || head.isKeepAlive

    // The control resources are not counted (they would count themselves).
    if target.path == "/stats" || target.path == "/stats/reset" {
      if target.path == "/stats/reset" { state.reset() }
      let text = target.path == "/stats" ? state.json() + "\n" : "reset\n"
      var plan = textPlan(status: .ok, text: text, contentType: "application/json", head: head)
      plan.counted = false
      start(context: context, plan: plan, keepAlive: keepAlive)
      return
    }

    let number = state.begin(uri, range: head.headers.first(name: "range"), version: "\(head.version)")
    let plan: ResponsePlan
    do {
      plan = try resourcePlan(context: context, head: head, target: target, number: number)
    } catch {
      plan = textPlan(status: .badRequest, text: "400 Bad Request: \(error.message)\n", head: head)
    }
    if let delay = plan.faults.delayMilliseconds, delay > 0 {
      context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(delay)) {
        self.start(context: context, plan: plan, keepAlive: keepAlive)
      }
    } else {
      start(context: context, plan: plan, keepAlive: keepAlive)
    }
  }

  private func resourcePlan(context: ChannelHandlerContext, head: HTTPRequestHead, target: Target, number: Int)
    throws(BadRequest) -> ResponsePlan
  {
    var faults = try Faults(target)
    if let limit = faults.limit, number > limit { faults = faults.pastLimit }

    guard head.method == .GET || head.method == .HEAD else {
      var plan = textPlan(
        status: .methodNotAllowed, text: "405 Method Not Allowed: only GET and HEAD are served\n", head: head)
      plan.headers.add(name: "Allow", value: "GET, HEAD")
      return plan
    }
    if let code = faults.status {
      let status = HTTPResponseStatus(statusCode: code)
      var plan = textPlan(status: status, text: "\(code) \(status.reasonPhrase)\n", head: head)
      plan.faults = faults
      return plan
    }

    let path = target.path
    if path.hasPrefix("/redirect/") {
      var plan = try redirectPlan(head: head, target: target)
      plan.faults = faults
      return plan
    }
    var entity: Entity
    if path.hasPrefix("/gen/") {
      entity = try generatedEntity(
        sizeText: path.dropFirst("/gen/".count), seedText: target.value("seed"), rotation: faults.rotate ? number : nil)
    } else if path.hasPrefix("/files/") {
      guard let root = state.root else {
        return textPlan(
          status: .notFound, text: "404 Not Found: \(path): the server was started without --root\n", head: head)
      }
      guard let found = fileEntity(root: root, encodedName: path.dropFirst("/files/".count)) else {
        return textPlan(
          status: .notFound,
          text:
            "404 Not Found: \(path): not a regular file directly in \(root) (links, directories and .. are refused)\n",
          head: head)
      }
      entity = found
    } else {
      return textPlan(
        status: .notFound,
        text:
          "404 Not Found: \(path): this server serves /gen/<size>?seed=S, /files/<name>, /redirect/<n>?to=URL, "
          + "/redirect/loop, /stats and /stats/reset\n",
        head: head)
    }
    if faults.noETag { entity.etag = nil }
    if faults.weak, let tag = entity.etag { entity.etag = "W/" + tag }
    if faults.noLastModified { entity.lastModified = nil }

    // RFC 9110: an origin server with a clock sends Date (§6.6.1), and a Last-Modified later than it is sent as
    // it (§8.8.2.1) — so a file modified this second has a Last-Modified that is no strong validator.
    let now = currentSeconds()
    let lastModified = entity.lastModified.map { httpDate(min($0, now)) }
    var headers = HTTPHeaders()
    headers.add(name: "Content-Type", value: "application/octet-stream")
    headers.add(name: "Accept-Ranges", value: "bytes")
    headers.add(name: "Date", value: httpDate(now))
    if let tag = entity.etag { headers.add(name: "ETag", value: tag) }
    if let lastModified { headers.add(name: "Last-Modified", value: lastModified) }

    var range = RangeRequest.whole
    if !faults.noRange {
      range = RangeRequest(header: head.headers.first(name: "range"), size: entity.size)
      if range != .whole, !faults.ignoreIfRange, let validator = head.headers.first(name: "if-range"),
        !ifRangeMatches(validator, etag: entity.etag, lastModified: lastModified)
      {
        range = .whole
      }
    }
    var plan: ResponsePlan
    switch range {
    case .whole:
      plan = ResponsePlan(status: .ok, headers: headers, body: entity.body, offset: 0, length: entity.size)
    case .partial(let lower, let upper):
      if faults.bare206 {
        headers.remove(name: "ETag")
        headers.remove(name: "Last-Modified")
      }
      headers.add(name: "Content-Range", value: "bytes \(lower)-\(upper)/\(entity.size)")
      plan = ResponsePlan(
        status: .partialContent, headers: headers, body: entity.body, offset: lower, length: upper - lower + 1)
    case .unsatisfiable:
      headers.add(name: "Content-Range", value: "bytes */\(entity.size)")
      let text = "416 Range Not Satisfiable: \(head.headers.first(name: "range") ?? "") of \(entity.size) bytes\n"
      let buffer = context.channel.allocator.buffer(string: text)
      headers.replaceOrAdd(name: "Content-Type", value: "text/plain; charset=utf-8")
      plan = ResponsePlan(
        status: .rangeNotSatisfiable, headers: headers, body: .text(buffer), offset: 0,
        length: Int64(buffer.readableBytes))
    }
    plan.faults = faults
    plan.method = head.method
    plan.target = head.uri
    plan.rangeHeader = head.headers.first(name: "range")
    return plan
  }

  /// `/redirect/<n>?to=L`: a redirect to `/redirect/<n-1>` (the same query) while n > 1, to L when n is 1;
  /// `/redirect/loop`: a redirect to itself. `code=C` picks the status (301, 302, 303, 307, 308; 302 by default).
  private func redirectPlan(head: HTTPRequestHead, target: Target) throws(BadRequest) -> ResponsePlan {
    var code = 302
    if let text = target.value("code") {
      guard let value = Int(text), [301, 302, 303, 307, 308].contains(value) else {
        throw BadRequest(message: "bad query parameter code=\(text): a redirect is 301, 302, 303, 307 or 308")
      }
      code = value
    }
    let step = target.path.dropFirst("/redirect/".count)
    let location: String
    if step == "loop" {
      location = head.uri
    } else {
      guard let n = Int(step), n >= 1 else {
        throw BadRequest(
          message: "bad redirect count in \(target.path): expected /redirect/<n> with n ≥ 1, or /redirect/loop")
      }
      guard let to = target.value("to"), !to.isEmpty else {
        throw BadRequest(message: "/redirect/\(n) needs ?to=<URL> (percent-encoded): where the last redirect points")
      }
      location = n == 1 ? to : "/redirect/\(n - 1)" + (target.rawQuery.map { "?" + $0 } ?? "")
    }
    let status = HTTPResponseStatus(statusCode: code)
    var plan = textPlan(status: status, text: "\(code) \(status.reasonPhrase): see \(location)\n", head: head)
    plan.headers.add(name: "Location", value: location)
    return plan
  }

  /// If-Range (RFC 9110 13.1.5): an entity tag matches by strong comparison only, a date only when it is exactly
  /// the Last-Modified sent.
  private func ifRangeMatches(_ validator: String, etag: String?, lastModified: String?) -> Bool {
    let value = validator.trimmingSpaces
    if value.hasPrefix("\"") || value.hasPrefix("W/") {
      guard let tag = etag, !tag.hasPrefix("W/"), !value.hasPrefix("W/") else { return false }
      return value == tag
    }
    return lastModified == value
  }

  private func textPlan(
    status: HTTPResponseStatus, text: String, contentType: String = "text/plain; charset=utf-8", head: HTTPRequestHead
  ) -> ResponsePlan {
    let buffer = ByteBuffer(string: text)
    var headers = HTTPHeaders()
    headers.add(name: "Content-Type", value: contentType)
    var plan = ResponsePlan(
      status: status, headers: headers, body: .text(buffer), offset: 0, length: Int64(buffer.readableBytes))
    plan.method = head.method
    plan.target = head.uri
    plan.rangeHeader = head.headers.first(name: "range")
    return plan
  }

  // MARK: - Streaming

  private func start(context: ChannelHandlerContext, plan: ResponsePlan, keepAlive: Bool) {
    guard context.channel.isActive else { return }
    var headers = plan.headers
    if !plan.faults.chunked {
      headers.replaceOrAdd(name: "Content-Length", value: String(plan.faults.claimedLength ?? plan.length))
    }
    let lies = plan.faults.claimedLength.map { $0 != plan.length } ?? false
    if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
    let bodyLength = plan.method == .HEAD ? 0 : plan.length
    var stopAt = bodyLength
    var ending = BodyStream.Ending.complete(closeAfter: !keepAlive || lies)
    // drop/stall take effect only inside the body; at or past its end the response completes.
    if let n = plan.faults.drop, n < stopAt {
      stopAt = n
      ending = .drop
    }
    if let n = plan.faults.stall, n < stopAt {
      stopAt = n
      ending = .stall
    }
    let headWritten = context.write(
      wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: plan.status, headers: headers))))
    let stream = BodyStream(plan: plan, stopAt: stopAt, ending: ending, started: .now(), headWritten: headWritten)
    self.stream = stream
    pump(context: context)
  }

  /// Writes chunks while the channel is writable and the throttle allows; ends the response when every byte it
  /// is to send has been written to the socket.
  private func pump(context: ChannelHandlerContext) {
    guard let stream, !stream.stalled, !stream.ended else { return }
    if stream.queued == stream.stopAt {
      if stream.inFlight == 0 { finish(context: context, stream: stream) }
      context.flush()
      return
    }
    while stream.queued < stream.stopAt && context.channel.isWritable {
      var count = Int(min(Int64(Self.chunkSize), stream.stopAt - stream.queued))
      if let rate = stream.plan.faults.rate {
        // Coarse throttle: what the rate allows since the body began, refilled every 10 ms.
        let elapsed = Double((NIODeadline.now() - stream.started).nanoseconds) / 1e9
        let allowed = Int64(min(Double(Int64.max / 2), Double(rate) * elapsed)) - stream.queued
        if allowed <= 0 {
          if !stream.timerArmed {
            stream.timerArmed = true
            context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(10)) {
              stream.timerArmed = false
              self.pump(context: context)
            }
          }
          break
        }
        count = Int(min(Int64(count), allowed))
      }
      let chunk: ByteBuffer
      do {
        chunk = try stream.plan.body.read(
          offset: stream.plan.offset + stream.queued, count: count, allocator: context.channel.allocator)
      } catch {
        standardError("gc-file-server: \(error.message); closing the connection")
        stream.ended = true
        self.stream = nil
        context.close(promise: nil)
        return
      }
      stream.queued += Int64(count)
      stream.inFlight += 1
      context.write(wrapOutboundOut(.body(.byteBuffer(chunk)))).assumeIsolated().whenComplete { result in
        stream.inFlight -= 1
        if case .success = result {
          stream.written += Int64(count)
          if stream.plan.counted { self.state.addBodyBytes(Int64(count), to: stream.plan.target) }
        }
        if stream.written == stream.stopAt && stream.inFlight == 0 && self.stream === stream {
          self.finish(context: context, stream: stream)
        }
      }
    }
    context.flush()
  }

  private func finish(context: ChannelHandlerContext, stream: BodyStream) {
    guard !stream.ended else { return }
    switch stream.ending {
    case .complete(let closeAfter):
      stream.ended = true
      // Cleared before the end is written: HTTPServerPipelineHandler may hand over the next request at once.
      self.stream = nil
      context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
        self.log(stream, outcome: closeAfter ? "closed" : "done")
        if closeAfter { context.close(promise: nil) }
      }
    case .drop:
      stream.ended = true
      self.stream = nil
      log(stream, outcome: "dropped")
      // A close fails the writes still queued (a client slow to read under load got 128 of 300 kB): close once an
      // empty write queued after all of them has completed, as writes complete in order (the head's included).
      context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer())))).assumeIsolated().whenComplete { _ in
        context.close(promise: nil)
      }
    case .stall:
      stream.stalled = true
      log(stream, outcome: "stalling")
    }
  }

  private func log(_ stream: BodyStream, outcome: String) {
    guard state.verbose else { return }
    let plan = stream.plan
    standardError(
      "\(plan.method) \(plan.target) range=\(plan.rangeHeader ?? "-") \(plan.status.code) \(stream.written) \(outcome)")
  }
}

/// A response decided: status, headers and the part of an entity to send, with the faults that apply to it.
struct ResponsePlan {
  var status: HTTPResponseStatus
  var headers: HTTPHeaders
  var body: BodySource
  var offset: Int64
  var length: Int64
  var faults = Faults()
  var method = HTTPMethod.GET
  var target = ""
  var rangeHeader: String?
  /// False for /stats and /stats/reset, which are not counted.
  var counted = true
}

/// The body of the response being sent on a connection (event-loop confined).
final class BodyStream {
  enum Ending {
    case complete(closeAfter: Bool)
    case drop
    case stall
  }

  let plan: ResponsePlan
  let stopAt: Int64
  let ending: Ending
  let started: NIODeadline
  let headWritten: EventLoopFuture<Void>
  var queued: Int64 = 0
  var written: Int64 = 0
  var inFlight = 0
  var timerArmed = false
  var stalled = false
  var ended = false

  init(plan: ResponsePlan, stopAt: Int64, ending: Ending, started: NIODeadline, headWritten: EventLoopFuture<Void>) {
    self.plan = plan
    self.headWritten = headWritten
    self.stopAt = stopAt
    self.ending = ending
    self.started = started
  }
}
