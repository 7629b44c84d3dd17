// libFuzzer harness for the image header parsers (PNG/APNG, JPEG, GIF, WebP) and, on the same bytes, the disk
// cache's entry format (CacheEntryFormat: header, key, image, as the disk tier reads an entry file). Build and run
// with `Fuzz/run.sh ImageHeadersFuzz`; seeds are the test fixtures (Tests/ImageCacheTests/Fixtures/) and an entry
// in Fuzz/image-seeds/. A plain `swift build` compiles the stub at the bottom.
import ImageCache

#if FUZZING
  import CFuzzShim
  import Foundation
  import Glibc
  @testable import ImageCache

  /// An entry file as `DiskTier.read` and `readHeader` take it (both on any prefix: a trim reads only the first
  /// 520 bytes): nothing traps or reads past the bytes, and what the reader would accept re-encodes to itself.
  func fuzzEntry(_ raw: UnsafeRawBufferPointer) {
    for prefix in [raw.count, min(raw.count, CacheEntryFormat.headerSize + 456)] {
      let bytes = UnsafeRawBufferPointer(rebasing: raw[0..<prefix])
      guard case .success(let header) = CacheEntryFormat.decodeHeader(bytes) else { continue }
      precondition(header.keyLength <= CacheEntryFormat.maximumKeyBytes && header.imageLength <= Int(Int32.max))
      guard CacheEntryFormat.checksumMatches(bytes, keyLength: header.keyLength) else { continue }
      let keyBytes = Array(bytes[CacheEntryFormat.headerSize..<(CacheEntryFormat.headerSize + header.keyLength)])
      // A key of valid UTF-8 is one a store wrote: the same header and key come out of encodeHeader.
      guard let key = String(validating: keyBytes, as: UTF8.self) else { continue }
      precondition(CacheEntryFormat.storedKey(bytes, keyLength: header.keyLength, equals: key), "stored key")
      let encoded = CacheEntryFormat.encodeHeader(
        key: key, info: header.info, imageLength: header.imageLength, storedAt: header.storedAt,
        expiresAt: header.expiresAt, imageChecksum: header.imageChecksum)
      precondition(encoded.elementsEqual(bytes[0..<encoded.count]), "entry header round trip")
      guard header.fileSize == bytes.count else { continue }
      let start = CacheEntryFormat.headerSize + header.keyLength
      let image = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + header.imageLength)])
      if CacheEntryFormat.imageMatches(image, header) { _ = try? ImageHeaders.parse(bytes: image) }
    }
    // The directory's names: an entry's name has a shard, anything else is not read.
    let name = String(decoding: raw.prefix(48), as: UTF8.self)
    if CacheEntryFormat.isEntryName(name) { precondition((0..<256).contains(CacheEntryFormat.shard(ofName: name))) }
  }

  func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    // The parser reads libFuzzer's own buffer, sized exactly, so ASan sees any read past the end.
    let raw = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    let result: Result<ImageInfo, ImageCacheError>
    do throws(ImageCacheError) {
      result = .success(try ImageHeaders.parse(bytes: raw))
    } catch {
      result = .failure(error)
    }
    switch result {
    case .success(let info):
      // What an accepted header may say.
      precondition(info.pixelWidth >= 1 && info.pixelHeight >= 1, "accepted a 0-pixel side: \(info)")
      precondition(
        info.pixelWidth * info.pixelHeight <= ImageHeaders.maxPixelCount, "accepted too many pixels: \(info)")
      precondition(info.frameCount >= 1 && info.frameCount <= size, "frame count beyond what the file holds: \(info)")
      // The parse stops at the image's own end: bytes after it change nothing.
      var longer = Data(raw)
      longer.append(contentsOf: [0xFF, 0xD9, 0x3B, 0x00])
      precondition((try? ImageHeaders.parse(longer)) == info, "trailing bytes changed the answer for \(info)")
    case .failure(let error):
      precondition(!error.description.isEmpty)
      if error.code == .malformed { precondition(error.reason?.isEmpty == false) }
    }
    // The Data entry point agrees with the buffer one.
    precondition((try? ImageHeaders.parse(Data(raw))) == (try? result.get()), "Data and buffer parses differ")
    fuzzEntry(raw)
    return 0
  }

  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, { fuzzOne($0, $1) }))
#else
  print("ImageHeadersFuzz was built without libFuzzer; build and run it with Fuzz/run.sh.")
#endif
