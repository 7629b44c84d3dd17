// HTTPS for gc-file-server (`--tls DIR`): a certificate authority and a leaf certificate for 127.0.0.1 and
// localhost, both made fresh at every start (no key is ever on disk: only the CA certificate is written, for
// clients to trust), TLS with ALPN offering h2 and http/1.1 (or http/1.1 alone), and HTTP/2 streams answered by the
// same FileServerHandler as HTTP/1.1 requests (HTTP2FramePayloadToHTTP1ServerCodec turns each stream's frames
// into HTTP/1-style request and response parts).
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOSSL
import SwiftASN1
import X509

/// The certificates of one server run.
struct ServerCertificates {
  /// The CA certificate, PEM: what `DIR/ca.pem` holds.
  let authorityPEM: String
  let leaf: NIOSSLCertificate
  let leafKey: NIOSSLPrivateKey

  /// A CA (P-256, valid from an hour ago for a week: clocks of test machines drift) and a leaf it signed, with
  /// the names and usages a verifying client checks: subjectAltName 127.0.0.1 and localhost, serverAuth.
  static func make() throws -> ServerCertificates {
    let now = Date()
    let notBefore = now.addingTimeInterval(-3600)
    let notAfter = now.addingTimeInterval(7 * 86_400)
    let authorityKey = P256.Signing.PrivateKey()
    let authorityName = try DistinguishedName {
      OrganizationName("GroupContainer tests")
      CommonName("gc-file-server test CA \(getpid())")
    }
    let authority = try Certificate(
      version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(authorityKey.publicKey),
      notValidBefore: notBefore, notValidAfter: notAfter, issuer: authorityName, subject: authorityName,
      extensions: try Certificate.Extensions {
        Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
        Critical(KeyUsage(keyCertSign: true, cRLSign: true))
      },
      issuerPrivateKey: .init(authorityKey))

    let leafKey = P256.Signing.PrivateKey()
    let leafName = try DistinguishedName { CommonName("localhost") }
    let leaf = try Certificate(
      version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(leafKey.publicKey),
      notValidBefore: notBefore, notValidAfter: notAfter, issuer: authorityName, subject: leafName,
      extensions: try Certificate.Extensions {
        Critical(BasicConstraints.notCertificateAuthority)
        Critical(KeyUsage(digitalSignature: true))
        try ExtendedKeyUsage([.serverAuth])
        SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
      },
      issuerPrivateKey: .init(authorityKey))

    return ServerCertificates(
      authorityPEM: try authority.serializeAsPEM().pemString,
      leaf: try NIOSSLCertificate(bytes: try leaf.serializeAsPEM().derBytes, format: .der),
      leafKey: try NIOSSLPrivateKey(bytes: Array(leafKey.pemRepresentation.utf8), format: .pem))
  }

  /// The server's TLS context: this leaf, ALPN `h2, http/1.1` (or `http/1.1` alone).
  func serverContext(http1Only: Bool) throws -> NIOSSLContext {
    var configuration = TLSConfiguration.makeServerConfiguration(
      certificateChain: [.certificate(leaf)], privateKey: .privateKey(leafKey))
    configuration.applicationProtocols = http1Only ? ["http/1.1"] : ["h2", "http/1.1"]
    return try NIOSSLContext(configuration: configuration)
  }

  /// Writes the CA certificate to `directory/ca.pem` (mode 0644: it is public), replacing it by rename so a
  /// reader never sees half of it.
  func writeAuthority(to directory: String) throws {
    let path = directory + "/ca.pem"
    let temporary = path + ".\(getpid()).tmp"
    // Ending in a newline, as PEM files do: `cat a.pem b.pem` must make a bundle.
    let text = authorityPEM.hasSuffix("\n") ? authorityPEM : authorityPEM + "\n"
    try Data(text.utf8).write(to: URL(fileURLWithPath: temporary))
    guard rename(temporary, path) == 0 else {
      throw TLSSetupFailure(message: "cannot rename \(temporary) to \(path): \(String(cString: strerror(errno)))")
    }
  }
}

/// The TLS context for `--tls directory` (its ca.pem written); exits with status 1 when it cannot be set up.
func makeTLSContext(directory: String, http1Only: Bool) -> NIOSSLContext {
  do {
    let certificates = try ServerCertificates.make()
    let context = try certificates.serverContext(http1Only: http1Only)
    try certificates.writeAuthority(to: directory)
    return context
  } catch {
    let reason = (error as? TLSSetupFailure)?.message ?? "\(error)"
    standardError("gc-file-server: cannot set up TLS in \(directory): \(reason)")
    exit(1)
  }
}

struct TLSSetupFailure: Error {
  var message: String
}

/// The plain HTTP/1.1 pipeline of one connection (also what a TLS connection gets after ALPN chose http/1.1).
func configureHTTP1(_ channel: any Channel, state: ServerState) throws {
  try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
  try channel.pipeline.syncOperations.addHandler(FileServerHandler(state: state))
}

/// A TLS connection: the handshake, then by ALPN either HTTP/2 (each stream its own FileServerHandler) or
/// HTTP/1.1.
func configureTLS(_ channel: any Channel, context: NIOSSLContext, state: ServerState) -> EventLoopFuture<Void> {
  channel.eventLoop.makeCompletedFuture {
    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
  }.flatMap {
    channel.configureHTTP2SecureUpgrade(
      h2ChannelConfigurator: { channel in
        channel.configureHTTP2Pipeline(
          mode: .server,
          inboundStreamInitializer: { stream in
            stream.eventLoop.makeCompletedFuture {
              try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
              try stream.pipeline.syncOperations.addHandler(FileServerHandler(state: state))
            }
          }
        ).flatMapThrowing { _ in
          // A connection-level protocol error ends the connection (the streams' handlers close only streams).
          try channel.pipeline.syncOperations.addHandler(NIOCloseOnErrorHandler())
        }
      },
      http1ChannelConfigurator: { channel in
        channel.eventLoop.makeCompletedFuture { try configureHTTP1(channel, state: state) }
      })
  }.flatMapErrorThrowing { error in
    channel.close(promise: nil)
    throw error
  }
}
