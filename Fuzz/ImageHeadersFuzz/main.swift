// libFuzzer harness for the image header parsers (PNG/APNG, JPEG, GIF, WebP). Build and run with
// `Fuzz/run.sh ImageHeadersFuzz`; seeds are the test fixtures (Tests/ImageCacheTests/Fixtures/). A plain
// `swift build` compiles the stub at the bottom.
import ImageCache

#if FUZZING
  import CFuzzShim
  import Foundation
  import Glibc

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
    return 0
  }

  var argc = CommandLine.argc
  var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
  exit(LLVMFuzzerRunDriver(&argc, &argv, { fuzzOne($0, $1) }))
#else
  print("ImageHeadersFuzz was built without libFuzzer; build and run it with Fuzz/run.sh.")
#endif
