import Logging
import NIOSSL
import SystemLayer

/// The certificate authorities the agent trusts for HTTPS: the system's, plus those of the PEM file named by
/// `$GROUPCONTAINER_DOWNLOAD_CA_FILE` (a company's own CA, or a test server's).
///
/// The file's certificates are *added* to the system's roots (`additionalTrustRoots`), never put in their place:
/// setting the variable does not break downloads from public servers. A file that cannot be used (missing,
/// unreadable, not a regular file, no certificate in it) is reported once, when the agent makes its HTTP client,
/// and the agent goes on with the system's roots alone: downloads from the server that needs the file then fail
/// with a certificate error in their status.
package enum TrustRoots {
  /// The environment variable naming the extra CA file. Sessions start the agent with their own environment, so
  /// setting it for the app (or exporting it before `groupctl`) is enough.
  package static let caFileEnvironmentKey = "GROUPCONTAINER_DOWNLOAD_CA_FILE"
  /// A CA bundle is kilobytes; a larger file is not one (and is not read into memory).
  static let maxFileBytes = 4 << 20

  /// Why the extra CA file is not used.
  package struct Failure: Error, CustomStringConvertible {
    package var description: String
  }

  /// The client TLS configuration: the system's roots, plus `caFile`'s certificates when it names a usable file.
  /// An unusable one is logged as an error (what is wrong, and what to do) and left out.
  package static func clientConfiguration(caFile: String?, logger: Logger) -> TLSConfiguration {
    var tls = TLSConfiguration.makeClientConfiguration()
    guard let caFile, !caFile.isEmpty else { return tls }
    do throws(Failure) {
      let certificates = try certificates(inPEMFile: caFile)
      tls.additionalTrustRoots = [.certificates(certificates)]
      logger.info(
        "HTTPS downloads also trust the certificate authorities of \(caFileEnvironmentKey)",
        metadata: ["file": "\(caFile)", "certificates": "\(certificates.count)"])
    } catch {
      logger.error("\(error)")
    }
    return tls
  }

  /// The certificates of a PEM file (one or more `BEGIN CERTIFICATE` blocks). The path may be a symbolic link
  /// (system CA directories are made of them): it is configuration, not container content.
  package static func certificates(inPEMFile path: String) throws(Failure) -> [NIOSSLCertificate] {
    let ignored = "HTTPS downloads trust only the system's certificate authorities: fix the file or unset the variable"
    let bytes: [UInt8]
    do {
      let file = try SystemFD.open(path, [.readOnly, .followSymlink])
      bytes = try file.readRegularFile(limit: maxFileBytes).bytes
    } catch {
      throw Failure(description: "\(caFileEnvironmentKey)=\(path) cannot be read (\(error)); \(ignored)")
    }
    // NIOSSL's error for a file without any certificate block says no more than for a damaged one.
    let marker = Array("-----BEGIN CERTIFICATE-----".utf8)
    guard bytes.count >= marker.count,
      (0...(bytes.count - marker.count)).contains(where: {
        bytes[$0..<($0 + marker.count)].elementsEqual(marker)
      })
    else {
      throw Failure(
        description: "\(caFileEnvironmentKey)=\(path) holds no certificate (no -----BEGIN CERTIFICATE----- block); "
          + ignored)
    }
    do { return try NIOSSLCertificate.fromPEMBytes(bytes) } catch {
      throw Failure(
        description: "\(caFileEnvironmentKey)=\(path) is not a PEM file of certificates (\(error)); \(ignored)")
    }
  }
}
