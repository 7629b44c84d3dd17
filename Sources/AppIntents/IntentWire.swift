import Foundation
import GroupContainerCore

/// The intent wire format, in one place: what travels in a request (URLOpening.swift's delivery) and its reply.
///
/// A request is JSON `{"version":1,"type":"<identifier>","parameters":<base64 of the intent's JSON>}`, at most
/// ``maxBytes``; a reply is JSON `{"version":1,"status":…,"value":…,"dialog":…,"message":…}`, at most
/// ``maxBytes`` too. Both sides treat what they receive as untrusted (it came through files in the container):
/// size first, then a strict decode; anything else is refused with an error naming what was wrong, never a crash.
enum IntentWire {
  /// The largest request or reply, in bytes (an intent's parameters are small: ids, counts, names).
  static let maxBytes = 64 * 1024
  static let version = 1

  struct Request: Codable, Sendable {
    var version = IntentWire.version
    var type: String
    var parameters: Data
  }

  struct Reply: Codable, Sendable, Error {  // Error: the failure side of `decodeRequest`
    enum Status: String, Codable, Sendable { case performed, unknownType, invalidRequest, failed }
    var version = IntentWire.version
    var status: Status
    var value: Data?
    var dialog: String?
    var message: String?
  }

  /// A request's bytes, or why there are none.
  static func encode(type: String, parameters: Data) throws(IntentError) -> [UInt8] {
    let bytes: [UInt8]
    do { bytes = Array(try JSONEncoder().encode(Request(type: type, parameters: parameters))) } catch {
      throw .invalidIntent(type, reason: "it did not encode: \(error)")
    }
    guard bytes.count <= maxBytes else {
      throw .invalidIntent(type, reason: "its encoding is \(bytes.count) bytes, over the limit of \(maxBytes)")
    }
    return bytes
  }

  /// A received request, or a reply saying why it is refused.
  static func decodeRequest(_ bytes: [UInt8]) -> Result<Request, Reply> {
    guard bytes.count <= maxBytes else {
      return .failure(Reply(status: .invalidRequest, message: "the request is over \(maxBytes) bytes"))
    }
    guard let request = try? UntrustedJSON.decode(Request.self, from: bytes) else {
      return .failure(Reply(status: .invalidRequest, message: "the request is not an intent request"))
    }
    guard request.version == version, !request.type.isEmpty, request.type.utf8.count <= 256 else {
      return .failure(Reply(status: .invalidRequest, message: "unsupported request version or intent name"))
    }
    return .success(request)
  }

  /// A reply's bytes; one too large becomes a `failed` reply saying so.
  static func encode(_ reply: Reply) -> [UInt8] {
    let bytes = Array((try? JSONEncoder().encode(reply)) ?? Data())
    guard bytes.count <= maxBytes, !bytes.isEmpty else {
      return encode(Reply(status: .failed, message: "the result is over \(maxBytes) bytes encoded"))
    }
    return bytes
  }

  static func decodeReply(_ bytes: [UInt8], type: String) throws(IntentError) -> Reply {
    guard bytes.count <= maxBytes else { throw .invalidReply(type, reason: "the reply is over \(maxBytes) bytes") }
    guard let reply = try? UntrustedJSON.decode(Reply.self, from: bytes), reply.version == version else {
      throw .invalidReply(type, reason: "the reply is not an intent reply")
    }
    return reply
  }
}
